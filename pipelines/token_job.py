"""The token job: Megatron `.idx/.bin` in, Megatron's GPT samples spilled per shard.

The launcher reads the `.idx` (range reads only ever touch `.bin`),
optionally keeps sequences by threshold-gamma and builds Megatron's three
index arrays (transforms/megatron_index.py); they are kept in the output as
`_gNNNNNN/megatron-indices.npz` (numpy arrays document_index, sample_index,
shuffle_index). Workers materialise contiguous ranges of the shuffled sample
order, one range per shard, so shard k holds positions [k·n, (k+1)·n) of
Megatron's sample stream and reading the shards in order yields exactly it.
"""

from __future__ import annotations

import io
import math
import time

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.pipelines.config import JobConfig
from shardmill.pipelines.inputs import InputError
from shardmill.transforms.atomic_io import write_bytes_atomically
from shardmill.transforms.chunk_sampling import acceptance_probability
from shardmill.transforms.keyed_hash import STREAM_KEEP, hash_words, unit_float
from shardmill.transforms.megatron_index import (GPTIndices, IndexedDataset, build_gpt_indices, parse_index,
                                                  sample_tokens)
from shardmill.transforms.output_lifecycle import RunPaths
from shardmill.transforms.sharded_output import ShardFormat
from shardmill.transforms.spill import write_spill

INDICES_NAME = "megatron-indices.npz"  # in the generation's metadata directory
_INDEX_CACHE: dict[str, tuple] = {}  # per worker process: indices file -> arrays


def _read_all(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def _size(path: str) -> int:
    matches = FileSystems.match([path])[0].metadata_list
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


def kept_sequences(lengths: np.ndarray, threshold: int, gamma: float, seed: int) -> np.ndarray:
    """Sequence ids kept by document-level threshold-gamma (all of them without a threshold)."""
    ids = np.arange(len(lengths), dtype=np.int32)
    if not threshold:
        return ids
    u = unit_float(hash_words(seed, STREAM_KEEP, ids.astype(np.uint64)))
    return ids[u < acceptance_probability(lengths, threshold, gamma)]


def _materialize(task, indices_path, idx_path, bin_path, seq_length, add_extra, tokens_per_epoch, paths):
    shard, start, end = task
    paths.check_live()
    if indices_path not in _INDEX_CACHE:
        arrays = np.load(io.BytesIO(_read_all(indices_path)))
        dataset = parse_index(_read_all(idx_path), idx_path, _size(bin_path))
        indices = GPTIndices(arrays["document_index"], arrays["sample_index"], arrays["shuffle_index"], 0, False)
        _INDEX_CACHE[indices_path] = (dataset, indices)
    dataset, indices = _INDEX_CACHE[indices_path]
    samples = indices.shuffle_index[start:end].astype(np.int64)
    width = (seq_length + int(add_extra)) * dataset.dtype.itemsize
    frames = np.empty((len(samples), width), dtype=np.uint8)
    with FileSystems.open(bin_path, compression_type=CompressionTypes.UNCOMPRESSED) as bin_file:
        for row, sample in enumerate(samples):
            frames[row] = sample_tokens(bin_file, dataset, indices, int(sample), add_extra).view(np.uint8)
    batch = pa.record_batch({
        "tokens": pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(samples), [None, pa.py_buffer(frames)]),
        "sample": pa.array(samples),
        "epoch": pa.array((samples * seq_length // max(tokens_per_epoch, 1)).astype(np.int32)),
    })
    return write_spill(f"{paths.spill_dir}/samples-{shard:05d}.arrow", {shard: batch})


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
    """A Megatron .idx/.bin pair → Megatron's sample stream, one contiguous range per shard.

    The indices are built here, at construction (the launcher); reading the
    `.idx` checks it completely, so a bad dataset fails before any pipeline.
    """

    def __init__(self, config: JobConfig, inputs: list[str], paths: RunPaths):
        super().__init__()
        cfg = config.token_dataset
        self._paths = paths
        self._cfg = cfg
        self._idx_path, self._bin_path = cfg.path_prefix + ".idx", cfg.path_prefix + ".bin"
        dataset = read_dataset(self._idx_path, self._bin_path)
        seed = cfg.random_seed if cfg.HasField("random_seed") else config.seed
        documents = kept_sequences(dataset.sequence_lengths, cfg.hanse_sampling_threshold, cfg.hanse_sampling_gamma,
                                   config.seed)
        build_start = time.perf_counter()
        indices = build_gpt_indices(dataset.sequence_lengths, cfg.seq_length,
                                    cfg.num_samples if cfg.HasField("num_samples") else None, seed,
                                    cfg.add_extra_token, documents)
        build_seconds = time.perf_counter() - build_start
        sink = io.BytesIO()
        np.savez(sink, document_index=indices.document_index, sample_index=indices.sample_index,
                 shuffle_index=indices.shuffle_index)
        self._indices_npz = sink.getvalue()
        total = len(indices.shuffle_index)
        self._width = (cfg.seq_length + int(cfg.add_extra_token)) * dataset.dtype.itemsize
        num_shards = config.output.num_shards or max(1, math.ceil(total * self._width
                                                                   / config.output.target_shard_bytes))
        bounds = np.linspace(0, total, num_shards + 1).astype(np.int64)
        self._tasks = [(s, int(bounds[s]), int(bounds[s + 1])) for s in range(num_shards)]
        self._tokens_per_epoch = int(dataset.sequence_lengths[documents].astype(np.int64).sum())
        self._dtype = str(dataset.dtype)
        self.shard_format = TokenShardFormat({
            "sequences": dataset.num_sequences, "sequences_kept": len(documents), "dtype": str(dataset.dtype),
            "seq_length": cfg.seq_length, "add_extra_token": cfg.add_extra_token, "random_seed": seed,
            "num_samples": total, "num_epochs": indices.num_epochs,
            "separate_final_epoch": indices.separate_final_epoch, "tokens_per_epoch": self._tokens_per_epoch,
            "indices_file": INDICES_NAME,
        }, build_seconds)

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
            | "Materialize" >> beam.FlatMap(_materialize, beam.pvalue.AsSingleton(indices_path), self._idx_path,
                                            self._bin_path, cfg.seq_length, cfg.add_extra_token,
                                            self._tokens_per_epoch, self._paths)
        )
        return {
            "shard_refs": refs,
            "num_shards": pbegin | "NumShards" >> beam.Create([len(self._tasks)]),
            "record": pbegin | "Record" >> beam.Create([{
                "record_format": "megatron_gpt_samples", "dtype": self._dtype, "seq_length": cfg.seq_length,
                "add_extra_token": cfg.add_extra_token, "row_bytes": self._width}]),
            "errors": pbegin | "NoErrors" >> beam.Create([]),
            "stats": pbegin | "NoStats" >> beam.Create([]),
        }
