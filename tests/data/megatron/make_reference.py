"""Produces tests/data/megatron/*.npz by running Megatron-LM's own dataset code once (not run by the tests).

Each configuration below is built with Megatron-LM's BlendedMegatronDatasetBuilder over GPTDataset on
the corpora in ../shared/fixtures/megatron, and what Megatron built is kept as arrays:

- per split it built: every GPTDataset's document, sample and shuffle index (`{split}/mid{k}/...`),
  the BlendedDataset's dataset index and dataset sample index (`{split}/dataset_index`, ...), and a
  64-bit BLAKE2b digest of every sample's tokens (int64, as Megatron returns them; `{split}/sample_digest`),
  so every index and every token is compared;
- a configuration Megatron refuses is kept with the exception it raised (`refused`);
- `samples.npz`: GPTDataset.__getitem__ (tokens, labels, loss_mask, position_ids, attention_mask) for
  samples holding end-of-document and pad tokens, under each of the 16 combinations of
  reset_position_ids, reset_attention_mask, eod_mask_loss and create_attention_mask.

The configuration of each file is in it (`config`, JSON, in shardmill's terms: corpora by fixture name).

Run (Megatron-LM checked out at MEGATRON, with torch and pybind11 installed and
megatron/core/datasets/helpers_cpp built by its Makefile):

    MEGATRON=/path/to/Megatron-LM python tests/data/megatron/make_reference.py ../shared/fixtures/megatron

(ONLY_SAMPLES=1 rebuilds samples.npz alone.)

Produced with Megatron-LM d98e8a64dd (2026), torch 2.13.0+cpu.
"""

import hashlib
import importlib.abc
import importlib.machinery
import itertools
import json
import os
import sys
import types
from pathlib import Path
from unittest import mock

import numpy as np

HERE = Path(__file__).parent
CORPORA = {"A": "meg-gpt2-openwebtext_text_document", "B": "owt_b_rev599to0_int32",
           "C": "owt_c_600to999_5empty_uint16"}
EOD = 50256
# The fixture corpora hold no GPT-2 end of document (50256), so the sample references call '.' (13), several in
# every sample, the end of document.
SAMPLES_EOD = 13

# name -> (blend or blend_per_split, split, sizes [train, valid, test], options)
CONFIGS = {
    "single_multi_epoch": dict(blend=(["A"], None), split="969,30,1", sizes=[6000, 300, 10], seq=512),
    "single_valid_keeps_partial": dict(blend=(["A"], None), split="90,10", sizes=[None, None, None], seq=128,
                                       drop_last=False),
    "single_without_extra_token": dict(blend=(["C"], None), split="8,1,1", sizes=[1000, 100, None], seq=256,
                                       extra=False),
    "single_size_zero": dict(blend=(["A"], None), split="1", sizes=[0, None, None], seq=128),
    "blend_60_30_10": dict(blend=(["A", "B", "C"], [0.6, 0.3, 0.1]), split="96,3,1",
                           sizes=[10000, 1000, 100], seq=128),
    "blend_unnormalised_weights": dict(blend=(["A", "B", "C"], [0.7, 0.2, 0.4]), split="96,3,1",
                                       sizes=[3333, 333, 33], seq=200),
    "blend_surplus": dict(blend=(["A", "C"], [1.0, 3.0]), split="90,8,2", sizes=[5000, 500, 50], seq=64,
                          surplus=0.1),
    "blend_without_weights": dict(blend=(["A", "B", "C"], None), split="96,3,1", sizes=[4000, 200, 20],
                                  seq=256),
    "blend_without_weights_exhaustive": dict(blend=(["A", "B", "C"], None), split="96,3,1",
                                             sizes=[None, None, None], seq=256),
    "blend_size_zero": dict(blend=(["A", "B"], [0.5, 0.5]), split="98,1,1", sizes=[2000, 0, 0], seq=128),
    "blend_of_one_weighted_corpus": dict(blend=(["A"], [1.0]), split="969,30,1", sizes=[1500, 50, 10], seq=128),
    "blend_valid_keeps_partial": dict(blend=(["A", "B"], [0.4, 0.6]), split="80,20", sizes=[1000, 3000, 0],
                                      seq=128, drop_last=False, seed=7),
    "blend_mixed_dtypes_seed": dict(blend=(["B", "C"], [0.25, 0.75]), split="80,15,5", sizes=[3000, 500, 200],
                                    seq=100, seed=1234),
    "per_split_blends": dict(blend_per_split=[(["A", "B"], [0.3, 0.7]), (["C"], [1.0]), (["A", "C"], None)],
                             sizes=[2000, 100, None], seq=128),
    "per_split_blend_without_weights_sized": dict(blend_per_split=[(["B", "C"], None), None, None],
                                                  sizes=[1200, None, None], seq=128),
    "refused_weights_without_size": dict(blend=(["A", "B"], [0.5, 0.5]), split="969,30,1",
                                         sizes=[None, 10, 10], seq=128),
}


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stands in for Megatron's optional GPU packages, which the dataset code never calls."""

    NAMES = ("transformer_engine", "apex", "flash_attn", "einops", "nvidia_resiliency_ext", "tensorstore", "zarr",
             "mamba_ssm", "causal_conv1d", "nvtx", "flashinfer", "modelopt", "multistorageclient", "wandb",
             "onelogger", "nv_one_logger", "deep_ep", "transformers", "opentelemetry", "emerging_optimizers",
             "tqdm", "regex", "sentencepiece", "tiktoken")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.NAMES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = mock.MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__version__ = [], spec, "99.0.0"
        return module

    def exec_module(self, module):
        pass


