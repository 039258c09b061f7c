"""Native shard reader vs pyarrow's sequential decode ceiling, side by side on the same shards.

Writes three datasets of shardmill-format shards (small ~100 B rows; lc0
V6-sized 8356 B frames of bytes derived from the row id, which compress
~600x so that decoding them is mostly copying; and real V6 records of
self-play games from tests/datagen/lc0.py, which compress ~15x like real
training data), then, interleaved over rounds in one process:
  pyarrow_sequential  ParquetFile.iter_batches over every shard, no shuffle,
                      frames viewed as (batch, width) numpy arrays (the decode
                      ceiling on this machine)
  shardmill_reader    ShardReader, shuffle on, rank 0 of 2 (sharding on),
                      default window of 8 row groups
  shardmill_reader_window1  the same with window_row_groups=1: rows shuffled
                      within one row group, Petastorm's shuffle scope
Reports rows/s and MB/s of frame bytes (medians, with the spread of the
seconds; the readers' ratio to pyarrow per round), time to first batch, and the time to
restore a reader from a mid-epoch state() (construction, and first batch).
With --peers-python (repeatable), the peers (Grain, Mosaic streaming,
Petastorm) run from benchmarks.bench_peers in their own virtualenvs on the
same shards; each peer's result comes from the first venv that could run it.
`vs_best_peer` compares against the best peer that delivers what the
reader delivers (256-row numpy batches; Petastorm's raw whole-row-group
figure is reported but not counted, see bench_peers.py).

    python -m benchmarks.bench_reader [--rounds 3] [--size 1.0]
        [--peers-python /tmp/peers/bin/python --peers-python /tmp/mosaic/bin/python]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil

# numpy's bundled OpenBLAS starts spinning worker threads that nothing here
# uses (~4% of a reader profile); one thread, as a training job would set.
# Set before numpy is imported, and inherited by the peers' processes.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    emit, interleaved_rounds, last_json_line, paired_ratio, rates_of, run_child, seconds_of, summary)
from shardmill.native_ext import OrderOptions, ShardOptions, ShardReader  # noqa: E402
from tests.datagen.lc0 import shuffled_v6_frames  # noqa: E402
from tests.datagen.shards import frame_bytes, write_output  # noqa: E402

DATASETS = {
    # name: (rows per shard, shards, frame width, rows per row group ~ 4 MiB,
    # frames(ids, width)). Each reader round reads a few hundred MB, so
    # throughput is the steady state: with 4x fewer rows a round took ~0.1 s,
    # of which the first window's decode (time to first batch, reported on
    # its own) was ~8%.
    "small_rows_100B": (4_000_000, 4, 100, 41_943, frame_bytes),
    "lc0_frames_8356B": (60_000, 4, 8356, 501, frame_bytes),
    "lc0_v6_records_8356B": (60_000, 4, 8356, 501, shuffled_v6_frames()),
}
BATCH = 256


def pyarrow_sequential(directory, manifest, width):
    rows = 0
    for shard in manifest["shards"]:
        for batch in pq.ParquetFile(os.path.join(directory, shard["path"])).iter_batches(BATCH, columns=["frame"]):
            frames = np.frombuffer(batch.column(0).buffers()[1], np.uint8).reshape(-1, width)
            rows += len(frames)
    return rows


def shardmill_reader(directory, manifest, width, window_row_groups=8):
    rows = 0
    with ShardReader(directory, BATCH, ["frame"], shard_options=ShardOptions(shard_index=0, shard_count=2), order_options=OrderOptions(seed=1, window_row_groups=window_row_groups)) as reader:
        for batch in reader:
            rows += len(batch["frame"])
    return rows


def shardmill_reader_window1(directory, manifest, width):
    # Petastorm's shuffle scope: row groups permuted, rows shuffled within one row group.
    return shardmill_reader(directory, manifest, width, window_row_groups=1)


def first_batch_seconds(directory):
    start = time.perf_counter()
    reader = ShardReader(directory, BATCH, ["frame"], shard_options=ShardOptions(shard_index=0, shard_count=2), order_options=OrderOptions(seed=1))
    next(reader)
    seconds = time.perf_counter() - start
    reader.close()
    return seconds


def restore_seconds(directory):
    reader = ShardReader(directory, BATCH, ["frame"], shard_options=ShardOptions(shard_index=0, shard_count=2), order_options=OrderOptions(seed=1))
    for _ in range(37):
        next(reader)
    state = reader.state()
    reader.close()
    start = time.perf_counter()
    restored = ShardReader(directory, BATCH, ["frame"], shard_options=ShardOptions(shard_index=0, shard_count=2), order_options=OrderOptions(seed=1), state=state)
    constructed = time.perf_counter() - start
    next(restored)
    first = time.perf_counter() - start
    restored.close()
    return constructed, first, len(state)


# Peers measured as they come, not delivering the same batches (see bench_peers.py).
RAW_PEERS = {"petastorm"}


def run_peers(pythons: list[str], directory: str, width: int, rounds: int) -> dict:
    """Each peer's figures from the first virtualenv that could run it (errors otherwise)."""
    merged: dict = {}
    for python in pythons:
        # Peers read at most 200k rows where they are slow (rates, not totals).
        result = run_child([python, "-m", "benchmarks.bench_peers", directory, str(width), str(rounds), "200000"])
        if result.returncode:
            peers = {"error": {"error": f"{python}: {result.stderr[-400:]}"}}
        else:
            peers = last_json_line(result.stdout)
        for peer, figures in peers.items():
            if "rows_per_s" in figures or peer not in merged:
                merged[peer] = figures | {"venv": python}
    return merged


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=float, default=1.0, help="the datasets' rows, as a fraction of the default")
    parser.add_argument("--peers-python", action="append", default=[],
                        help="python of a virtualenv with some of grain, mosaicml-streaming, petastorm (repeatable)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-reader-")
    atexit.register(shutil.rmtree, work, True)  # ~150 MB of shards
    report = {"batch_size": BATCH, "datasets": {}}
    for name, (rows, shards, width, group_rows, frames) in DATASETS.items():
        rows = max(1, int(rows * args.size))
        directory = os.path.join(work, name)
        manifest = write_output(directory, [rows] * shards, row_group_rows=group_rows, width=width, frames=frames,
                                nullable=False)  # as the job writes them: no definition levels
        variants = {"pyarrow_sequential": pyarrow_sequential, "shardmill_reader": shardmill_reader,
                    "shardmill_reader_window1": shardmill_reader_window1}
        runs = interleaved_rounds({v: (lambda fn=fn: fn(directory, manifest, width)) for v, fn in variants.items()},
                                  args.rounds)
        times = {v: seconds_of(r) for v, r in runs.items()}
        counts = {v: r[-1].value for v, r in runs.items()}
        first = statistics.median(first_batch_seconds(directory) for _ in range(args.rounds))
        restores = [restore_seconds(directory) for _ in range(args.rounds)]
        entry = {"rows": rows * shards, "frame_bytes": width, "variants": {},
                 "parquet_bytes": sum(shard["bytes"] for shard in manifest["shards"])}
        for v in variants:
            t = statistics.median(times[v])
            entry["variants"][v] = {"rows_read": counts[v], "seconds": round(t, 3),
                                    "seconds_spread": summary(times[v])["spread"],
                                    "rows_per_s": round(counts[v] / t),
                                    "mb_per_s": round(counts[v] * width / t / 1e6, 1)}
        readers = [entry["variants"][v] for v in variants if v.startswith("shardmill_reader")]
        for v in variants:
            if v.startswith("shardmill_reader"):  # rows/s over pyarrow's, per round (the reader reads rank 0 of 2)
                ratio = paired_ratio(rates_of(runs[v]), rates_of(runs["pyarrow_sequential"]))
                entry["variants"][v].update(vs_pyarrow_sequential=round(ratio["median"], 2),
                                            vs_pyarrow_sequential_spread=ratio["spread"])
        entry["first_batch_seconds"] = round(first, 4)
        entry["restore_construct_ms"] = round(1000 * statistics.median(r[0] for r in restores), 2)
        entry["restore_first_batch_ms"] = round(1000 * statistics.median(r[1] for r in restores), 2)
        entry["state_bytes"] = restores[0][2]
        if args.peers_python:
            entry["peers"] = run_peers(args.peers_python, directory, width, args.rounds)
            rates = {p: r["rows_per_s"] for p, r in entry["peers"].items() if "rows_per_s" in r and p not in RAW_PEERS}
            best = max(rates, key=rates.get) if rates else None
            for reader in readers:
                if best:
                    reader["best_comparable_peer"] = best
                    reader["vs_best_peer"] = round(reader["rows_per_s"] / rates[best], 2)
                for peer in RAW_PEERS & entry["peers"].keys():
                    if "rows_per_s" in entry["peers"][peer]:
                        reader[f"vs_{peer}_raw"] = round(reader["rows_per_s"] / entry["peers"][peer]["rows_per_s"], 2)
        report["datasets"][name] = entry
    emit(report)


if __name__ == "__main__":
    main()
