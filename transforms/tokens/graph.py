"""The token job's graph: Megatron `.idx/.bin` corpora in, Megatron's GPT samples of one split spilled per shard.

The launcher has built Megatron's indices (plan.py); they are kept in the
output as `_gNNNNNN/megatron-indices.npz` (INDICES_NAME), from where every
worker loads them once. Workers materialise contiguous ranges of the split's
sample stream, one range per shard, so shard k holds positions
[k·n, (k+1)·n) of the stream Megatron serves for that split (GPTDataset[i],
or BlendedDataset[i]) and reading the shards in order yields exactly it.
"""

from __future__ import annotations

import io

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.core.kernels import copy_runs
from shardmill.core.output_contract import generation_dir_name
from shardmill.transforms.common.filesystem import file_size, is_local, read_all, write_bytes_atomically
from shardmill.transforms.common.known_values import known_value, known_values
from shardmill.transforms.common.progress import ProgressLog, record_total
from shardmill.transforms.common.spill import write_spill
from shardmill.transforms.job import JobOutputs
from shardmill.transforms.output.lifecycle import RunPaths
from shardmill.transforms.tokens.megatron_index import (GPTIndices, IndexedDataset, parse_index, sample_byte_runs,
                                                        sample_tokens)
from shardmill.transforms.tokens.megatron_cache import CACHE_DIR_NAME, write_cache
from shardmill.transforms.tokens.plan import INDICES_NAME, TokenPlan

GATHER_TOKENS = 1 << 22  # tokens per batch of runs copied from a `.bin`
_CACHE: dict[str, tuple] = {}  # per worker process: indices file -> (datasets, indices, blend)


def _tokens(bin_path: str, dataset: IndexedDataset, indices: GPTIndices, samples: np.ndarray, seq_length: int,
            add_extra: bool, pad_token: int | None = None, out_dtype=None) -> np.ndarray:
    """The tokens of unshuffled samples `samples` (n, seq_length + extra), in out_dtype (default the corpus').

    Local `.bin` files are mapped and their runs copied natively, a batch of
    samples at a time; object stores are read sample by sample. With a
    pad_token, the corpus's last sample may be partial (Megatron's
    validation split keeping it): it is read alone and padded as Megatron pads it."""
    width = seq_length + int(add_extra)
    if pad_token is not None:
        partial = samples == len(indices.sample_index) - 2
        if partial.any():
            out = np.empty((len(samples), width), dtype=out_dtype or dataset.dtype)
            whole = np.flatnonzero(~partial)
            out[whole] = _tokens(bin_path, dataset, indices, samples[whole], seq_length, add_extra)
            with FileSystems.open(bin_path, compression_type=CompressionTypes.UNCOMPRESSED) as bin_file:
                tail = sample_tokens(bin_file, dataset, indices, int(samples[partial][0]), add_extra)
            out[np.flatnonzero(partial)] = np.concatenate(
                [tail.astype(out.dtype), np.full(width - len(tail), pad_token, dtype=out.dtype)])
            return out
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
        arrays = np.load(io.BytesIO(read_all(indices_path)))
        datasets, indices = [], []
        for k, prefix in enumerate(prefixes):
            name = f"corpus{k}_" if blended else ""
            datasets.append(parse_index(read_all(prefix + ".idx"), prefix + ".idx", file_size(prefix + ".bin")))
            indices.append(GPTIndices(arrays[name + "document_index"], arrays[name + "sample_index"],
                                      arrays[name + "shuffle_index"], 0, False))
        blend = (arrays["blend_dataset_index"], arrays["blend_dataset_sample_index"]) if blended else None
        _CACHE[indices_path] = (datasets, indices, blend)
    return _CACHE[indices_path]


