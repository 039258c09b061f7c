"""The token job: Megatron `.idx/.bin` corpora in, Megatron's GPT samples of one split spilled per shard.

The launcher reads each `.idx` (range reads only ever touch `.bin`), cuts
each corpus to the chosen split's sequence range (Megatron's split string),
optionally keeps sequences by threshold-gamma, and builds Megatron's index
arrays: per corpus its GPTDataset's document, sample and shuffle indices
(transforms/megatron_index.py), and for a blend the BlendedDataset's dataset
index and dataset sample index (transforms/megatron_blend.py). They are kept
in the output as `_gNNNNNN/megatron-indices.npz` (see INDICES_NAME). Workers
materialise contiguous ranges of the split's sample stream, one range per
shard, so shard k holds positions [k·n, (k+1)·n) of the stream Megatron
serves for that split (GPTDataset[i], or BlendedDataset[i]) and reading the
shards in order yields exactly it.
"""

from __future__ import annotations

import dataclasses
import io
import math
import time

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.pipelines.config import JobConfig, TokenSplit
from shardmill.pipelines.inputs import InputError
from shardmill.transforms.atomic_io import write_bytes_atomically
from shardmill.transforms.chunk_sampling import acceptance_probability
from shardmill.transforms.discovery import is_local
from shardmill.transforms.keyed_hash import STREAM_KEEP, hash_words, unit_float
from shardmill.transforms.megatron_blend import parse_split, plan_blend, split_matrix, split_range
from shardmill.native_ext import copy_runs
from shardmill.transforms.megatron_index import (GPTIndices, IndexedDataset, build_gpt_indices, parse_index,
                                                  sample_byte_runs, sample_tokens)
from shardmill.transforms.output_lifecycle import RunPaths
from shardmill.transforms.sharded_output import ShardFormat
from shardmill.transforms.spill import write_spill

# In the generation's metadata directory. One corpus: document_index, sample_index, shuffle_index
# (its GPTDataset's). A blend: corpus{k}_document_index, corpus{k}_sample_index, corpus{k}_shuffle_index
# per corpus k (in config order), and blend_dataset_index, blend_dataset_sample_index (BlendedDataset's).
INDICES_NAME = "megatron-indices.npz"
GATHER_TOKENS = 1 << 22  # tokens per batch of runs copied from a `.bin`
_CACHE: dict[str, tuple] = {}  # per worker process: indices file -> (datasets, indices, blend)