def import_megatron(root: str):
    """Megatron's dataset modules without megatron/core/__init__ (which imports the model stack)."""
    sys.meta_path.insert(0, _StubFinder())
    sys.path.insert(0, root)
    for name in ("megatron", "megatron.core"):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = package
    safe = types.ModuleType("megatron.core.safe_globals")
    safe.safe_numpy_load = np.load  # only the lazily mapped cache path calls it
    sys.modules["megatron.core.safe_globals"] = safe
    import megatron.core.parallel_state  # noqa: F401  (before utils: the two import each other)
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    return BlendedDataset, BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig


class Tokenizer:
    """An end-of-document id and no pad token, so Megatron pads with its default (-1)."""

    vocab_size = None  # the dtype comes from each .idx

    def __init__(self, eod: int = EOD):
        self.eod = eod
        self.unique_identifiers = {"class": "Tokenizer", "eod": eod}

    @property
    def pad(self):
        raise AttributeError("no pad token")


def digest(text: np.ndarray) -> np.uint64:
    return np.frombuffer(hashlib.blake2b(np.asarray(text, "<i8").tobytes(), digest_size=8).digest(), "<u8")[0]


def gpt_config(megatron, spec, fixtures, **flags):
    _, _, _, GPTDatasetConfig = megatron
    prefix = lambda names: [str(Path(fixtures) / CORPORA[n]) for n in names]  # noqa: E731
    blend = per_split = None
    if "blend" in spec:
        blend = (prefix(spec["blend"][0]), spec["blend"][1])
    else:
        per_split = [None if b is None else (prefix(b[0]), b[1]) for b in spec["blend_per_split"]]
    return GPTDatasetConfig(
        random_seed=spec.get("seed", 1234), sequence_length=spec["seq"], blend=blend, blend_per_split=per_split,
        split=spec.get("split"), tokenizer=Tokenizer(flags.pop("eod", EOD)), mid_level_dataset_surplus=spec.get("surplus", 0.005),
        drop_last_partial_validation_sequence=spec.get("drop_last", True),
        add_extra_token_to_sequence=spec.get("extra", True), path_to_cache=None,
        reset_position_ids=flags.get("reset_position_ids", False),
        reset_attention_mask=flags.get("reset_attention_mask", False),
        eod_mask_loss=flags.get("eod_mask_loss", False),
        create_attention_mask=flags.get("create_attention_mask", False))


