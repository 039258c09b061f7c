"""`shardmill run` vs the single-core script, side by side on the same generated data.

For each input size (1× and 4×) and each of 2 interleaved rounds it runs, as
separate processes: the hand-written single-core baseline
(benchmarks/single_core_baseline.py), `shardmill run` on the in-process
runner, and `shardmill run` with 2 worker processes. It reports wall time,
input records/s, peak memory of the whole process tree (sampled from /proc),
the throughput ratio of each shardmill mode to the baseline, and how time
and memory grow from 1× to 4×. Prints one JSON object.

    python benchmarks/bench_job.py [--archives 8 --games 150 --rounds 2 --scales 1,4,16 --data-root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, REPO)

from tests.datagen.lc0 import write_dataset  # noqa: E402

# Shards of a fixed target size, so their number grows with the input and a
# shard writer's memory should not.
SAMPLING = dict(passes=2, threshold=150, gamma=1.0, position_count=16, target_shard_bytes=64 << 20)


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def measure(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak tree RSS bytes) of a command."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss_bytes(process.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, err = process.communicate()
    done.set()
    sampler.join()
    if process.returncode:
        raise RuntimeError(f"{command} failed:\n{err.decode()[-3000:]}")
    return time.perf_counter() - start, peak


def records_in(data_dir: str) -> int:
    """Records in the generated archives (from the chunk index: exact, no inflation for single members)."""
    from shardmill.transforms.lc0.chunk_index import index_source

    return sum(int(sum(index_source(os.path.join(data_dir, n), os.path.getsize(os.path.join(data_dir, n)), "scan",
                                    opener=lambda p: open(p, "rb")).table["num_records"].to_pylist()))
               for n in sorted(os.listdir(data_dir)))


def commands(data_dir: str, out_dir: str) -> dict[str, list[str]]:
    config = os.path.join(out_dir, "job.textproto")
    with open(config, "w") as f:
        f.write(
            f'input: "{data_dir}"\n'
            f'lc0 {{ chunk_pool {{ passes: {SAMPLING["passes"]} position_count: {SAMPLING["position_count"]} '
            f'hanse_sampling_threshold: {SAMPLING["threshold"]} hanse_sampling_gamma: {SAMPLING["gamma"]} }} }}\n'
            f'output {{ target_shard_bytes: {SAMPLING["target_shard_bytes"]} overwrite: true }}\n'
            f'max_error_fraction: 1\n'
        )
    shardmill = [sys.executable, "-m", "shardmill.pipelines.cli", "run", "--config", config]
    return {
        "single_core_script": [sys.executable, os.path.join(REPO, "benchmarks", "single_core_baseline.py"),
                               data_dir, os.path.join(out_dir, "baseline"),
                               "--passes", str(SAMPLING["passes"]), "--threshold", str(SAMPLING["threshold"]),
                               "--position-count", str(SAMPLING["position_count"]),
                               "--target-shard-bytes", str(SAMPLING["target_shard_bytes"])],
        "shardmill_in_process": shardmill + ["--output", os.path.join(out_dir, "inproc")],
        "shardmill_2_workers": shardmill + ["--output", os.path.join(out_dir, "mp"),
                                            "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--archives", type=int, default=8)
    parser.add_argument("--games", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scales", default="1,4", help="input sizes as multiples of --archives")
    parser.add_argument("--data-root", help="keep generated data here and reuse it across runs")
    args = parser.parse_args()
    scales = [int(x) for x in args.scales.split(",")]
    work = tempfile.mkdtemp(prefix="bench-job-")
    report = {"sampling": SAMPLING, "sizes": {}}
    try:
        for scale in scales:
            data_dir = os.path.join(args.data_root or work, f"data{scale}")
            if not os.path.isdir(data_dir):
                write_dataset(data_dir, args.archives * scale, args.games, loose_games=0, bad=False, seed=scale)
            records = records_in(data_dir)
            cmds = commands(data_dir, work)
            times = {k: [] for k in cmds}
            peaks = {k: 0 for k in cmds}
            for _ in range(args.rounds):
                for name, command in cmds.items():
                    seconds, peak = measure(command)
                    times[name].append(seconds)
                    peaks[name] = max(peaks[name], peak)
            base = statistics.median(times["single_core_script"])
            report["sizes"][f"{scale}x"] = {
                "records_in": records,
                "archive_mb": round(sum(os.path.getsize(os.path.join(data_dir, n))
                                        for n in os.listdir(data_dir)) / 1e6, 1),
                "variants": {
                    name: {"seconds": round(statistics.median(ts), 2),
                           "records_in_per_s": round(records / statistics.median(ts)),
                           "peak_rss_mb": round(peaks[name] / 1e6),
                           "throughput_vs_single_core_script": round(base / statistics.median(ts), 2)}
                    for name, ts in times.items()
                },
            }
            if not args.data_root:
                shutil.rmtree(data_dir)
        first = report["sizes"][f"{scales[0]}x"]["variants"]
        for scale in scales[1:]:
            other = report["sizes"][f"{scale}x"]["variants"]
            report[f"growth_{scales[0]}x_to_{scale}x"] = {
                name: {"time": round(other[name]["seconds"] / first[name]["seconds"], 2),
                       "peak_rss": round(other[name]["peak_rss_mb"] / first[name]["peak_rss_mb"], 2)}
                for name in first
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