def _read_all(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def _size(path: str) -> int:
    matches = FileSystems.match([path])[0].metadata_list if FileSystems.exists(path) else []
    if not matches:
        raise InputError(f"{path}: no such file")
    return matches[0].size_in_bytes


def read_dataset(idx_path: str, bin_path: str) -> IndexedDataset:
    """The validated index of a Megatron dataset; InputError names a missing or unreadable file."""
    bin_size = _size(bin_path)
    _size(idx_path)
    try:
        data = _read_all(idx_path)
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


def _tokens(bin_path: str, dataset: IndexedDataset, indices: GPTIndices, samples: np.ndarray, seq_length: int,
            add_extra: bool) -> np.ndarray:
    """The tokens of unshuffled samples `samples` (n, seq_length + extra), in the corpus' dtype.

    Local `.bin` files are mapped and their runs copied natively, a batch of
    samples at a time; object stores are read sample by sample."""
    width = seq_length + int(add_extra)
    out = np.empty((len(samples), width), dtype=dataset.dtype)
    if is_local(bin_path) and "://" not in bin_path and len(samples):
        data = np.memmap(bin_path, dtype=np.uint8, mode="r")
        step = max(1, GATHER_TOKENS // width)
        for begin in range(0, len(samples), step):
            starts, lengths = sample_byte_runs(dataset, indices, samples[begin:begin + step], seq_length, add_extra)
            copy_runs(data, starts, lengths, out[begin:begin + step].reshape(-1).view(np.uint8))
        return out
    with FileSystems.open(bin_path, compression_type=CompressionTypes.UNCOMPRESSED) as bin_file:
        for row, sample in enumerate(samples):
            out[row] = sample_tokens(bin_file, dataset, indices, int(sample), add_extra)
    return out


def _load(indices_path: str, prefixes: list[str], blended: bool):
    if indices_path not in _CACHE:
        arrays = np.load(io.BytesIO(_read_all(indices_path)))
        datasets, indices = [], []
        for k, prefix in enumerate(prefixes):
            name = f"corpus{k}_" if blended else ""
            datasets.append(parse_index(_read_all(prefix + ".idx"), prefix + ".idx", _size(prefix + ".bin")))
            indices.append(GPTIndices(arrays[name + "document_index"], arrays[name + "sample_index"],
                                      arrays[name + "shuffle_index"], 0, False))
        blend = (arrays["blend_dataset_index"], arrays["blend_dataset_sample_index"]) if blended else None
        _CACHE[indices_path] = (datasets, indices, blend)
    return _CACHE[indices_path]


def _materialize(task, indices_path, prefixes, blended, seq_length, add_extra, tokens_per_epoch, out_dtype, paths):
    """Positions [start, end) of the split's sample stream → one spilled batch for the task's shard."""
    shard, start, end = task
    paths.check_live()
    datasets, indices, blend = _load(indices_path, prefixes, blended)
    positions = np.arange(start, end, dtype=np.int64)
    if blend is None:
        corpus_of = np.zeros(len(positions), dtype=np.int16)
        corpus_position = positions
    else:
        corpus_of, corpus_position = blend[0][start:end], blend[1][start:end]
    width = seq_length + int(add_extra)
    tokens = np.empty((len(positions), width), dtype=out_dtype)
    samples = np.empty(len(positions), dtype=np.int64)
    epochs = np.empty(len(positions), dtype=np.int32)
    for k in np.unique(corpus_of):
        rows = np.flatnonzero(corpus_of == k)
        corpus_samples = indices[k].shuffle_index[corpus_position[rows]].astype(np.int64)
        tokens[rows] = _tokens(prefixes[k] + ".bin", datasets[k], indices[k], corpus_samples, seq_length, add_extra)
        samples[rows] = corpus_samples
        epochs[rows] = corpus_samples * seq_length // max(tokens_per_epoch[k], 1)
    frames = tokens.view(np.uint8).reshape(len(positions), -1)
    columns = {
        "tokens": pa.FixedSizeBinaryArray.from_buffers(pa.binary(frames.shape[1]), len(positions),
                                                       [None, pa.py_buffer(np.ascontiguousarray(frames))]),
        "sample": pa.array(samples),
        "epoch": pa.array(epochs),
    }
    if blend is not None:
        columns["corpus"] = pa.array(corpus_of)
        columns["corpus_position"] = pa.array(corpus_position.astype(np.int64))
    return write_spill(f"{paths.spill_dir}/samples-{shard:05d}.arrow", {shard: pa.record_batch(columns)})


def _write_indices(data: bytes, path: str) -> str:
    write_bytes_atomically(path, data)
    return path


class TokenShardFormat(ShardFormat):
    job_kind = "tokens"

    def __init__(self, stats: dict, index_build_seconds: float):
        self._stats = stats
        self._index_build_seconds = index_build_seconds

    def table(self, batches, record):
        # One batch per shard: a contiguous range of Megatron's sample order, kept in that order.
        return pa.Table.from_batches(batches)

    def row_bytes(self, table, record):
        return record["row_bytes"]

    def finish_stats(self, parts, shards, dead_letters):
        return {"token_dataset": self._stats,
                "accounting": {"records_written": sum(s["rows"] for s in shards),
                               "errors_by_reason": {}, "error_fraction": 0.0},
                "timings": {"index_build_seconds": round(self._index_build_seconds, 3)}}


class TokenJob(beam.PTransform):
    """Megatron corpora → the sample stream of one split, one contiguous range per shard.

    The indices are built here, at construction (the launcher); reading each
    `.idx` checks it completely, so a bad dataset fails before any pipeline.
    """

    def __init__(self, config: JobConfig, inputs: list[str], paths: RunPaths):
        super().__init__()
        cfg = config.token_dataset
        self._paths = paths
        self._cfg = cfg
        self._blended = len(cfg.blend) > 0
        self._prefixes = [c.path_prefix for c in cfg.blend] if self._blended else [cfg.path_prefix]
        seed = cfg.random_seed if cfg.HasField("random_seed") else config.seed
        requested = cfg.num_samples if cfg.HasField("num_samples") else None
        bookends = split_matrix(parse_split(cfg.split))[cfg.use_split] if cfg.HasField("split") else (0.0, 1.0)
        datasets = [read_dataset(p + ".idx", p + ".bin") for p in self._prefixes]

        build_start = time.perf_counter()
        blend = plan_blend([c.weight for c in cfg.blend], requested) if self._blended else None
        corpora = []
        for k, (prefix, dataset) in enumerate(zip(self._prefixes, datasets)):
            begin, end = split_range(dataset.num_sequences, bookends)
            kept = kept_sequences(dataset.sequence_lengths, cfg.hanse_sampling_threshold, cfg.hanse_sampling_gamma,
                                  config.seed, k if self._blended else None)
            documents = kept[(kept >= begin) & (kept < end)]
            if not dataset.sequence_lengths[documents].any():
                raise InputError(f"{prefix}: the {TokenSplit.Name(cfg.use_split)} split (sequences {begin}..{end - 1} "
                                 f"of {dataset.num_sequences}) holds no tokens to sample")
            num_samples = blend.corpus_samples[k] if blend else requested
            indices = build_gpt_indices(dataset.sequence_lengths, cfg.seq_length, num_samples, seed,
                                        cfg.add_extra_token, documents)
            tokens_per_epoch = int(dataset.sequence_lengths[documents].astype(np.int64).sum())
            corpora.append(_Corpus(prefix, dataset, (begin, end), documents, indices, tokens_per_epoch))
        if blend is not None:
            _check_blend_fits(blend, corpora)
        build_seconds = time.perf_counter() - build_start

        arrays = {}
        for k, corpus in enumerate(corpora):
            name = f"corpus{k}_" if self._blended else ""
            arrays[name + "document_index"] = corpus.indices.document_index
            arrays[name + "sample_index"] = corpus.indices.sample_index
            arrays[name + "shuffle_index"] = corpus.indices.shuffle_index
        if blend is not None:
            arrays["blend_dataset_index"] = blend.dataset_index
            arrays["blend_dataset_sample_index"] = blend.dataset_sample_index
        sink = io.BytesIO()
        np.savez(sink, **arrays)
        self._indices_npz = sink.getvalue()

        total = blend.size if blend else len(corpora[0].indices.shuffle_index)
        # Corpora may differ in dtype: samples are written in the smallest dtype holding them all.
        self._dtype = np.result_type(*[d.dtype for d in datasets])
        self._width = (cfg.seq_length + int(cfg.add_extra_token)) * self._dtype.itemsize
        num_shards = config.output.num_shards or max(1, math.ceil(total * self._width
                                                                   / config.output.target_shard_bytes))
        bounds = np.linspace(0, total, num_shards + 1).astype(np.int64)
        self._tasks = [(s, int(bounds[s]), int(bounds[s + 1])) for s in range(num_shards)]
        self._tokens_per_epoch = [c.tokens_per_epoch for c in corpora]
        split_name = TokenSplit.Name(cfg.use_split).lower()
        if blend is None:
            stats = corpora[0].stats(requested)
            stats.update({"sequences_kept": len(corpora[0].documents), "seq_length": cfg.seq_length,
                          "add_extra_token": cfg.add_extra_token, "random_seed": seed})
        else:
            stats = {"seq_length": cfg.seq_length, "add_extra_token": cfg.add_extra_token, "random_seed": seed,
                     "dtype": str(self._dtype), "num_samples_requested": requested, "num_samples": blend.size,
                     "weights": blend.weights, "corpora": [c.stats(n) for c, n in zip(corpora, blend.corpus_samples)],
                     "samples_per_corpus": np.bincount(blend.dataset_index, minlength=len(corpora)).tolist()}
        stats.update({"split": cfg.split if cfg.HasField("split") else None, "use_split": split_name,
                      "indices_file": INDICES_NAME})
        self.shard_format = TokenShardFormat(stats, build_seconds)

    def expand(self, pbegin):
        cfg = self._cfg
        indices_path = (
            pbegin
            | "Indices" >> beam.Create([self._indices_npz])
            | "KeepIndices" >> beam.Map(_write_indices, f"{self._paths.metadata_dir}/{INDICES_NAME}")
        )
        refs = (
            pbegin
            | "SampleRanges" >> beam.Create(self._tasks)
            | "Spread" >> beam.Reshuffle()
            | "Materialize" >> beam.FlatMap(_materialize, beam.pvalue.AsSingleton(indices_path), self._prefixes,
                                            self._blended, cfg.seq_length, cfg.add_extra_token,
                                            self._tokens_per_epoch, self._dtype.str, self._paths)
        )
        return {
            "shard_refs": refs,
            "num_shards": pbegin | "NumShards" >> beam.Create([len(self._tasks)]),
            "record": pbegin | "Record" >> beam.Create([{
                "record_format": "megatron_gpt_samples", "dtype": str(self._dtype), "seq_length": cfg.seq_length,
                "add_extra_token": cfg.add_extra_token, "row_bytes": self._width,
                "split": TokenSplit.Name(cfg.use_split).lower(), "blended": self._blended}]),
            "errors": pbegin | "NoErrors" >> beam.Create([]),
            "stats": pbegin | "NoStats" >> beam.Create([]),
        }


def _check_blend_fits(blend, corpora: list[_Corpus]) -> None:
    """Megatron's check: no corpus is asked for more samples than its GPTDataset has."""
    used = np.bincount(blend.dataset_index, minlength=len(corpora))
    for k, (count, corpus) in enumerate(zip(used, corpora)):
        have = len(corpus.indices.shuffle_index)
        if count > have:
            raise InputError(f"{corpus.prefix}: the blend takes {count} samples from this corpus but its split has "
                             f"{have} ({len(corpus.documents)} sequences, {corpus.tokens_per_epoch} tokens)")
