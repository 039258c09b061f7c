"""Indexing throughput: shardmill's count methods vs the naive "inflate every chunk".

Generates hourly lc0 archives, then, interleaved over several rounds in one
process (so machine noise hits every variant alike), indexes them with:
  naive       tarfile + gzip.decompress of every member, size // record size
  decompress  shardmill's index kernel, CountMethod DECOMPRESS
  scan        shardmill's index kernel, CountMethod SCAN (the default)
  trailer     shardmill's index kernel, CountMethod TRAILER
  pipeline    `shardmill count` stages on the in-process Beam runner (SCAN)
Prints one JSON object: per variant the median seconds (and their spread),
chunks/s, archive MB/s and the speed-up over naive (per round: median and
spread). The archives sit in the page cache, so this measures CPU cost, not
disk.

    python -m benchmarks.bench_index [--archives 8 --games 100 --rounds 3]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import tarfile
import tempfile

from apache_beam.options.pipeline_options import PipelineOptions

from benchmarks.harness import emit, interleaved_rounds, paired_ratio, seconds_of, summary
from shardmill.transforms.lc0.index import index_source
from shardmill.pipelines.commands.count import run_count
from shardmill.transforms.lc0.record_format import RECORD_SIZES
from tests.datagen.lc0 import write_dataset


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
    runs = interleaved_rounds({name: (lambda fn=fn: fn(paths)) for name, fn in variants.items()}, args.rounds)
    times = {name: seconds_of(r) for name, r in runs.items()}
    answers = {name: r[-1].value for name, r in runs.items()}
    # Every variant must give the truth's answer; TRAILER (by design) reports
    # the last member's records for chunks split into members between records.
    for name, answer in answers.items():
        expected = truth.expected_counts("trailer" if name == "trailer" else "scan")
        assert answer == (len(expected), sum(expected.values())), f"{name} miscounted: {answer}"
    chunks, records = answers["naive"]
    report = {
        "archives": len(paths), "chunks": chunks, "records": records,
        "archive_mb": round(archive_bytes / 1e6, 1), "uncompressed_mb": round(records * 8356 / 1e6, 1),
        "rounds": args.rounds, "variants": {},
    }
    for name, ts in times.items():
        t = statistics.median(ts)
        speedup = paired_ratio(times["naive"], ts)  # naive's seconds over this variant's, per round
        report["variants"][name] = {
            "seconds": round(t, 4), "seconds_spread": summary(ts)["spread"], "chunks_per_s": round(chunks / t, 1),
            "archive_mb_per_s": round(archive_bytes / 1e6 / t, 1), "speedup_vs_naive": round(speedup["median"], 2),
            "speedup_vs_naive_spread": speedup["spread"],
        }
    emit(report)


if __name__ == "__main__":
    main()
