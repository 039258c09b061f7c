"""The token job's plan, made on the launcher: Megatron's indices of one split, and the shard ranges.

Per corpus: the chosen split's sequence range (Megatron's split string),
optionally the sequences kept by threshold-gamma, and its GPTDataset's
document, sample and shuffle indices (megatron_index.py); for a blend, the
BlendedDataset's dataset index and dataset sample index (megatron_blend.py).
The indices travel to the workers as one npz file kept in the output
(INDICES_NAME); shard k holds positions [k·n, (k+1)·n) of the split's
sample stream.
"""

from __future__ import annotations

import dataclasses
import io
import time

import numpy as np

from shardmill.transforms.common.discovery import InputError
from shardmill.transforms.common.filesystem import file_size, read_all
from shardmill.transforms.common.keyed_hash import STREAM_KEEP, hash_words, unit_float
from shardmill.transforms.lc0.sampling import acceptance_probability
from shardmill.transforms.output.shard_count import ShardSizing, shard_count
from shardmill.transforms.tokens.megatron_blend import parse_split, plan_blend, split_matrix, split_range
from shardmill.transforms.tokens.megatron_index import GPTIndices, IndexedDataset, build_gpt_indices, parse_index

# In the generation's metadata directory. One corpus: document_index, sample_index, shuffle_index
# (its GPTDataset's). A blend: corpus{k}_document_index, corpus{k}_sample_index, corpus{k}_shuffle_index
# per corpus k (in config order), and blend_dataset_index, blend_dataset_sample_index (BlendedDataset's).
INDICES_NAME = "megatron-indices.npz"
# What makes a token output smaller, for a plan refused for its size.
WRITE_LESS = "ask for fewer token_dataset.num_samples"


@dataclasses.dataclass(frozen=True)
class TokenPlan:
    """Everything the workers need, as plain values."""

    prefixes: tuple[str, ...]
    blended: bool
    seq_length: int
    add_extra_token: bool
    split: str  # train, valid or test
    dtype: str  # numpy dtype string of the samples
    row_bytes: int
    indices_npz: bytes
    tasks: tuple[tuple[int, int, int], ...]  # (shard, first position, end position)
    tokens_per_epoch: tuple[int, ...]  # per corpus
    stats: dict
    build_seconds: float


def read_dataset(idx_path: str, bin_path: str) -> IndexedDataset:
    """The validated index of a Megatron dataset; InputError names a missing or unreadable file."""
    try:
        bin_size = file_size(bin_path)
        file_size(idx_path)
    except FileNotFoundError as err:
        raise InputError(str(err)) from None
    try:
        data = read_all(idx_path)
    except OSError as err:
        raise InputError(f"{idx_path}: cannot read ({err})") from None
    return parse_index(data, idx_path, bin_size)


def kept_sequences(lengths: np.ndarray, threshold: int, gamma: float, seed: int,
                   corpus: int | None = None) -> np.ndarray:
    """Sequence ids kept by document-level threshold-gamma (all of them without a threshold).

    Keyed by (seed, sequence), and in a blend by (seed, corpus, sequence), so
    corpora sharing sequence ids get independent draws."""
    ids = np.arange(len(lengths), dtype=np.int32)
    if not threshold:
        return ids
    words = (ids.astype(np.uint64),) if corpus is None else (corpus, ids.astype(np.uint64))
    u = unit_float(hash_words(seed, STREAM_KEEP, *words))
    return ids[u < acceptance_probability(lengths, threshold, gamma)]


@dataclasses.dataclass
class _Corpus:
    prefix: str
    dataset: IndexedDataset
    split: tuple[int, int]  # the split's sequences [begin, end)
    documents: np.ndarray  # kept sequences of the split
    indices: GPTIndices
    tokens_per_epoch: int

    def stats(self, num_samples: int | None) -> dict:
        return {"path_prefix": self.prefix, "sequences": self.dataset.num_sequences, "split_sequences": list(self.split),
                "sequences_kept": len(self.documents), "dtype": str(self.dataset.dtype),
                "num_samples_requested": num_samples, "num_samples": len(self.indices.shuffle_index),
                "num_epochs": self.indices.num_epochs, "separate_final_epoch": self.indices.separate_final_epoch,
                "tokens_per_epoch": self.tokens_per_epoch}


def _check_blend_fits(blend, corpora: list[_Corpus]) -> None:
    """Megatron's check: no corpus is asked for more samples than its GPTDataset has."""
    used = np.bincount(blend.dataset_index, minlength=len(corpora))
    for k, (count, corpus) in enumerate(zip(used, corpora)):
        have = len(corpus.indices.shuffle_index)
        if count > have:
            raise InputError(f"{corpus.prefix}: the blend takes {count} samples from this corpus but its split has "
                             f"{have} ({len(corpus.documents)} sequences, {corpus.tokens_per_epoch} tokens)")


# The launcher holds a corpus's indices in memory: refuse sizes whose indices would not fit in this much.
MAX_INDEX_BYTES = 16 << 30


