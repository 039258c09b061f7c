"""The reader on object storage: one output served from an S3 server (moto on loopback), without and with the
local shard cache, vs from local disk.

    python -m benchmarks.bench_remote_reader [--rows 40000] [--rounds 3]

One lc0-shaped output (frames of 8,356 random bytes, so the bytes on disk
are the bytes served: ~330 MB for 40,000 rows), uploaded to a bucket of moto's S3 server started here;
then, each round, one epoch of batches of 256 rows (every column but the
frames' bytes decoded natively) from local disk and from the server, in one
process. Both read through Arrow's filesystems; the server adds the HTTP
round trips of every range read (the native reader's prefetch windows hide
some of them). Loopback: no network latency, so this measures the protocol's
cost, not a WAN's. The cache ways (ReadOptions.cache, a fresh directory each
round): a cold cache (one reader's first epoch: every shard downloaded ahead
of the windows), its second epoch (served from the copies it holds), and a
warm cache (a new reader on the filled directory: each copy hashed once
against the manifest, then read locally).

Prints one JSON object: rows/s and MB/s per way and round, the best round of
each, the ratio to local disk (of the best rounds, and per round with its
spread).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from benchmarks.harness import emit, paired_ratio
from shardmill.native_ext import CacheOptions, OrderOptions, ReadOptions, ShardReader, load_manifest
from tests.datagen.shards import write_output
from tests.support.s3_server import S3Server

BATCH = 256
WIDTH = 8356


def epochs(path: str, count: int = 1, cache: str | None = None) -> list[tuple[int, float]]:
    """(rows, seconds) of each of `count` epochs of one reader (the first including opening it)."""
    options = ReadOptions(cache=CacheOptions(cache, max_bytes=1 << 40) if cache else None)
    timed = []
    start = time.perf_counter()
    rows = 0
    with ShardReader(path, batch_size=BATCH, columns=["frame", "id"], num_epochs=count,
                     order_options=OrderOptions(seed=1), read_options=options) as reader:
        for batch in reader:
            if int(batch["epoch"]) == len(timed) + 1:
                timed.append((rows, time.perf_counter() - start))
                start, rows = time.perf_counter(), 0
            rows += len(batch["id"])
    timed.append((rows, time.perf_counter() - start))
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench_remote_reader_")
    local = os.path.join(work, "out")
    shards = 8
    rng = np.random.default_rng(0)
    write_output(local, [args.rows // shards] * shards, row_group_rows=256, width=WIDTH,
                 frames=lambda ids, width: rng.integers(0, 256, (len(ids), width), dtype=np.uint8))
    size = sum(s["bytes"] for s in load_manifest(local)["shards"])
    server = S3Server(os.path.join(work, "s3.log"))
    try:
        os.environ.update(server.env)
        server.create_bucket("bench")
        server.upload(local, "bench/out")
        names = ["local disk", "S3 server", "S3, cold cache", "S3, cached epoch (same reader)",
                 "S3, warm cache (new reader)"]
        rounds = {name: [] for name in names}

        def record(name, rows, seconds):
            rounds[name].append((rows / seconds, size / seconds / 1e6))

        for i in range(args.rounds):
            record("local disk", *epochs(local)[0])
            record("S3 server", *epochs("s3://bench/out")[0])
            cache = os.path.join(work, f"cache-{i}")
            cold, cached = epochs("s3://bench/out", 2, cache)
            record("S3, cold cache", *cold)
            record("S3, cached epoch (same reader)", *cached)
            record("S3, warm cache (new reader)", *epochs("s3://bench/out", 1, cache)[0])
    finally:
        server.stop()
    best = {name: max(r[0] for r in values) for name, values in rounds.items()}
    per_round = {name: paired_ratio([r[0] for r in values], [r[0] for r in rounds["local disk"]])
                 for name, values in rounds.items()}
    emit({
        "rows": args.rows, "bytes_on_disk": size, "batch": BATCH,
        "rows_per_s": {name: [round(r[0]) for r in values] for name, values in rounds.items()},
        "mb_per_s": {name: [round(r[1], 1) for r in values] for name, values in rounds.items()},
        "best_rows_per_s": {name: round(value) for name, value in best.items()},
        "ratio_to_local": {name: round(value / best["local disk"], 2) for name, value in best.items()},
        "ratio_to_local_median_of_rounds": {name: r["median"] for name, r in per_round.items()},
        "ratio_to_local_spread": {name: r["spread"] for name, r in per_round.items()},
    })


if __name__ == "__main__":
    main()
