"""The label job on gzip-compressed CSV vs the same CSV plain, and on a log of 10^4 columns.

    python benchmarks/bench_compressed_logs.py [--rows 1000000] [--files 4] [--rounds 2]

Event logs of `--files` CSV files (id, user, url, country, clicked; ~70 B a
row), once plain and once as `.csv.gz` (gzip level 6), each run through
`shardmill run` (in-process runner, ADAPTIVE ratio 4) in every round, plain
and gzip alternating in the same process. A plain file larger than
max_partition_bytes is split into ranges; a compressed one is read whole
(one partition per file). Then one CSV of 10^4 columns x 20 rows, end to end.

Prints one JSON object: seconds and rows/s per round, best rounds, the gzip/plain ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from shardmill.pipelines import cli  # noqa: E402


def write_logs(directory: str, rows: int, files: int, compress: bool) -> None:
    os.makedirs(directory)
    rng = np.random.default_rng(0)
    per_file = rows // files
    for part in range(files):
        ids = np.arange(part * per_file, (part + 1) * per_file)
        clicked = (rng.random(per_file) < 0.1).astype(int)
        text = "id,user,url,country,clicked\n" + "".join(
            f"{i},user-{i % 50000},https://example.com/a/{i % 9973}?p={i % 31},{('de', 'fr', 'us')[i % 3]},{c}\n"
            for i, c in zip(ids.tolist(), clicked.tolist()))
        path = os.path.join(directory, f"part-{part}.csv")
        if compress:
            with gzip.open(path + ".gz", "wt", compresslevel=6) as f:
                f.write(text)
        else:
            with open(path, "w") as f:
                f.write(text)


def run(inputs: str, out: str) -> float:
    config = out + ".textproto"
    with open(config, "w") as f:
        f.write(f'input: "{inputs}"\nseed: 1\noutput {{ path: "{out}" num_shards: 4 overwrite: true }}\n'
                'label_sampling { label_column: "clicked" ratio: 4 }\n')
    start = time.perf_counter()
    assert cli.main(["-q", "run", "--config", config]) == 0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench_compressed_logs_")
    inputs = {"plain": os.path.join(work, "plain"), "gzip": os.path.join(work, "gzip")}
    for name, directory in inputs.items():
        write_logs(directory, args.rows, args.files, name == "gzip")
    sizes = {name: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) for name, d in inputs.items()}
    rounds = {name: [] for name in inputs}
    for _ in range(args.rounds):
        for name, directory in inputs.items():
            seconds = run(directory, os.path.join(work, f"out-{name}"))
            rounds[name].append({"seconds": round(seconds, 2), "rows_per_s": round(args.rows / seconds)})
    best = {name: max(r["rows_per_s"] for r in values) for name, values in rounds.items()}
    wide = os.path.join(work, "wide")
    os.makedirs(wide)
    with open(os.path.join(wide, "wide.csv"), "w") as f:
        f.write(",".join([f"c{i}" for i in range(10_000)] + ["clicked"]) + "\n")
        for r in range(20):
            f.write(",".join(str(j) for j in range(10_000)) + f",{r % 2}\n")
    wide_seconds = run(wide, os.path.join(work, "out-wide"))
    print(json.dumps({"rows": args.rows, "files": args.files, "input_bytes": sizes, "rounds": rounds, "best": best,
                      "gzip_over_plain": round(best["gzip"] / best["plain"], 2),
                      "wide_10000_columns_seconds": round(wide_seconds, 2)}, indent=1))


if __name__ == "__main__":
    main()
