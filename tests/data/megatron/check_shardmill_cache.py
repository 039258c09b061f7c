"""Points Megatron-LM's builder at the cache shardmill wrote (not run by the tests; needs Megatron-LM and torch).

For configurations (a) single_corpus, (b) weighted_blend, (c) blend_without_weights, (d) per_split_blends and
(d') per_split_blends with fast_cache_load: shardmill writes the cache of every dataset Megatron builds (one
cache-only run per split, per validation set: the runs tests/transforms/tokens/test_megatron_cache.py makes),
all into one directory; Megatron's builder is then given that directory as path_to_cache and must log only
"Load the ..." lines (no "Build and save"), and every __getitem__ of the datasets it returns must equal what it
served when it built them itself (cache_reference/<name>/getitem_digest.npz).

With MEASURE=1 instead: shardmill writes the cache of make_cache_reference.py's MEASURE_CONFIG (the three
corpora, 10,000,000 training samples) and make_cache_reference.py's own TIME_ONCE mode times Megatron's
start-up to its first __getitem__ building its indices (empty cache) and loading shardmill's.

Run from the repository root:

    MEGATRON=/path/to/Megatron-LM .venv/bin/python tests/data/megatron/check_shardmill_cache.py ../shared/fixtures/megatron
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))
from make_cache_reference import CONFIGS, MEASURE_CONFIG, Megatron, digests_of, prefix  # noqa: E402

from tests.transforms.tokens.test_megatron_cache import reference, shardmill_runs, token_config  # noqa: E402

CHECKED = ("single_corpus", "weighted_blend", "blend_without_weights", "per_split_blends",
           "per_split_blends_fast_cache_load")


def write_shardmill_cache(runs: list[str], cache: Path, work: Path) -> float:
    """Each config text run by `shardmill run` (cache only) in its own process; their caches copied into cache.
    Returns the seconds the runs took."""
    cache.mkdir(parents=True, exist_ok=True)
    seconds = 0.0
    for k, text in enumerate(runs):
        config, out = work / f"run{k}.textproto", work / f"out{k}"
        config.write_text(text)
        start = time.perf_counter()
        subprocess.run(["prlimit", f"--as={3 << 30}", "timeout", "1200", str(Path(sys.executable).parent / "shardmill"),
                        "run", "--config", str(config), "--output", str(out)],
                       check=True, capture_output=True, text=True)
        seconds += time.perf_counter() - start
        manifest = json.loads((out / ".manifest.json").read_text())
        directory = out / manifest["stats"]["token_dataset"]["megatron_cache"]["directory"]
        for file in directory.iterdir():
            shutil.copyfile(file, cache / file.name)
    return seconds


def check(megatron: Megatron, name: str, work: Path) -> None:
    ref = reference(name)
    cache = work / name / "cache"
    write_shardmill_cache(shardmill_runs(ref), cache, work / name)
    options = {"fast_cache_load": True} if ref["fast_cache_load"] else {}
    datasets, built, log = megatron.build(CONFIGS[name], str(cache), **options)
    expected = np.load(HERE / "cache_reference" / name / "getitem_digest.npz")
    served = digests_of(datasets)
    same = sorted(served) == sorted(expected.files) and all(np.array_equal(served[s], expected[s]) for s in served)
    kinds = {k: sum(1 for line in log if line.startswith(k)) for k in ("Build and save", "Load the")}
    print(f"{name}: {len(os.listdir(cache))} cache files from shardmill; Megatron log {kinds}"
          f"{' (fast_cache_load)' if options else ''}; __getitem__ equal to its own build: {same} "
          f"({', '.join(f'{s} {len(d)}' for s, d in sorted(served.items()))})")
    assert kinds["Build and save"] == 0 and kinds["Load the"] == len(built) and same, name


def measure(fixtures: str, work: Path) -> None:
    spec = MEASURE_CONFIG
    ref = {**reference("weighted_blend"), "split": spec["split"], "sizes": spec["sizes"], "seq_length": spec["seq"],
           "blend": [[prefix(n) for n in spec["blend"][0]], spec["blend"][1]]}
    runs = [token_config(ref, ref["blend"][0], ref["blend"][1], s, size, split=ref["split"])
            for s, size in zip(("TRAIN", "VALID", "TEST"), ref["sizes"])]
    cache = work / "measure" / "cache"
    seconds = write_shardmill_cache(runs, cache, work / "measure")
    size = sum(p.stat().st_size for p in cache.iterdir())
    print(f"shardmill wrote {len(list(cache.iterdir()))} cache files, {size / 2**20:.1f} MiB, in {seconds:.1f} s "
          f"(3 cache-only runs, each a fresh process); config {json.dumps(spec)}")
    empty = work / "measure" / "empty"
    for run, path in (("megatron builds", empty), ("megatron loads shardmill's cache", cache),
                      ("megatron loads shardmill's cache", cache)):
        result = subprocess.run(
            ["prlimit", f"--as={3 << 30}", "timeout", "1200", sys.executable, str(HERE / "make_cache_reference.py"),
             fixtures], env={**os.environ, "TIME_ONCE": f"{path}:0", "MEASURE": ""},
            capture_output=True, text=True, check=True)
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        log = figures.pop("log")
        print(run, json.dumps({k: round(v, 3) for k, v in figures.items()}),
              {k: sum(1 for line in log if line.startswith(k)) for k in ("Build and save", "Load the")})
        if path == empty:
            shutil.rmtree(empty)


def main(fixtures: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="shardmill-megatron-cache-"))
    try:
        if os.environ.get("MEASURE"):
            measure(fixtures, work)
            return
        megatron = Megatron(os.environ["MEGATRON"], fixtures)
        for name in CHECKED:
            check(megatron, name, work)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main(sys.argv[1])
