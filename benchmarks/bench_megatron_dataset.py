"""MegatronDataset (Megatron-LM's map-style dataset over a token output): samples/s in Megatron's sampler order
and by random access, beside Megatron's own GPTDataset/BlendedDataset.__getitem__ on the same configuration.

    python -m benchmarks.bench_megatron_dataset [--train-samples 10000000] [--row-group-bytes 65536 4194304]
        [--accesses 20000] [--rounds 3] [--megatron /tmp/megatron]

The configuration is make_cache_reference.py's MEASURE one: `--data-path 0.6 A 0.3 B 0.1 C --split 98,1,1`,
seq 128, seed 1234, over ../shared/fixtures/megatron; shardmill writes its train split (a blend: int32
samples of 129 tokens) once per row-group size asked. Per output, each round, in one process:

- sequential: MegatronPretrainingSampler's order (consecutive micro-batches of 32 from 0) for `accesses`
  samples, fetched the way torch's DataLoader fetches a batch (`__getitems__`), and one `__getitem__` at a
  time;
- random: `accesses` uniform indices (the same for every round), one `__getitem__` each (Megatron's
  measurement), and in batches of 32 through `__getitems__` (MegatronPretrainingRandomSampler's access).

Every way opens a fresh dataset (cold row-group cache, warm page cache; the open is timed apart), after one
untimed round (the first calls into torch and numpy are cold). With --megatron, Megatron's own figure
comes from make_cache_reference.py's TIME_ONCE mode in a child process (build the indices into a cache, then
load them and time 20,000 random __getitem__ of the train GPTDataset of A and of the BlendedDataset); skipped
with a note when Megatron does not import. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from benchmarks.harness import emit, interleaved_rounds, last_json_line, progress, run_child, summary
from shardmill.native_ext import MegatronDataset, load_manifest
from tests.support.cli import shardmill_command
from tests.support.paths import REPO, SHARED_FIXTURES

FIXTURES = os.path.join(SHARED_FIXTURES, "megatron")
CORPORA = ("meg-gpt2-openwebtext_text_document", "owt_b_rev599to0_int32", "owt_c_600to999_5empty_uint16")
WEIGHTS = (0.6, 0.3, 0.1)
EOD = 50256
MICRO_BATCH = 32
MEGATRON_SCRIPT = os.path.join(REPO, "tests", "data", "megatron", "make_cache_reference.py")


def write_output(out: str, train_samples: int, row_group_bytes: int) -> dict:
    blend = " ".join(f'blend {{ path_prefix: "{os.path.join(FIXTURES, corpus)}" weight: {weight} }}'
                     for corpus, weight in zip(CORPORA, WEIGHTS))
    config = out + ".pbtxt"
    shards = max(1, train_samples // 500_000)  # ~260 MiB shards: a shard is sorted in memory when written
    with open(config, "w") as f:
        f.write(f'token_dataset {{ {blend} split: "98,1,1" num_samples: {train_samples} use_split: TRAIN '
                f'seq_length: 128 random_seed: 1234 }} output {{ path: "{out}" row_group_bytes: {row_group_bytes} num_shards: {shards} }}')
    # In a child: the job's memory (Arrow's pool, Beam) stays out of the process that reads.
    run = run_child(shardmill_command("-q", "run", "--config", config), timeout=3600, address_limit_bytes=3 << 30)
    run.check(f"shardmill run --config {config}")
    return {**load_manifest(out), "job_seconds": round(run.seconds, 1), "job_peak_rss_mib": run.peak_rss_mib}


def ways(out: str, accesses: int) -> dict:
    """name -> a run that opens a fresh dataset (cold row-group cache, warm page cache), reads `accesses` samples
    and returns (samples/s of the reads, seconds the open took): the open (every shard's footer checked) is
    timed apart, as Megatron's figure excludes building its datasets."""
    n = len(MegatronDataset(out, EOD))
    sequential = [list(range(s, min(s + MICRO_BATCH, accesses))) for s in range(0, min(accesses, n), MICRO_BATCH)]
    picks = np.random.default_rng(0).integers(0, n, accesses).tolist()
    shuffled = [picks[s:s + MICRO_BATCH] for s in range(0, accesses, MICRO_BATCH)]

    def timed_reads(read, count):
        def run():
            start = time.perf_counter()
            dataset = MegatronDataset(out, EOD)
            opened = time.perf_counter()
            read(dataset)
            return count / (time.perf_counter() - opened), opened - start
        return run

    def per_batch(dataset, batches):
        for batch in batches:
            dataset.__getitems__(batch)

    def per_item(dataset, indices):
        for i in indices:
            dataset[i]

    in_order = [i for batch in sequential for i in batch]
    return {"sequential, __getitems__ per micro-batch": timed_reads(lambda d: per_batch(d, sequential), len(in_order)),
            "sequential, __getitem__": timed_reads(lambda d: per_item(d, in_order), len(in_order)),
            "random, __getitem__": timed_reads(lambda d: per_item(d, picks), len(picks)),
            "random, __getitems__ per micro-batch": timed_reads(lambda d: per_batch(d, shuffled), len(picks))}


def megatron_figures(root: str, work: str) -> dict:
    """Megatron's own random __getitem__ rate on the same configuration, or why there is none."""
    if not os.path.isdir(root):
        return {"skipped": f"no Megatron-LM checkout at {root}"}
    cache = os.path.join(work, "megatron-cache")
    env = {**os.environ, "MEGATRON": root}
    figures = {}
    for run, accesses in (("build", 0), ("load", 20_000)):
        child = run_child([sys.executable, MEGATRON_SCRIPT, FIXTURES], timeout=1200, address_limit_bytes=3 << 30,
                          env={**env, "TIME_ONCE": f"{cache}:{accesses}", "MEASURE": ""})
        if child.returncode:
            return {"skipped": f"Megatron's {run} failed (exit {child.returncode}): {child.stderr.strip()[-400:]}"}
        figures[run] = {k: v for k, v in last_json_line(child.stdout).items() if k != "log"}
        figures[run]["peak_rss_mib"] = child.peak_rss_mib
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-samples", type=int, default=10_000_000)
    parser.add_argument("--row-group-bytes", type=int, nargs="+", default=[65536, 4 << 20])
    parser.add_argument("--accesses", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--megatron", default=None, help="a Megatron-LM checkout to measure beside (optional)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench_megatron_dataset_")
    try:
        report = {"train_samples": args.train_samples, "seq_length": 128, "accesses": args.accesses,
                  "micro_batch": MICRO_BATCH, "outputs": {}}
        for row_group_bytes in args.row_group_bytes:
            out = os.path.join(work, f"out-{row_group_bytes}")
            manifest = write_output(out, args.train_samples, row_group_bytes)
            runs = interleaved_rounds(ways(out, args.accesses), args.rounds, warmup_rounds=1)  # first calls are cold
            rows_per_group = [n for shard in manifest["shards"] for n in shard["row_groups"]]
            figures = {name: summary([run.value[0] for run in timed], 0) for name, timed in runs.items()}
            opens = [run.value[1] for timed in runs.values() for run in timed]
            report["outputs"][f"row_group_bytes {row_group_bytes}"] = {
                "samples": sum(rows_per_group),
                "shards": len(manifest["shards"]), "rows_per_row_group": int(np.median(rows_per_group)),
                "job_seconds": manifest["job_seconds"], "job_peak_rss_mib": manifest["job_peak_rss_mib"],
                "open_seconds": summary(opens), "samples_per_s": figures}
            progress({row_group_bytes: figures})
            shutil.rmtree(out)
        if args.megatron:
            report["megatron"] = megatron_figures(args.megatron, work)
        emit(report)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