def sample_batch(start: int, end: int, indices_path: str, prefixes: list[str], blended: bool, seq_length: int,
                 add_extra: bool, tokens_per_epoch: list[int], out_dtype: str, pad_token: int | None) -> pa.RecordBatch:
    """Positions [start, end) of the split's sample stream, as the rows of a token shard."""
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
        tokens[rows] = _tokens(prefixes[k] + ".bin", datasets[k], indices[k], corpus_samples, seq_length, add_extra,
                               pad_token, out_dtype)
        samples[rows] = corpus_samples
        epochs[rows] = corpus_samples * seq_length // max(tokens_per_epoch[k], 1)
    frames = tokens.view(np.uint8).reshape(len(positions), width * tokens.dtype.itemsize)
    columns = {
        "tokens": pa.FixedSizeBinaryArray.from_buffers(pa.binary(frames.shape[1]), len(positions),
                                                       [None, pa.py_buffer(np.ascontiguousarray(frames))]),
        "sample": pa.array(samples),
        "epoch": pa.array(epochs),
    }
    if blend is not None:
        columns["corpus"] = pa.array(corpus_of)
        columns["corpus_position"] = pa.array(corpus_position.astype(np.int64))
    return pa.record_batch(columns)


def _materialize(task, indices_path, prefixes, blended, seq_length, add_extra, tokens_per_epoch, out_dtype, pad_token,
                 paths, progress: ProgressLog):
    """One task's range of the sample stream → one spilled batch for its shard."""
    shard, start, end = task
    paths.check_live()
    batch = sample_batch(start, end, indices_path, prefixes, blended, seq_length, add_extra, tokens_per_epoch,
                         out_dtype, pad_token)
    progress.record("samples", ranges=1, samples=end - start)
    return write_spill(f"{paths.spill_dir}/samples-{shard:05d}.arrow", {shard: batch})


def staged_indices_path(paths: RunPaths) -> str:
    return f"{paths.metadata_dir}/{INDICES_NAME}"


def stage_indices(plan: TokenPlan, paths: RunPaths) -> None:
    """The launcher's indices into the run's staging, where the workers load them (in the graph they were
    pickled and compressed about ten times over: GBs for a large split); Megatron's cache of them beside,
    when asked for (committed with the output, like every file of the generation)."""
    write_bytes_atomically(staged_indices_path(paths), plan.indices_npz)
    if plan.megatron_cache:
        write_cache(plan.megatron_cache, plan.indices_npz, f"{paths.metadata_dir}/{CACHE_DIR_NAME}")


def megatron_cache_directory(paths: RunPaths) -> str:
    """Where the committed output keeps Megatron's cache, relative to the output directory."""
    return f"{generation_dir_name(paths.generation)}/{CACHE_DIR_NAME}"


class TokenJob(beam.PTransform):
    """Megatron corpora → the sample stream of one split, one contiguous range per shard (JobOutputs)."""

    def __init__(self, plan: TokenPlan, paths: RunPaths):
        super().__init__()
        self._plan = plan
        self._paths = paths

    def expand(self, pbegin):
        plan = self._plan
        total = plan.tasks[-1][2] if plan.tasks else 0
        once = pbegin | "Once" >> beam.Impulse()
        _ = (once
             | "TotalSamples" >> known_value(total)
             | "ReportTotal" >> beam.Map(record_total, ProgressLog(self._paths.progress_dir), "samples",
                                         "total_samples"))
        refs = (
            once
            | "SampleRanges" >> known_values(plan.tasks)
            | "Spread" >> beam.Reshuffle()
            | "Materialize" >> beam.FlatMap(_materialize, staged_indices_path(self._paths), list(plan.prefixes),
                                            plan.blended, plan.seq_length, plan.add_extra_token,
                                            list(plan.tokens_per_epoch), plan.dtype, plan.pad_token, self._paths,
                                            ProgressLog(self._paths.progress_dir))
        )
        outputs = {}
        if plan.megatron_cache:
            outputs["stats"] = once | "MegatronCache" >> known_value(
                {"megatron_cache_directory": megatron_cache_directory(self._paths)})
        return JobOutputs(
            **outputs,
            shard_refs=refs,
            num_shards=once | "NumShards" >> known_value(len(plan.tasks)),
            record=once | "Record" >> known_value({
                "record_format": "megatron_gpt_samples", "dtype": str(np.dtype(plan.dtype)),
                "seq_length": plan.seq_length, "add_extra_token": plan.add_extra_token, "row_bytes": plan.row_bytes,
                "split": plan.split, "blended": plan.blended, "pad_token": plan.pad_token}),
        )


