"""The label job on gzip-compressed CSV vs the same CSV plain, and on a log of 10^4 columns; or its peak memory
on one compressed log against the log's inflated size.

    python -m benchmarks.bench_compressed_logs [--rows 1000000] [--files 4] [--rounds 2]
    python -m benchmarks.bench_compressed_logs --peak-memory 30,300,3000 [--pythonpath DIR] [--limit-gib 3]

--peak-memory: per size (MB inflated), one gzip CSV log of that size (a
65,536-row block of ~70 B rows, ids running on, 0.5 % clicks, gzip level
1), run through `shardmill run` (ADAPTIVE ratio 4) in a fresh process; its
peak RSS (from wait4: see benchmarks/harness.py) and the records read
against the rows written. --pythonpath runs another shardmill (e.g.
an older one) the same way; --limit-gib caps each run's address space.

Event logs of `--files` CSV files (id, user, url, country, clicked; ~70 B a
row), once plain and once as `.csv.gz` (gzip level 6), each run through
`shardmill run` (in-process runner, ADAPTIVE ratio 4) in every round, plain
and gzip alternating in the same process. A plain file larger than
max_partition_bytes is split into ranges; a compressed one is read whole
(one partition per file). Then one CSV of 10^4 columns x 20 rows, end to end.

Prints one JSON object: seconds and rows/s per round, best rounds, the gzip/plain ratio (of the best
rounds, and per round with its spread).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import zlib

import numpy as np

from benchmarks.harness import emit, interleaved_rounds, paired_ratio, progress, python_child, run_child, timed
from shardmill.pipelines import cli


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


def run(inputs: str, out: str) -> None:
    config = out + ".textproto"
    with open(config, "w") as f:
        f.write(f'input: "{inputs}"\nseed: 1\noutput {{ path: "{out}" num_shards: 4 overwrite: true }}\n'
                'label_sampling { label_column: "clicked" ratio: 4 }\n')
    assert cli.main(["-q", "run", "--config", config]) == 0


_BLOCK_ROWS = 1 << 16


def write_big_log(path: str, inflated_bytes: int) -> int:
    """A gzip CSV log of about inflated_bytes, streamed to disk (never whole in memory); returns its rows."""
    rng = np.random.default_rng(0)
    clicked = (rng.random(_BLOCK_ROWS) < 0.005).astype(int)
    template = "".join(f"{{block:06d}}{j:05d},user-{j % 50000},https://example.com/a/{j % 9973}?p={j % 31},"
                       f"{('de', 'fr', 'us')[j % 3]},{c}\n" for j, c in enumerate(clicked.tolist()))
    header = b"id,user,url,country,clicked\n"
    pieces = template.encode().split(b"{block:06d}")[1:]
    deflate = zlib.compressobj(1, zlib.DEFLATED, 31)
    rows = written = 0
    with open(path, "wb") as f:
        f.write(deflate.compress(header))
        written += len(header)
        block = 0
        while written < inflated_bytes:
            prefix = b"%06d" % block
            data = prefix + prefix.join(pieces)
            f.write(deflate.compress(data))
            written += len(data)
            rows += _BLOCK_ROWS
            block += 1
        f.write(deflate.flush())
    return rows


_RUN = """
import sys
from shardmill.pipelines import cli
sys.exit(cli.main(["-q", "run", "--config", sys.argv[1]]))
"""


def peak_memory_run(log_dir: str, out: str, pythonpath: str, limit_gib: float) -> dict:
    """One label run in a fresh process: seconds, exit code, peak RSS, the manifest's counts."""
    config = out + ".textproto"
    with open(config, "w") as f:
        f.write(f'input: "{log_dir}"\nseed: 1\noutput {{ path: "{out}" overwrite: true }}\n'
                'label_sampling { label_column: "clicked" ratio: 4 }\n')
    env = dict(os.environ, PYTHONPATH=pythonpath) if pythonpath else None
    done = run_child(python_child(_RUN, config), env=env, cwd="/",
                     address_limit_bytes=int(limit_gib * (1 << 30)) if limit_gib else None)
    err = done.stderr.strip().splitlines()
    result = {"exit": done.returncode, "seconds": round(done.seconds, 1), "peak_rss_mib": round(done.peak_rss_mib)}
    manifest_path = os.path.join(out, ".manifest.json")
    if done.returncode == 0 and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            acc = json.load(f)["stats"]["accounting"]
        result.update(records_read=acc["records_read"], records_written=acc["records_written"],
                      records_lost=acc["records_lost"])
    elif err:
        result["error"] = err[-1][:300]
    return result


