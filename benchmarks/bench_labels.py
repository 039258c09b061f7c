"""Label sampling modes vs the two-pass baseline, side by side on the same generated logs.

Writes 10^7 events (default) as Parquet partitions in four patterns: even
click spacing, bursty clicks, long click-free stretches, and skewed
partitions (very different sizes and click densities). Then, interleaved
over rounds in one process, runs `shardmill run` (in-process runner) with
ITERATIVE, ADAPTIVE, EXACT and the TWO_PASS baseline, and reports per mode
the median time (and its spread), events/s, speed vs TWO_PASS (per round:
median and spread), and the achieved ratio's error overall and per partition
(mean absolute).

With --scales, EXACT at growing event counts: label-only logs (one int8
column, 1 % clicks, 16 partitions), each run a fresh process whose peak RSS
is read from wait4 (benchmarks/harness.py), EXACT side by side with TWO_PASS (which gathers nothing
globally) and, with --baseline-path, with EXACT of another installed build
(PYTHONPATH; e.g. the one that gathered k priorities in one element).
Prints one JSON object (with --scales and rounds, the scale runs under "exact_scale").

    python -m benchmarks.bench_labels [--events 10000000 --ratio 10 --rounds 2]
    python -m benchmarks.bench_labels --rounds 0 --scales 10000000,100000000 [--baseline-path DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from benchmarks.harness import emit, interleaved_rounds, last_json_line, paired_ratio, run_child, seconds_of, summary
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.common.discovery import expand_inputs
from shardmill.transforms.events.formats import EVENT_SUFFIXES

MODES = ["ITERATIVE", "ADAPTIVE", "EXACT", "TWO_PASS"]


def clicks(pattern: str, n: int, rng) -> np.ndarray:
    if pattern == "even":  # one click every ~100 events, evenly spaced
        c = np.zeros(n, dtype=np.int8)
        c[::100] = 1
        return c
    if pattern == "bursty":  # bursts of 2-8 clicks 1-3 events apart, then 100-400 quiet events
        gaps = np.where(rng.random(n // 20) < 0.8, rng.integers(1, 4, n // 20), rng.integers(100, 401, n // 20))
        pos = np.cumsum(gaps)
        c = np.zeros(n, dtype=np.int8)
        c[pos[pos < n]] = 1
        return c
    if pattern == "long_quiet":  # 1 % clicks, but with click-free stretches of 20k events
        c = (rng.random(n) < 0.01).astype(np.int8)
        for start in range(0, n, 50_000):
            c[start : start + 20_000] = 0
        return c
    raise ValueError(pattern)


def write_logs(directory: str, events: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    quarter = events // 4
    parts = []
    for pattern in ("even", "bursty", "long_quiet"):
        parts += [(f"{pattern}-{i}", clicks(pattern, quarter // 4, rng)) for i in range(4)]
    sizes = np.array([0.04, 0.16, 0.3, 0.5]) * quarter  # skewed sizes and densities
    for i, (size, density) in enumerate(zip(sizes.astype(int), [0.2, 0.05, 0.01, 0.002])):
        parts.append((f"skewed-{i}", (rng.random(size) < density).astype(np.int8)))
    os.makedirs(directory, exist_ok=True)
    for name, label in parts:
        n = len(label)
        pq.write_table(pa.table({"id": np.arange(n, dtype=np.int64), "user": rng.integers(0, 10**6, n, dtype=np.int32),
                                 "feature": rng.random(n, dtype=np.float32), "clicked": label}),
                       os.path.join(directory, f"{name}.parquet"), row_group_size=1 << 20)


def run_mode(data_dir: str, out_dir: str, mode: str, ratio: float) -> dict:
    """One run in this process: the manifest's label-sampling stats."""
    config = validate(parse_config(
        f'input: "{data_dir}"\nseed: 1\noutput {{ num_shards: 8 overwrite: true }}\nmax_error_fraction: 1\n'
        f'label_sampling {{ label_column: "clicked" ratio: {ratio} mode: {mode} }}'))
    manifest = run_job(config, expand_inputs([data_dir], EVENT_SUFFIXES), out_dir, PipelineOptions([])).manifest
    return manifest["stats"]["label_sampling"]


