"""Indexing throughput: shardmill's count methods vs the naive "inflate every chunk".

Generates hourly lc0 archives, then, interleaved over several rounds in one
process (so machine noise hits every variant alike), indexes them with:
  naive       tarfile + gzip.decompress of every member, size // record size
  decompress  shardmill's index kernel, CountMethod DECOMPRESS
  scan        shardmill's index kernel, CountMethod SCAN (the default)
  trailer     shardmill's index kernel, CountMethod TRAILER
  pipeline    `shardmill count` stages on the in-process Beam runner (SCAN)
Prints one JSON object: per variant the median seconds, chunks/s, archive
MB/s and the speed-up over naive. The archives sit in the page cache, so this
measures CPU cost, not disk.

    python benchmarks/bench_index.py [--archives 8 --games 100 --rounds 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from shardmill.transforms.lc0.chunk_index import index_source  # noqa: E402
from shardmill.transforms.lc0.count import run_count  # noqa: E402
from shardmill.transforms.lc0.record_format import RECORD_SIZES  # noqa: E402
from tests.datagen.lc0 import write_dataset  # noqa: E402


def naive(paths):
    chunks = records = 0
    for path in paths:
        with tarfile.open(path) as tar:
            for info in tar:
                if info.isfile() and info.name.endswith(".gz"):
                    payload = gzip.decompress(tar.extractfile(info).read())
                    records += len(payload) // RECORD_SIZES[int.from_bytes(payload[:4], "little")]
                    chunks += 1
    return chunks, records


def kernel(method):
    def run(paths):
        chunks = records = 0
        for path in paths:
            table = index_source(path, os.path.getsize(path), method, opener=lambda p: open(p, "rb")).table
            chunks += table.num_rows
            records += sum(table["num_records"].to_pylist())
        return chunks, records

    return run


def pipeline(paths):
    result = run_count(paths, "scan", 0, PipelineOptions([]))
    return result.summary.chunks, result.summary.records


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--archives", type=int, default=8)
    parser.add_argument("--games", type=int, default=100, help="games per archive")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="bench-index-")
    truth = write_dataset(data_dir, args.archives, args.games, loose_games=0, bad=False, seed=11)
    paths = sorted(os.path.join(data_dir, n) for n in os.listdir(data_dir))
    archive_bytes = sum(os.path.getsize(p) for p in paths)
    variants = {"naive": naive, "decompress": kernel("decompress"), "scan": kernel("scan"),
                "trailer": kernel("trailer"), "pipeline": pipeline}
    times = {name: [] for name in variants}
    answers = {}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            start = time.perf_counter()
            answers[name] = fn(paths)
            times[name].append(time.perf_counter() - start)
    # Every variant must give the truth's answer; TRAILER (by design) reports
    # the last member's records for chunks split into members between records.
    for name, answer in answers.items():
        expected = truth.expected_counts("trailer" if name == "trailer" else "scan")
        assert answer == (len(expected), sum(expected.values())), f"{name} miscounted: {answer}"
    chunks, records = answers["naive"]
    base = statistics.median(times["naive"])
    report = {
        "archives": len(paths), "chunks": chunks, "records": records,
        "archive_mb": round(archive_bytes / 1e6, 1), "uncompressed_mb": round(records * 8356 / 1e6, 1),
        "rounds": args.rounds, "variants": {},
    }
    for name, ts in times.items():
        t = statistics.median(ts)
        report["variants"][name] = {
            "seconds": round(t, 4), "chunks_per_s": round(chunks / t, 1),
            "archive_mb_per_s": round(archive_bytes / 1e6 / t, 1), "speedup_vs_naive": round(base / t, 2),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