def check_index_size(prefix: str, num_samples: int | None, seq_length: int, split_tokens: int,
                     documents: int) -> None:
    """InputError, before any index is built, for a requested size whose indices would exceed MAX_INDEX_BYTES.

    Per epoch the document index holds the split's documents (int32); the sample index two int32 per
    sample, the shuffle index one int64 per sample.
    """
    samples_per_epoch = max(1, split_tokens // seq_length)
    epochs = 1 if not num_samples else -(-num_samples * seq_length // split_tokens) + 1
    index_bytes = epochs * documents * 4 + (epochs * samples_per_epoch + 1) * 16
    if index_bytes > MAX_INDEX_BYTES:
        raise InputError(f"{prefix}: {num_samples:,} samples of {seq_length} tokens take {epochs:,} epochs of the "
                         f"split's {split_tokens:,} tokens, indices of {index_bytes / 2**30:,.0f} GiB (at most "
                         f"{MAX_INDEX_BYTES / 2**30:g} GiB): ask for fewer token_dataset.num_samples")


def split_name(use_split: int) -> str:
    """TRAIN, VALID or TEST."""
    from shardmill.proto import shardmill_config_pb2 as config_pb2

    return config_pb2.TokenSplit.Name(use_split)


def plan_tokens(config) -> TokenPlan:
    """Megatron's indices of the chosen split, built on the launcher.

    Reading each `.idx` checks it completely, so a bad dataset fails before
    any pipeline, and the output is not touched.
    """
    cfg = config.token_dataset
    blended = len(cfg.blend) > 0
    prefixes = [c.path_prefix for c in cfg.blend] if blended else [cfg.path_prefix]
    seed = cfg.random_seed if cfg.HasField("random_seed") else config.seed
    requested = cfg.num_samples if cfg.HasField("num_samples") else None
    bookends = split_matrix(parse_split(cfg.split))[cfg.use_split] if cfg.HasField("split") else (0.0, 1.0)
    datasets = [read_dataset(p + ".idx", p + ".bin") for p in prefixes]

    build_start = time.perf_counter()
    blend = plan_blend([c.weight for c in cfg.blend], requested) if blended else None
    corpora = []
    for k, (prefix, dataset) in enumerate(zip(prefixes, datasets)):
        begin, end = split_range(dataset.num_sequences, bookends)
        kept = kept_sequences(dataset.sequence_lengths, cfg.hanse_sampling_threshold, cfg.hanse_sampling_gamma,
                              config.seed, k if blended else None)
        documents = kept[(kept >= begin) & (kept < end)]
        split_tokens = int(dataset.sequence_lengths[documents].astype(np.int64).sum())
        if not split_tokens:
            raise InputError(f"{prefix}: the {split_name(cfg.use_split)} split (sequences {begin}..{end - 1} "
                             f"of {dataset.num_sequences}) holds no tokens to sample")
        if cfg.seq_length + int(cfg.add_extra_token) > split_tokens:
            raise InputError(f"{prefix}: token_dataset.seq_length {cfg.seq_length} needs more tokens than the "
                             f"{split_name(cfg.use_split)} split holds ({split_tokens:,})")
        check_index_size(prefix, requested if blend is None else blend.corpus_samples[k], cfg.seq_length,
                         split_tokens, len(documents))
        num_samples = blend.corpus_samples[k] if blend else requested
        indices = build_gpt_indices(dataset.sequence_lengths, cfg.seq_length, num_samples, seed,
                                    cfg.add_extra_token, documents)
        tokens_per_epoch = split_tokens
        corpora.append(_Corpus(prefix, dataset, (begin, end), documents, indices, tokens_per_epoch))
    if blend is not None:
        _check_blend_fits(blend, corpora)
    build_seconds = time.perf_counter() - build_start

    arrays = {}
    for k, corpus in enumerate(corpora):
        name = f"corpus{k}_" if blended else ""
        arrays[name + "document_index"] = corpus.indices.document_index
        arrays[name + "sample_index"] = corpus.indices.sample_index
        arrays[name + "shuffle_index"] = corpus.indices.shuffle_index
    if blend is not None:
        arrays["blend_dataset_index"] = blend.dataset_index
        arrays["blend_dataset_sample_index"] = blend.dataset_sample_index
    sink = io.BytesIO()
    np.savez(sink, **arrays)
    indices_npz = sink.getvalue()

    total = blend.size if blend else len(corpora[0].indices.shuffle_index)
    # Corpora may differ in dtype: samples are written in the smallest dtype holding them all.
    dtype = np.result_type(*[d.dtype for d in datasets])
    width = (cfg.seq_length + int(cfg.add_extra_token)) * dtype.itemsize
    num_shards = shard_count(total * width, ShardSizing.of(config.output), WRITE_LESS)
    bounds = np.linspace(0, total, num_shards + 1).astype(np.int64)
    tasks = [(s, int(bounds[s]), int(bounds[s + 1])) for s in range(num_shards)]
    tokens_per_epoch = [c.tokens_per_epoch for c in corpora]
    split = split_name(cfg.use_split).lower()
    if blend is None:
        stats = corpora[0].stats(requested)
        stats.update({"sequences_kept": len(corpora[0].documents), "seq_length": cfg.seq_length,
                      "add_extra_token": cfg.add_extra_token, "random_seed": seed})
    else:
        stats = {"seq_length": cfg.seq_length, "add_extra_token": cfg.add_extra_token, "random_seed": seed,
                 "dtype": str(dtype), "num_samples_requested": requested, "num_samples": blend.size,
                 "weights": blend.weights, "corpora": [c.stats(n) for c, n in zip(corpora, blend.corpus_samples)],
                 "samples_per_corpus": np.bincount(blend.dataset_index, minlength=len(corpora)).tolist()}
    stats.update({"split": cfg.split if cfg.HasField("split") else None, "use_split": split,
                  "indices_file": INDICES_NAME})
    return TokenPlan(prefixes=tuple(prefixes), blended=blended, seq_length=cfg.seq_length,
                     add_extra_token=cfg.add_extra_token, split=split, dtype=dtype.str, row_bytes=width,
                     indices_npz=indices_npz, tasks=tuple(tasks), tokens_per_epoch=tuple(tokens_per_epoch),
                     stats=stats, build_seconds=build_seconds)