def write_label_only_logs(directory: str, events: int, partitions: int = 16, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    for i, n in enumerate(np.diff(np.linspace(0, events, partitions + 1).astype(np.int64))):
        pq.write_table(pa.table({"clicked": (rng.random(n) < 0.01).astype(np.int8)}),
                       os.path.join(directory, f"part-{i:03d}.parquet"), row_group_size=1 << 20)


# One run in a fresh process: the same run_mode, timed inside the child (its start-up excluded).
_ONE_RUN = """
import json, sys, time
from benchmarks.bench_labels import run_mode
data_dir, out_dir, mode, ratio = sys.argv[1:5]
start = time.perf_counter()
stats = run_mode(data_dir, out_dir, mode, float(ratio))
print(json.dumps({"seconds": time.perf_counter() - start, "stats": stats}))
"""


def run_in_process(data_dir: str, out_dir: str, mode: str, ratio: float, pythonpath: str = "") -> dict:
    """One run in a fresh process: its time, its stats and its peak RSS (MiB)."""
    env = dict(os.environ, PYTHONPATH=pythonpath) if pythonpath else None
    done = run_child([sys.executable, "-c", _ONE_RUN, data_dir, out_dir, mode, str(ratio)], env=env)
    done.check(f"{mode} run")
    result = last_json_line(done.stdout)
    return {"seconds": round(result["seconds"], 2), "peak_rss_mib": round(done.peak_rss_mib),
            "non_targets_out": result["stats"]["non_targets_out"],
            "exact": result["stats"]["non_targets_out"] == result["stats"]["exact_target_count"]}


def scale_report(work: str, scales: list[int], ratio: float, baseline_path: str) -> dict:
    report = {}
    for events in scales:
        data_dir = os.path.join(work, f"labels-{events}")
        write_label_only_logs(data_dir, events)
        runs = {"EXACT": run_in_process(data_dir, os.path.join(work, "out"), "EXACT", ratio),
                "TWO_PASS": run_in_process(data_dir, os.path.join(work, "out"), "TWO_PASS", ratio)}
        if baseline_path:
            runs["EXACT_baseline_build"] = run_in_process(data_dir, os.path.join(work, "out"), "EXACT", ratio,
                                                          baseline_path)
        for run in runs.values():
            run["events_per_s"] = round(events / run["seconds"])
        runs["exact_rss_vs_two_pass"] = round(runs["EXACT"]["peak_rss_mib"] / runs["TWO_PASS"]["peak_rss_mib"], 2)
        report[str(events)] = runs
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--ratio", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scales", default="", help="comma-separated event counts for the EXACT scale runs")
    parser.add_argument("--baseline-path", default="", help="PYTHONPATH of another build for EXACT side by side")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-labels-")
    scale = {}
    if args.scales:
        scales = [int(float(x)) for x in args.scales.split(",")]
        scale = {"exact_scale": scale_report(work, scales, args.ratio, args.baseline_path)}
    if args.rounds < 1:
        emit(scale)
        return
    data_dir = os.path.join(work, "logs")
    write_logs(data_dir, args.events)
    runs = interleaved_rounds({mode: (lambda mode=mode: run_mode(data_dir, os.path.join(work, "out"), mode,
                                                                 args.ratio)) for mode in MODES}, args.rounds)
    times = {mode: seconds_of(r) for mode, r in runs.items()}
    stats = {mode: r[-1].value for mode, r in runs.items()}
    events = stats["EXACT"]["targets"] + stats["EXACT"]["non_targets_in"]
    report = {"events": events, "targets": stats["EXACT"]["targets"], "ratio": args.ratio, "modes": {}, **scale}
    for mode in MODES:
        t = statistics.median(times[mode])
        speed = paired_ratio(times["TWO_PASS"], times[mode])  # TWO_PASS's seconds over this mode's, per round
        per_partition = [abs(p["ratio"] - args.ratio) for p in stats[mode]["partitions"] if p["ratio"] is not None]
        report["modes"][mode] = {
            "seconds": round(t, 2), "seconds_spread": summary(times[mode])["spread"], "events_per_s": round(events / t),
            "speed_vs_two_pass": round(speed["median"], 2), "speed_vs_two_pass_spread": speed["spread"],
            "non_targets_out": stats[mode]["non_targets_out"], "exact_count": stats[mode]["exact_target_count"],
            "achieved_ratio": round(stats[mode]["achieved_ratio"], 4),
            "ratio_error": round(stats[mode]["ratio_error"], 4),
            "mean_abs_partition_error": round(float(np.mean(per_partition)), 3),
        }
    emit(report)


if __name__ == "__main__":
    main()
