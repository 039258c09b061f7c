"""Rows/s through the training-loop adapters against the plain reader, side by side in one process.

    python -m benchmarks.bench_adapters [--rounds 3] [--size 1.0]

On the same shards (4 x 250k rows of 100 B; 4 x 15k lc0-sized 8356 B
frames), 256-row batches, shuffled, interleaved over rounds (the order
rotated each round; each variant timed on its second consecutive run, so
that none pays the page faults of buffers another variant left cold):
  reader              ShardReader alone (the baseline)
  grain_iter          ShardIterDataset iterated through Grain
  torch_workers0      ShardIterableDataset through torch's DataLoader, no workers
  torch_workers2      the same with 2 worker processes (tensors cross processes)
  grain_source_seq    ShardDataSource read in record order (a row group per miss)
  grain_source_shuf   ShardDataSource through Grain's IndexSampler, shuffled (a
                      row group per miss: the random-access cost), first 5k rows
Reports rows/s (median and spread over rounds) and the ratio to the reader of
the same round (median and spread).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: its threads would only spin here

import grain  # noqa: E402
import torch  # noqa: E402

from benchmarks.harness import emit, interleaved_rounds, rates_of, versus  # noqa: E402
from shardmill.native_ext import OrderOptions, ShardReader  # noqa: E402
from shardmill.native_ext.grain_dataset import ShardDataSource, ShardIterDataset  # noqa: E402
from shardmill.native_ext.torch_dataset import ShardIterableDataset  # noqa: E402
from tests.datagen.shards import write_output  # noqa: E402

BATCH = 256
DATASETS = {"rows_100B": (250_000, 100, 41_943), "frames_8356B": (15_000, 8356, 501)}


def rows_of(batches) -> int:
    return sum(len(b["frame"]) for b in batches)


def reader(d):
    with ShardReader(d, BATCH, ["frame"], order_options=OrderOptions(seed=1)) as r:
        return rows_of(r)


def grain_iter(d):
    return rows_of(ShardIterDataset(d, BATCH, ["frame"], order_options=OrderOptions(seed=1)))


def torch_loader(d, workers):
    dataset = ShardIterableDataset(d, BATCH, ["frame"], order_options=OrderOptions(seed=1))
    return rows_of(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers))


def source_sequential(d):
    source = ShardDataSource(d, ["frame"])
    return sum(1 for i in range(len(source)) if source[i] is not None)


def source_shuffled(d, limit=5_000):
    source = ShardDataSource(d, ["frame"])
    sampler = grain.samplers.IndexSampler(len(source), shuffle=True, seed=2, num_epochs=1)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=0)
    rows = 0
    for _ in loader:
        rows += 1
        if rows == limit:
            break
    return rows


VARIANTS = {
    "reader": reader,
    "grain_iter": grain_iter,
    "torch_workers0": lambda d: torch_loader(d, 0),
    "torch_workers2": lambda d: torch_loader(d, 2),
    "grain_source_seq": source_sequential,
    "grain_source_shuf": source_shuffled,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=float, default=1.0, help="the datasets' rows, as a fraction of the default")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-adapters-")
    atexit.register(shutil.rmtree, work, True)
    report = {}
    for name, (rows, width, group_rows) in DATASETS.items():
        rows = max(1, int(rows * args.size))
        directory = os.path.join(work, name)
        write_output(directory, [rows] * 4, row_group_rows=group_rows, width=width, nullable=False)
        runs = interleaved_rounds({v: (lambda run=run: run(directory)) for v, run in VARIANTS.items()},
                                  args.rounds, warm_each=True)
        report[name] = versus({v: rates_of(r) for v, r in runs.items()}, "reader", "rows_per_s", "vs_reader")
    emit(report)


if __name__ == "__main__":
    main()
