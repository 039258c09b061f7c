"""Produces tests/data/megatron/cache_reference/ by running Megatron-LM's dataset code once (not run by the tests).

For each configuration below, Megatron-LM's BlendedMegatronDatasetBuilder builds GPTDataset/BlendedDataset
splits with `path_to_cache` set, twice: the first run must build and save every index ("Build and save the
..." log lines only), the second must load every one of them from the cache ("Load the ..." lines only) and
write nothing. Kept per configuration, in cache_reference/<name>/:

- `cache/`: every file Megatron wrote under path_to_cache, as written (description.txt and the .npy files);
- `getitem_digest.npz`: per split (and per validation set: `valid/0`, `valid/1`, ...) a 64-bit BLAKE2b
  digest of every `__getitem__(i)` of the dataset the builder returned: the bytes of tokens (int64), labels
  (int64), loss_mask (float32) and position_ids (int64), as Megatron returns them, in that order;
- `config.json`: the exact inputs as passed to Megatron (data path prefixes, split, sizes, seq_length, seed,
  options, the tokenizer's identity), the datasets in the order Megatron built them with their hash and
  files, each top-level dataset's length, the dataset-level log lines of both runs, and what Megatron
  refused where a configuration probes a refusal.

The data path prefixes given to Megatron are fixed strings, /data/megatron/<fixture name>, because Megatron's
cache hash covers the prefixes as given: the corpora are opened from the fixtures directory by mapping that
root in GPTDataset.build_low_level_dataset (which only opens the .idx/.bin; the dataset keeps the prefix as
given), so the hashes do not depend on this machine's checkout. The tokenizer is Megatron's GPT-2 BPE
tokenizer (--tokenizer-type GPT2BPETokenizer --vocab-file /data/megatron/gpt2-vocab.json --merge-file
/data/megatron/gpt2-merges.txt, every other tokenizer argument at its default) as the dataset code sees it:
its `unique_identifiers` are computed by Megatron's own build_tokenizer (with the vocabulary loading
stubbed), its eod is 50256 and it has no pad token, so Megatron pads with -1 (as make_reference.py).

Run (Megatron-LM and helpers_cpp as make_reference.py says):

    MEGATRON=/path/to/Megatron-LM python tests/data/megatron/make_cache_reference.py ../shared/fixtures/megatron

With MEASURE=1 it instead times, on the largest blend below (MEASURE_CONFIG), Megatron's start-up to its first
__getitem__ when it builds its indices and when it loads them from the cache, and GPTDataset.__getitem__
random access, each in its own process (see measure()).

Produced with Megatron-LM d98e8a64dd (2026), torch 2.13.0+cpu, numpy as recorded in each config.json.
"""

import hashlib
import json
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from unittest import mock

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from make_reference import CORPORA, EOD, Tokenizer, import_megatron  # noqa: E402

OUT = HERE / "cache_reference"
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
DATA_ROOT = "/data/megatron"
SPLITS = ("train", "valid", "test")
# Megatron's dataset-level log lines; the first run must show only the first kind, the second only the second.
DATASET_LOG = re.compile(r"^(Build and save|Load) the (GPTDataset|BlendedDataset)\b")


def prefix(name: str) -> str:
    return f"{DATA_ROOT}/{CORPORA[name]}"


# name -> inputs; a blend is (corpus letters, weights or None). Defaults: seed 1234, add_extra_token True,
# drop_last_partial_validation_sequence True, mid_level_dataset_surplus 0.005, no fast cache load.
CONFIGS = {
    # (a) one corpus, several epochs (train), all three splits
    "single_corpus": dict(blend=(["A"], None), split="969,30,1", sizes=[6000, 300, 10], seq=512),
    # (b) weighted blend of the three corpora
    "weighted_blend": dict(blend=(["A", "B", "C"], [0.6, 0.3, 0.1]), split="96,3,1",
                           sizes=[10000, 1000, 100], seq=128),
    # (c) blend without weights: weighted by the corpora's sample counts
    "blend_without_weights": dict(blend=(["A", "B", "C"], None), split="96,3,1", sizes=[4000, 200, 20], seq=256),
    # (d) train/valid/test each its own blend (--train-data-path ... or --per-split-data-args-path)
    "per_split_blends": dict(blend_per_split=[(["A", "B"], [0.3, 0.7]), (["C"], [1.0]), (["A", "C"], None)],
                             sizes=[2000, 100, None], seq=128),
    # (d') the same, loaded with fast_cache_load (--dataloader-fast-cache-load) and defer_npy_index_mmap
    # (fast_cache_load is not in the hash: its cache files are per_split_blends' and are kept once, there)
    "per_split_blends_fast_cache_load": dict(
        blend_per_split=[(["A", "B"], [0.3, 0.7]), (["C"], [1.0]), (["A", "C"], None)],
        sizes=[2000, 100, None], seq=128, fast_cache_load_second_run=True, same_cache_as="per_split_blends"),
    # (e) several validation sets (--multiple-validation-sets): one GPTDataset per valid prefix, each of the
    # valid size (Megatron's training loop runs this only with --full-validation; the builder builds it)
    "multiple_validation_sets": dict(
        blend_per_split=[(["A", "B", "C"], [0.5, 0.3, 0.2]), (["A", "B", "C"], None), (["C"], None)],
        sizes=[3000, 200, 40], seq=128, multiple_validation_sets=True),
    # (f) --multiple-validation-sets --full-validation: valid size None (training passes eval_samples None),
    # so every validation set is one full epoch of its corpus
    "full_validation_multiple_sets": dict(
        blend_per_split=[(["A", "B", "C"], [0.5, 0.3, 0.2]), (["A", "B", "C"], None), (["C"], None)],
        sizes=[3000, None, 40], seq=128, multiple_validation_sets=True, full_validation=True),
    # (f) --full-validation alone: valid size None, so the valid blend is the exhaustive BlendedDataset
    "full_validation_one_set": dict(
        blend_per_split=[(["A", "B", "C"], [0.5, 0.3, 0.2]), (["A", "B"], None), (["C"], None)],
        sizes=[3000, None, 40], seq=128, full_validation=True),
}

