"""`shardmill run` with token_dataset: Megatron `.idx/.bin` in, Megatron's GPT samples out as shards.

The driver reads the `.idx` (range reads only ever touch `.bin`), optionally
keeps sequences by threshold-gamma, builds Megatron's three index arrays
(transforms/megatron_index.py) and stores them beside the output; workers
materialise contiguous ranges of the shuffled sample order, one range per
shard, so shard k holds positions [k·n, (k+1)·n) of Megatron's sample stream
and reading the shards in order yields exactly that stream.
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
from google.protobuf import text_format

from shardmill.pipelines.config import JobConfig
from shardmill.transforms import manifest as manifest_lib
from shardmill.transforms.atomic_io import write_bytes_atomically
from shardmill.transforms.chunk_sampling import acceptance_probability
from shardmill.transforms.keyed_hash import STREAM_KEEP, hash_words, unit_float
from shardmill.transforms.megatron_index import GPTIndices, build_gpt_indices, parse_index, sample_tokens
from shardmill.transforms.shard_writer import write_table_shard
from shardmill.transforms.spill import delete_spills, spill_dir

_INDEX_CACHE: dict[str, tuple] = {}  # per worker process: indices file -> arrays


def _read_all(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def _size(path: str) -> int:
    matches = FileSystems.match([path])[0].metadata_list
    if not matches:
        raise FileNotFoundError(f"{path} does not exist")
    return matches[0].size_in_bytes


def kept_sequences(lengths: np.ndarray, threshold: int, gamma: float, seed: int) -> np.ndarray:
    """Sequence ids kept by document-level threshold-gamma (all of them without a threshold)."""
    ids = np.arange(len(lengths), dtype=np.int32)
    if not threshold:
        return ids
    u = unit_float(hash_words(seed, STREAM_KEEP, ids.astype(np.uint64)))
    return ids[u < acceptance_probability(lengths, threshold, gamma)]


def _materialize(task, idx_path, bin_path, indices_path, seq_length, add_extra, tokens_per_epoch,
                 output_dir, num_shards, row_group_bytes, zstd_level):
    shard, start, end = task
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
    table = pa.table({
        "tokens": pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(samples), [None, pa.py_buffer(frames)]),
        "sample": pa.array(samples),
        "epoch": pa.array((samples * seq_length // max(tokens_per_epoch, 1)).astype(np.int32)),
    })
    return write_table_shard(output_dir, shard, num_shards, table, max(1, row_group_bytes // width), zstd_level)


def _commit(shards, output_dir, config_text, seed, stats, started_at, index_build_seconds):
    shards = sorted(shards, key=lambda s: s["shard"])
    manifest = {
        "format_version": manifest_lib.FORMAT_VERSION,
        "record_format": "megatron_gpt_samples",
        "seed": seed,
        "config": config_text,
        "num_shards": len(shards),
        "shards": [{k: v for k, v in s.items() if k != "shard"} for s in shards],
        "stats": {"token_dataset": stats, "accounting": {"records_written": sum(s["rows"] for s in shards),
                                                         "errors_by_reason": {}, "error_fraction": 0.0},
                  # Timings are the only part of a manifest that differs between identical runs.
                  "timings": {"seconds": round(time.time() - started_at, 3),
                              "index_build_seconds": round(index_build_seconds, 3)}},
    }
    manifest_lib.commit(output_dir, manifest, [])
    delete_spills(output_dir)


def build_token_job(p: beam.Pipeline, config: JobConfig, output_dir: str) -> None:
    cfg = config.token_dataset
    started_at = time.time()
    seed = cfg.random_seed if cfg.HasField("random_seed") else config.seed
    idx_path, bin_path = cfg.path_prefix + ".idx", cfg.path_prefix + ".bin"
    dataset = parse_index(_read_all(idx_path), idx_path, _size(bin_path))
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
    indices_path = f"{spill_dir(output_dir)}/megatron-indices.npz"
    write_bytes_atomically(indices_path, sink.getvalue())

    total = len(indices.shuffle_index)
    width = (cfg.seq_length + int(cfg.add_extra_token)) * dataset.dtype.itemsize
    num_shards = config.output.num_shards or max(1, math.ceil(total * width / config.output.target_shard_bytes))
    bounds = np.linspace(0, total, num_shards + 1).astype(np.int64)
    tasks = [(s, int(bounds[s]), int(bounds[s + 1])) for s in range(num_shards)]
    tokens_per_epoch = int(dataset.sequence_lengths[documents].astype(np.int64).sum())
    stats = {
        "sequences": dataset.num_sequences, "sequences_kept": len(documents), "dtype": str(dataset.dtype),
        "seq_length": cfg.seq_length, "add_extra_token": cfg.add_extra_token, "random_seed": seed,
        "num_samples": total, "num_epochs": indices.num_epochs,
        "separate_final_epoch": indices.separate_final_epoch, "tokens_per_epoch": tokens_per_epoch,
    }
    _ = (
        p
        | "SampleRanges" >> beam.Create(tasks)
        | "Spread" >> beam.Reshuffle()
        | "Materialize" >> beam.Map(_materialize, idx_path, bin_path, indices_path, cfg.seq_length,
                                    cfg.add_extra_token, tokens_per_epoch, output_dir, num_shards,
                                    config.output.row_group_bytes, config.output.zstd_level)
        | "AllShards" >> beam.combiners.ToList()
        | "Commit" >> beam.Map(_commit, output_dir, text_format.MessageToString(config), seed, stats, started_at,
                               build_seconds)
    )
