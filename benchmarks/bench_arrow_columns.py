"""String-heavy outputs: the reader (strings and lists through Arrow) vs pyarrow iter_batches + a numpy shuffle.

    python -m benchmarks.bench_arrow_columns [--rows 400000] [--rounds 3]

A label-sampling output (every row kept) of event logs with an int64 id, a
URL (~70 bytes), a user (~12 bytes, 9 % nulls), a list of 0-3 tags, a
nullable score and the label; then, each round every way in the same
process, one epoch of batches of 256 rows with every column:

- pyarrow: every shard read with ParquetFile.iter_batches into one table,
  a numpy permutation of its rows, and `take` per batch (a global shuffle
  of an output held in memory);
- reader: ShardReader, Arrow arrays for the string and list columns;
- reader numpy: ShardReader with arrow_columns_as="numpy";
- reader offsets: ShardReader with arrow_columns_as="offsets" (strings and lists as offsets + values).

Prints one JSON object: rows/s per way and round, best round each, ratio to pyarrow; and per way the
median rows/s and its per-round ratio to pyarrow, with their spreads ("median_of_rounds").
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.harness import emit, interleaved_rounds, rates_of, versus
from shardmill.native_ext import OrderOptions, ShardReader, load_manifest
from shardmill.pipelines import cli

BATCH = 256


def make_output(work: str, rows: int) -> str:
    logs = os.path.join(work, "logs")
    os.makedirs(logs)
    rng = np.random.default_rng(0)
    per_file = rows // 4
    for part in range(4):
        ids = np.arange(part * per_file, (part + 1) * per_file)
        pq.write_table(pa.table({
            "id": ids,
            "url": [f"https://example.com/articles/{i % 9973}/section-{i % 97}?ref=feed&pos={i % 31}" for i in ids],
            "user": [None if i % 11 == 0 else f"user-{i % 50000:06d}" for i in ids],
            "tags": [[f"tag{j}" for j in range(i % 4)] for i in ids],
            "score": [None if i % 5 == 0 else float(i % 1000) / 7 for i in ids],
            "clicked": (rng.random(per_file) < 0.2).astype(np.int64),
        }), os.path.join(logs, f"part-{part}.parquet"))
    out = os.path.join(work, "out")
    config = os.path.join(work, "c.textproto")
    with open(config, "w") as f:
        f.write(f'input: "{logs}"\nseed: 1\noutput {{ path: "{out}" num_shards: 4 }}\n'
                'label_sampling { label_column: "clicked" ratio: 1000 }\n')
    assert cli.main(["-q", "run", "--config", config]) == 0
    return out


def pyarrow_epoch(out: str, seed: int) -> int:
    manifest = load_manifest(out)
    batches = [b for s in manifest["shards"] for b in pq.ParquetFile(os.path.join(out, s["path"])).iter_batches()]
    table = pa.Table.from_batches(batches).combine_chunks()  # one chunk per column: take() at its fastest
    order = np.random.default_rng(seed).permutation(table.num_rows)
    rows = 0
    for begin in range(0, len(order), BATCH):
        batch = table.take(pa.array(order[begin:begin + BATCH]))
        rows += batch.num_rows
    return rows


def reader_epoch(out: str, seed: int, as_format: str) -> int:
    rows = 0
    with ShardReader(out, batch_size=BATCH, order_options=OrderOptions(seed=seed), arrow_columns_as=as_format) as r:
        for batch in r:
            rows += len(batch["record_index"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    out = make_output(tempfile.mkdtemp(prefix="bench_arrow_columns_"), args.rows)
    ways = {"pyarrow iter_batches + numpy shuffle": lambda s: pyarrow_epoch(out, s),
            "reader (Arrow arrays)": lambda s: reader_epoch(out, s, "arrow"),
            "reader (numpy objects)": lambda s: reader_epoch(out, s, "numpy"),
            "reader (offsets + values)": lambda s: reader_epoch(out, s, "offsets")}
    seeds = {name: itertools.count() for name in ways}  # round r shuffles with seed r, every way alike
    runs = interleaved_rounds({name: (lambda name=name: ways[name](next(seeds[name]))) for name in ways}, args.rounds)
    rates = {name: rates_of(r) for name, r in runs.items()}
    best = {name: round(max(values)) for name, values in rates.items()}
    base = best["pyarrow iter_batches + numpy shuffle"]
    emit({"rows": args.rows, "batch": BATCH, "rows_per_s": {n: [round(v) for v in r] for n, r in rates.items()},
          "best": best, "ratio_to_pyarrow": {n: round(b / base, 2) for n, b in best.items()},
          "median_of_rounds": versus(rates, "pyarrow iter_batches + numpy shuffle", "rows_per_s", "ratio_to_pyarrow")})


if __name__ == "__main__":
    main()