# The largest blend measure() times: the three corpora, weighted, ten million training samples.
MEASURE_CONFIG = dict(blend=(["A", "B", "C"], [0.6, 0.3, 0.1]), split="98,1,1",
                      sizes=[10_000_000, 100_000, 10_000], seq=128)


def gpt2_bpe_identity() -> dict:
    """unique_identifiers of Megatron's GPT-2 BPE tokenizer for the vocab/merges paths above, by Megatron's code."""
    from megatron.core.tokenizers.text.text_tokenizer import MegatronTokenizerText
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    args = types.SimpleNamespace(  # megatron/training/config/training_config.py defaults
        tokenizer_type="GPT2BPETokenizer", vocab_file=f"{DATA_ROOT}/gpt2-vocab.json",
        merge_file=f"{DATA_ROOT}/gpt2-merges.txt", special_tokens=None, tokenizer_hf_no_use_fast=False,
        trust_remote_code=False, tokenizer_hf_no_include_special_tokens=False, use_gigatoken=False,
        metadata_path=None, pad_vocab_size=False)
    # Only the vocabulary loading is stubbed: the identity is built from the arguments alone.
    with mock.patch.object(MegatronTokenizerText, "_restore_model", lambda self, **kwargs: object()):
        return dict(build_tokenizer(args).unique_identifiers)


class GPT2BPETokenizer(Tokenizer):
    """What the dataset code reads of the GPT-2 BPE tokenizer: its identity, eod; no pad token."""

    def __init__(self, identity: dict):
        super().__init__(EOD)
        self.unique_identifiers = identity


class Megatron:
    """Megatron's dataset code, opening /data/megatron/<name> from the fixtures and recording what it builds."""

    def __init__(self, root: str, fixtures: str):
        self.BlendedDataset, self.Builder, self.GPTDataset, self.GPTDatasetConfig = import_megatron(root)
        self.identity = gpt2_bpe_identity()
        self.built = []  # (class, split, hash) in the order Megatron builds or loads them
        self.log = []
        opened = self.GPTDataset.build_low_level_dataset
        fixtures = Path(fixtures).resolve()

        def build_low_level_dataset(dataset_path, config):
            return opened(str(fixtures / Path(dataset_path).relative_to(DATA_ROOT)), config)

        self.GPTDataset.build_low_level_dataset = staticmethod(build_low_level_dataset)
        self._record(self.GPTDataset, "_build_document_sample_shuffle_indices", "index_split")
        self._record(self.BlendedDataset, "_build_indices", "split")
        handler = logging.Handler(logging.INFO)
        handler.emit = lambda record: self.log.append(record.getMessage())
        megatron_log = logging.getLogger("megatron.core.datasets")
        megatron_log.setLevel(logging.INFO)
        megatron_log.addHandler(handler)

    def _record(self, cls, method, split_attribute):
        original = getattr(cls, method)
        built = self.built

        def recorded(dataset):
            built.append((type(dataset).__name__, getattr(dataset, split_attribute).name,
                          dataset.unique_description_hash))
            return original(dataset)

        setattr(cls, method, recorded)

    def config(self, spec: dict, path_to_cache: str, **options):
        # Without a path_to_cache Megatron caches next to the corpus (<prefix>/cache/GPTDataset_indices).
        assert path_to_cache, "a path_to_cache is required"
        blend = per_split = None
        if "blend" in spec:
            blend = ([prefix(n) for n in spec["blend"][0]], spec["blend"][1])
        else:
            per_split = [None if b is None else ([prefix(n) for n in b[0]], b[1]) for b in spec["blend_per_split"]]
        return self.GPTDatasetConfig(
            random_seed=spec.get("seed", 1234), sequence_length=spec["seq"], blend=blend, blend_per_split=per_split,
            split=spec.get("split"), tokenizer=GPT2BPETokenizer(self.identity),
            multiple_validation_sets=spec.get("multiple_validation_sets"),
            full_validation=spec.get("full_validation"), path_to_cache=path_to_cache,
            reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False,
            **options)

    def build(self, spec: dict, path_to_cache: str, **options):
        """The builder's datasets, the (class, split, hash) it built or loaded, its dataset-level log lines."""
        self.built.clear()
        self.log.clear()
        config = self.config(spec, path_to_cache, **options)
        datasets = self.Builder(self.GPTDataset, spec["sizes"], lambda: True, config).build()
        return datasets, list(self.built), [line for line in self.log if DATASET_LOG.match(line)]