def build(megatron, spec, fixtures, **flags):
    BlendedDataset, Builder, GPTDataset, _ = megatron
    config = gpt_config(megatron, spec, fixtures, **flags)
    return Builder(GPTDataset, spec["sizes"], lambda: True, config).build(), BlendedDataset


def arrays_of(datasets, BlendedDataset) -> dict:
    out = {}
    for split, top in zip(("train", "valid", "test"), datasets):
        if top is None:
            continue
        mids = top.datasets if isinstance(top, BlendedDataset) else [top]
        for k, mid in enumerate(mids):
            for name in ("document_index", "sample_index", "shuffle_index"):
                out[f"{split}/mid{k}/{name}"] = np.asarray(getattr(mid, name))
        if isinstance(top, BlendedDataset):
            out[f"{split}/dataset_index"] = top.dataset_index
            out[f"{split}/dataset_sample_index"] = top.dataset_sample_index
            texts = (top.datasets[d]._query_document_sample_shuffle_indices(int(s))[0]
                     for d, s in zip(top.dataset_index, top.dataset_sample_index))
        else:
            texts = (top._query_document_sample_shuffle_indices(i)[0] for i in range(len(top)))
        out[f"{split}/sample_digest"] = np.array([digest(t) for t in texts], dtype=np.uint64)
    return out


def samples_reference(megatron, fixtures) -> dict:
    """GPTDataset.__getitem__ for samples with EOD and pad tokens, for each flag combination."""
    out = {}
    for name in ("single_valid_keeps_partial", "single_without_extra_token"):
        spec = CONFIGS[name]
        flags_list = list(itertools.product((False, True), repeat=4))
        for flags in flags_list:
            keys = ("reset_position_ids", "reset_attention_mask", "eod_mask_loss", "create_attention_mask")
            datasets, _ = build(megatron, spec, fixtures, eod=SAMPLES_EOD, **dict(zip(keys, flags)))
            valid = datasets[1]
            padded = int(np.flatnonzero(valid.shuffle_index == len(valid) - 1)[0])
            picks = [0, 1, 2, padded] if name == "single_valid_keeps_partial" else [0, 1, 2, 3]
            tag = f"{name}/" + "".join("1" if f else "0" for f in flags)
            for i, idx in enumerate(picks):
                sample = valid[idx]
                out[f"{tag}/{i}/index"] = np.array(idx)
                for field in ("tokens", "labels", "loss_mask", "position_ids", "attention_mask"):
                    value = sample.get(field)
                    if value is not None:
                        out[f"{tag}/{i}/{field}"] = value.numpy()
    out["config"] = np.array(json.dumps({"eod": SAMPLES_EOD, "pad": -1, "flags": ["reset_position_ids",
                                         "reset_attention_mask", "eod_mask_loss", "create_attention_mask"]}))
    return out


def main(fixtures: str) -> None:
    megatron = import_megatron(os.environ["MEGATRON"])
    if os.environ.get("ONLY_SAMPLES"):
        np.savez_compressed(HERE / "samples.npz", **samples_reference(megatron, fixtures))
        return
    for name, spec in CONFIGS.items():
        record = {"config": np.array(json.dumps(spec))}
        try:
            datasets, BlendedDataset = build(megatron, spec, fixtures)
            record.update(arrays_of(datasets, BlendedDataset))
        except (AssertionError, ValueError, RuntimeError, IndexError) as err:
            if not name.startswith("refused"):
                raise
            record["refused"] = np.array(f"{type(err).__name__}: {err}")
        np.savez_compressed(HERE / f"{name}.npz", **record)
        print(name, sorted(k for k in record if k.endswith("sample_digest")) or record.get("refused"))
    np.savez_compressed(HERE / "samples.npz", **samples_reference(megatron, fixtures))


if __name__ == "__main__":
    main(sys.argv[1])
