"""lc0 training tensors: the reader with its native conversion, side by side with the reader alone and a numpy
conversion of the same batches.

Writes an output of real-like V6 records (self-play games from
tests/datagen/lc0.py, shuffled across games, 4 shards), then, in one process
and rotating the order each round, reads it whole in 256-record batches:

- reader: ShardReader serving `frame` only (the baseline: zero-copy views);
- reader + loader / chunkparser: ShardReader(converter=Lc0Tensors(...)) in several
  plane encodings (the conversion in C++, GIL released, num_threads threads);
- reader + numpy: the reader's frames converted by the numpy statement of
  the loader convention in tests/support/reference_lc0_tensors.py (float16 planes);
- kernel: the conversion alone on in-memory batches (no reader), 1 and 2 threads;
- with a 1 ms training step per batch (a sleep: an accelerator's step leaves
  the CPU free), the reader alone and with the conversion: what the training
  loop sees when the reader's threads can work during the step.

Prints one JSON object: median positions/s per variant and its ratio to the
reader alone in the same round, each with its spread.

    python -m benchmarks.bench_lc0_tensors [--rows-per-shard 15000 --rounds 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from benchmarks.harness import emit, interleaved_rounds, rates_of, versus
from shardmill.native_ext import Lc0Tensors, OrderOptions, ReadOptions, ShardReader
from shardmill.core.kernels import lc0_tensors
from tests.datagen.lc0 import shuffled_v6_frames
from tests.datagen.shards import write_output
from tests.support import reference_lc0_tensors as ref

BATCH = 256
WIDTH = 8356


def read_all(directory: str, step_seconds: float = 0.0, **kwargs) -> int:
    rows = 0
    with ShardReader(directory, batch_size=BATCH, order_options=OrderOptions(seed=1), read_options=ReadOptions(num_threads=2), **kwargs) as reader:
        for batch in reader:
            rows += len(batch["record_index"])
            if step_seconds:
                time.sleep(step_seconds)  # a training step on an accelerator: the CPU is free meanwhile
    return rows


def read_with_numpy(directory: str) -> int:
    rows = 0
    with ShardReader(directory, batch_size=BATCH, order_options=OrderOptions(seed=1), read_options=ReadOptions(num_threads=2)) as reader:
        for batch in reader:
            tensors = ref.loader(batch["frame"])
            tensors["planes"] = tensors["planes"].astype(np.float16)
            rows += len(tensors["planes"])
    return rows


def kernel(frames: np.ndarray, planes: str, threads: int) -> int:
    for start in range(0, len(frames), BATCH):
        lc0_tensors(frames[start : start + BATCH], "loader", planes, threads, copy_policy=False)  # as the reader
    return len(frames)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows-per-shard", type=int, default=15_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="bench-lc0-tensors-")
    write_output(directory, [args.rows_per_shard] * 4, 501, WIDTH, frames=shuffled_v6_frames())
    frames = np.ascontiguousarray(shuffled_v6_frames()(np.arange(20_000), WIDTH))
    variants = {
        "reader": lambda: read_all(directory),
        "reader+loader float16": lambda: read_all(directory, converter=Lc0Tensors("loader", planes="float16")),
        "reader+loader float32": lambda: read_all(directory, converter=Lc0Tensors("loader", planes="float32")),
        "reader+loader packed": lambda: read_all(directory, converter=Lc0Tensors("loader", planes="packed")),
        "reader+chunkparser float16": lambda: read_all(directory, converter=Lc0Tensors("chunkparser", planes="float16")),
        "reader+numpy loader float16": lambda: read_with_numpy(directory),
        "reader, 1 ms step per batch": lambda: read_all(directory, 0.001),
        "reader+loader float16, 1 ms step per batch": lambda: read_all(directory, 0.001, converter=Lc0Tensors("loader", planes="float16")),
        "kernel loader float16, 1 thread": lambda: kernel(frames, "float16", 1),
        "kernel loader float16, 2 threads": lambda: kernel(frames, "float16", 2),
        "kernel loader packed, 1 thread": lambda: kernel(frames, "packed", 1),
    }
    runs = interleaved_rounds(variants, args.rounds, warm_each=True)  # warm: page cache, window buffers, arenas
    report = versus({name: rates_of(r) for name, r in runs.items()}, "reader", "positions_per_s", "vs_reader")
    emit({"batch": BATCH, "rows": 4 * args.rows_per_shard, "cpus": os.cpu_count(), "variants": report})


if __name__ == "__main__":
    main()