def getitem_digest(sample: dict) -> np.uint64:
    h = hashlib.blake2b(digest_size=8)
    for field in ("tokens", "labels", "loss_mask", "position_ids"):
        h.update(np.ascontiguousarray(sample[field].numpy()).tobytes())
    return np.frombuffer(h.digest(), "<u8")[0]


def top_level(datasets) -> dict:
    """split name (valid/0, valid/1, ... for several validation sets) -> the dataset the builder returned."""
    out = {}
    for split, top in zip(SPLITS, datasets):
        if isinstance(top, list):
            out.update({f"{split}/{k}": dataset for k, dataset in enumerate(top)})
        elif top is not None:
            out[split] = top
    return out


def digests_of(datasets) -> dict:
    return {name: np.array([getitem_digest(top[i]) for i in range(len(top))], dtype=np.uint64)
            for name, top in top_level(datasets).items()}


def cache_files(path: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def refusal(call) -> str:
    try:
        call()
    except (AssertionError, FileNotFoundError, ValueError, RuntimeError) as err:
        return f"{type(err).__name__}: {' '.join(str(err).split())}"
    raise AssertionError("Megatron did not refuse")


def produce(megatron: Megatron, name: str, spec: dict, work: Path) -> None:
    cache = work / name
    first, built, first_log = megatron.build(spec, str(cache))
    assert first_log and all(line.startswith("Build and save") for line in first_log), first_log
    written = cache_files(cache)
    second_options = {"fast_cache_load": True} if spec.get("fast_cache_load_second_run") else {}
    second, loaded, second_log = megatron.build(spec, str(cache), **second_options)
    assert all(line.startswith("Load the") for line in second_log), second_log
    assert len(second_log) == len(first_log) and loaded == built, (second_log, loaded, built)
    assert cache_files(cache) == written, f"{name}: the second run changed the cache"
    digests = digests_of(first)
    for split, digest in digests_of(second).items():
        assert np.array_equal(digest, digests[split]), f"{name} {split}: loaded datasets differ from built"

    record = {
        "megatron_commit": MEGATRON_COMMIT, "numpy": np.__version__,
        "data_root": DATA_ROOT, "fixtures": {prefix(n): CORPORA[n] for n in CORPORA},
        "blend": None, "blend_per_split": None, "split": spec.get("split"), "sizes": spec["sizes"],
        "seq_length": spec["seq"], "seed": spec.get("seed", 1234), "add_extra_token_to_sequence": True,
        "drop_last_partial_validation_sequence": True, "mid_level_dataset_surplus": 0.005,
        "multiple_validation_sets": spec.get("multiple_validation_sets"),
        "full_validation": spec.get("full_validation"),
        "cache": "cache" if "same_cache_as" not in spec else f"../{spec['same_cache_as']}/cache",
        "fast_cache_load": bool(second_options), "defer_npy_index_mmap": False,
        "reset_position_ids": False, "reset_attention_mask": False, "eod_mask_loss": False,
        "create_attention_mask": False,
        "tokenizer": {"type": "GPT2BPETokenizer", "vocab_file": f"{DATA_ROOT}/gpt2-vocab.json",
                      "merge_file": f"{DATA_ROOT}/gpt2-merges.txt", "unique_identifiers": megatron.identity,
                      "eod": EOD, "pad": -1},
        "built": [{"class": c, "split": s, "hash": h,
                   "files": sorted(f for f in written if f.startswith(f"{h}-{c}-{s}-"))} for c, s, h in built],
        "lengths": {split: len(top) for split, top in top_level(first).items()},
        "log": {"first_run": first_log, "second_run": second_log},
    }
    if "blend" in spec:
        record["blend"] = [[prefix(n) for n in spec["blend"][0]], spec["blend"][1]]
    else:
        record["blend_per_split"] = [None if b is None else [[prefix(n) for n in b[0]], b[1]]
                                     for b in spec["blend_per_split"]]
    assert sorted(f for entry in record["built"] for f in entry["files"]) == sorted(written)

    if second_options:
        # defer_npy_index_mmap: nothing is loaded when building; each index is mapped at its first access.
        deferred, _, deferred_log = megatron.build(spec, str(cache), fast_cache_load=True, defer_npy_index_mmap=True)
        for split, digest in digests_of(deferred).items():
            assert np.array_equal(digest, digests[split]), f"{name} {split}: deferred datasets differ"
        record["log"]["fast_cache_load_and_defer_npy_index_mmap_run"] = deferred_log
        empty = work / f"{name}-empty"
        record["refused"] = {
            "fast_cache_load with blend (--data-path)": refusal(lambda: megatron.config(
                CONFIGS["weighted_blend"], str(empty), fast_cache_load=True)),
            "fast_cache_load with an empty path_to_cache": refusal(lambda: megatron.build(
                spec, str(empty), fast_cache_load=True)),
        }
        record["refused"] = {k: v.replace(str(empty), "<empty path_to_cache>") for k, v in record["refused"].items()}
    if spec.get("full_validation"):
        record["refused"] = {"full_validation (valid size None) with a weighted blend": refusal(
            lambda: megatron.Builder(megatron.GPTDataset, [3000, None, 40], lambda: True,
                                     megatron.config(CONFIGS["weighted_blend"], str(work / "unused"))))}

    target = OUT / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    if "same_cache_as" in spec:
        assert cache_files(OUT / spec["same_cache_as"] / "cache") == written, f"{name}: cache differs"
    else:
        (target / "cache").mkdir()
        for file, data in written.items():
            (target / "cache" / file).write_bytes(data)
    np.savez_compressed(target / "getitem_digest.npz", **digests)
    (target / "config.json").write_text(json.dumps(record, indent=1) + "\n")
    print(name, record["lengths"], f"{len(written)} cache files")


def time_once(root: str, fixtures: str, path_to_cache: str, accesses: int) -> dict:
    """Start-up to the first __getitem__ (builder construction, build(), train[0]), then random access."""
    t0 = time.perf_counter()
    megatron = Megatron(root, fixtures)
    imported = time.perf_counter()
    datasets, _, log = megatron.build(MEASURE_CONFIG, path_to_cache)
    datasets[0][0]
    first = time.perf_counter()
    out = {"import_s": imported - t0, "to_first_getitem_s": first - imported, "log": log,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if accesses:
        blend = datasets[0]
        rng = np.random.default_rng(0)
        for name, dataset in (("GPTDataset", blend.datasets[0]), ("BlendedDataset", blend)):
            picks = rng.integers(0, len(dataset), accesses)
            t = time.perf_counter()
            for i in picks:
                dataset[int(i)]
            out[f"{name}_getitem_per_s"] = accesses / (time.perf_counter() - t)
        out["lengths"] = {"blend": len(blend), "mid": [len(d) for d in blend.datasets]}
    return out


def measure(root: str, fixtures: str) -> None:
    """Build, then load, each in a fresh process capped at 3 GiB and 20 minutes."""
    work = Path(tempfile.mkdtemp(prefix="megatron-cache-measure-"))
    try:
        for run, accesses in (("build", 0), ("load", 20_000), ("load", 20_000)):
            result = subprocess.run(
                ["prlimit", f"--as={3 << 30}", "timeout", "1200", sys.executable, __file__, fixtures],
                env={**os.environ, "TIME_ONCE": f"{work / 'cache'}:{accesses}", "MEASURE": ""},
                capture_output=True, text=True, check=True)
            figures = json.loads(result.stdout.strip().splitlines()[-1])
            log = figures.pop("log")
            print(run, json.dumps(figures), {k: sum(1 for line in log if line.startswith(k))
                                             for k in ("Build and save", "Load the")})
        size = sum(p.stat().st_size for p in (work / "cache").iterdir())
        print(f"cache: {len(list((work / 'cache').iterdir()))} files, {size / 2**20:.1f} MiB;",
              f"config {json.dumps(MEASURE_CONFIG)}")
    finally:
        shutil.rmtree(work)


def main(fixtures: str) -> None:
    root = os.environ["MEGATRON"]
    if os.environ.get("TIME_ONCE"):
        path_to_cache, accesses = os.environ["TIME_ONCE"].rsplit(":", 1)
        print(json.dumps(time_once(root, fixtures, path_to_cache, int(accesses))))
        return
    if os.environ.get("MEASURE"):
        measure(root, fixtures)
        return
    megatron = Megatron(root, fixtures)
    work = Path(tempfile.mkdtemp(prefix="megatron-cache-reference-"))
    try:
        for name, spec in CONFIGS.items():
            produce(megatron, name, spec, work)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main(sys.argv[1])