def peak_memory(sizes_mb: list[int], pythonpath: str, limit_gib: float) -> dict:
    work = tempfile.mkdtemp(prefix="bench_compressed_memory_")
    report = {}
    for size in sizes_mb:
        log_dir = os.path.join(work, f"log-{size}")
        os.makedirs(log_dir)
        path = os.path.join(log_dir, "events.csv.gz")
        rows = write_big_log(path, size * 1_000_000)
        run = peak_memory_run(log_dir, os.path.join(work, f"out-{size}"), pythonpath, limit_gib)
        report[f"{size}MB"] = {"inflated_mb": size, "compressed_mb": round(os.path.getsize(path) / 1e6, 1),
                               "rows_written": rows, **run, "every_record_read": run.get("records_read") == rows}
        os.remove(path)
        progress({f"{size}MB": report[f"{size}MB"]})
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--peak-memory", default="", help="inflated sizes in MB, e.g. 30,300,3000")
    parser.add_argument("--pythonpath", default="", help="run another shardmill (PYTHONPATH) for --peak-memory")
    parser.add_argument("--limit-gib", type=float, default=0, help="address-space cap per --peak-memory run")
    args = parser.parse_args()
    if args.peak_memory:
        sizes = [int(s) for s in args.peak_memory.split(",")]
        emit(peak_memory(sizes, args.pythonpath, args.limit_gib))
        return
    work = tempfile.mkdtemp(prefix="bench_compressed_logs_")
    inputs = {"plain": os.path.join(work, "plain"), "gzip": os.path.join(work, "gzip")}
    for name, directory in inputs.items():
        write_logs(directory, args.rows, args.files, name == "gzip")
    sizes = {name: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) for name, d in inputs.items()}
    runs = interleaved_rounds({name: (lambda name=name: run(inputs[name], os.path.join(work, f"out-{name}")))
                               for name in inputs}, args.rounds)
    rounds = {name: [{"seconds": round(r.seconds, 2), "rows_per_s": round(args.rows / r.seconds)} for r in results]
              for name, results in runs.items()}
    best = {name: max(r["rows_per_s"] for r in values) for name, values in rounds.items()}
    per_round = paired_ratio(*([args.rows / r.seconds for r in runs[name]] for name in ("gzip", "plain")))
    wide = os.path.join(work, "wide")
    os.makedirs(wide)
    with open(os.path.join(wide, "wide.csv"), "w") as f:
        f.write(",".join([f"c{i}" for i in range(10_000)] + ["clicked"]) + "\n")
        for r in range(20):
            f.write(",".join(str(j) for j in range(10_000)) + f",{r % 2}\n")
    wide_seconds = timed(lambda: run(wide, os.path.join(work, "out-wide"))).seconds
    emit({"rows": args.rows, "files": args.files, "input_bytes": sizes, "rounds": rounds, "best": best,
          "gzip_over_plain": round(best["gzip"] / best["plain"], 2),
          "gzip_over_plain_per_round": per_round["per_round"], "gzip_over_plain_spread": per_round["spread"],
          "wide_10000_columns_seconds": round(wide_seconds, 2)})


if __name__ == "__main__":
    main()
