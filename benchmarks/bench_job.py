"""`shardmill run` vs the single-core script, side by side on the same generated data.

For each workload, each input size (1× and 4×) and each of 2 interleaved
rounds it runs, as separate processes: the hand-written single-core baseline
(`python -m benchmarks.single_core_baseline`), `shardmill run` on the in-process
runner, and `shardmill run` with 2 worker processes. It reports wall time,
input records/s, peak memory (the largest process's, from wait4: see
benchmarks/harness.py), the throughput ratio of each shardmill mode to the
baseline (per round, with its spread), and how time and memory grow from 1×
to 4×. Prints one JSON object.

    python -m benchmarks.bench_job [--archives 8 --games 150 --rounds 2 --scales 1,4,16 --data-root DIR]
    python -m benchmarks.bench_job --archives 32 --scales 1 --rounds 3 --workloads sampled,all_positions

Modes: the script, shardmill in process, shardmill with 2 worker processes
(the default set), `shardmill_rerun_index_cached` (in process, the
sources' indexes read from the index cache filled by an untimed first run)
and `shardmill_in_process_spill` (in process, output.shuffle_memory_bytes 0:
every load task spilled); --shuffle-memory-bytes N sets the other runs' budget;
--baseline-python PY adds `baseline_shardmill_in_process`, the shardmill
installed for PY (an earlier commit's venv) in the same rounds.

Workloads: `shards` (2 passes, threshold 150, 16 positions per use, 64 MiB
shards; the default), `sampled` (4 passes, threshold 150, 8 positions) and
`all_positions` (every record once, no chunk sampling).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from benchmarks.harness import emit, interleaved_rounds, paired_ratio, run_child, summary
from tests.datagen.lc0 import write_dataset

# Shards of a fixed target size, so their number grows with the input and a
# shard writer's memory should not. passes=None: every record once.
WORKLOADS = {
    "shards": dict(passes=2, threshold=150, gamma=1.0, position_count=16, target_shard_bytes=64 << 20),
    "sampled": dict(passes=4, threshold=150, gamma=1.0, position_count=8, target_shard_bytes=64 << 20),
    "all_positions": dict(passes=None, target_shard_bytes=64 << 20),
}
MODES = ("single_core_script", "shardmill_in_process", "shardmill_2_workers")
# Not run unless asked: the in-process run with output.shuffle_memory_bytes 0, every load task spilled (the
# shuffle as it was before it kept records in memory), for the peak memory and time of both paths.
SPILL_MODE = "shardmill_in_process_spill"
# Not run unless asked: the in-process run again over an unchanged corpus, its sources' indexes read from the
# index cache (filled by one untimed run first), as each cycle over a growing corpus runs.
CACHED_MODE = "shardmill_rerun_index_cached"
# With --baseline-python: the in-process run of the shardmill installed for that interpreter (an earlier
# commit's venv), a before/after in the same rounds.
BASELINE_MODE = "baseline_shardmill_in_process"


def measure(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of a command, which must succeed."""
    run = run_child(command).check(command[0])
    return run.seconds, run.peak_rss_bytes


def records_in(data_dir: str) -> int:
    """Records in the generated archives (from the chunk index: exact, no inflation for single members)."""
    from shardmill.transforms.lc0.index import index_source

    return sum(int(sum(index_source(os.path.join(data_dir, n), os.path.getsize(os.path.join(data_dir, n)), "scan",
                                    opener=lambda p: open(p, "rb")).table["num_records"].to_pylist()))
               for n in sorted(os.listdir(data_dir)))


def commands(data_dir: str, out_dir: str, workload: dict, baseline_python: str | None = None,
             shuffle_memory_bytes: int | None = None) -> dict[str, list[str]]:
    """Each mode's command line for one workload (the index cache off, but in CACHED_MODE: every run reads
    every source). shuffle_memory_bytes: the config's output.shuffle_memory_bytes (None: unset, the default)."""
    script = [sys.executable, "-m", "benchmarks.single_core_baseline", data_dir, os.path.join(out_dir, "baseline"), "--target-shard-bytes", str(workload["target_shard_bytes"])]
    if workload["passes"] is None:
        pool = ""
        script.append("--all-positions")
    else:
        pool = (f'chunk_pool {{ passes: {workload["passes"]} position_count: {workload["position_count"]} '
                f'hanse_sampling_threshold: {workload["threshold"]} hanse_sampling_gamma: {workload["gamma"]} }}')
        script += ["--passes", str(workload["passes"]), "--threshold", str(workload["threshold"]),
                   "--gamma", str(workload["gamma"]), "--position-count", str(workload["position_count"])]
    shardmill, cached, spilled = ([sys.executable, "-m", "shardmill.pipelines.cli", "run", "--config",
                                   os.path.join(out_dir, f"job-{name}.textproto")]
                                  for name in ("uncached", "cached", "spilled"))
    budget = "" if shuffle_memory_bytes is None else f"shuffle_memory_bytes: {shuffle_memory_bytes}"
    for command, cache, memory in ((shardmill, "none", budget), (cached, os.path.join(out_dir, "index-cache"), budget),
                                   (spilled, "none", "shuffle_memory_bytes: 0")):
        with open(command[-1], "w") as f:
            f.write(
                f'input: "{data_dir}"\n'
                f'lc0 {{ index {{ cache: "{cache}" }} {pool} }}\n'
                f'output {{ target_shard_bytes: {workload["target_shard_bytes"]} overwrite: true {memory} }}\n'
                f'max_error_fraction: 1\n'
            )
    return {
        "single_core_script": script,
        "shardmill_in_process": shardmill + ["--output", os.path.join(out_dir, "inproc")],
        "shardmill_2_workers": shardmill + ["--output", os.path.join(out_dir, "mp"),
                                            "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        CACHED_MODE: cached + ["--output", os.path.join(out_dir, "cached")],
        SPILL_MODE: spilled + ["--output", os.path.join(out_dir, "spilled")],
        **({BASELINE_MODE: [baseline_python] + shardmill[1:] + ["--output", os.path.join(out_dir, "before")]}
           if baseline_python else {}),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--archives", type=int, default=8)
    parser.add_argument("--games", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scales", default="1,4", help="input sizes as multiples of --archives")
    parser.add_argument("--data-root", help="keep generated data here and reuse it across runs")
    parser.add_argument("--workloads", default="shards", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, of {', '.join(MODES + (CACHED_MODE, SPILL_MODE))}")
    parser.add_argument("--baseline-python", help=f"adds {BASELINE_MODE}: the shardmill of this interpreter")
    parser.add_argument("--shuffle-memory-bytes", type=int,
                        help=f"the runs' output.shuffle_memory_bytes (default: unset; {SPILL_MODE} sets 0)")
    args = parser.parse_args()
    scales = [int(x) for x in args.scales.split(",")]
    modes = args.modes.split(",") + ([BASELINE_MODE] if args.baseline_python else [])
    if "single_core_script" not in modes:
        parser.error("--modes must include single_core_script (the baseline of every ratio)")
    work = tempfile.mkdtemp(prefix="bench-job-")
    report = {}
    try:
        for name in args.workloads.split(","):
            report[name] = run_workload(WORKLOADS[name], modes, scales, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(report if len(report) > 1 else next(iter(report.values())))


def run_workload(workload: dict, modes: list[str], scales: list[int], args, work: str) -> dict:
    """The modes' paired rounds at each scale, with ratios to the script and growth between scales."""
    report = {"workload": workload, "sizes": {}}
    for scale in scales:
        data_dir = os.path.join(args.data_root or work, f"data{scale}")
        if not os.path.isdir(data_dir):
            write_dataset(data_dir, args.archives * scale, args.games, loose_games=0, bad=False, seed=scale)
        records = records_in(data_dir)
        cmds = {mode: command for mode, command in commands(data_dir, work, workload, args.baseline_python,
                                                            args.shuffle_memory_bytes).items()
                if mode in modes}
        if CACHED_MODE in cmds:
            shutil.rmtree(os.path.join(work, "index-cache"), ignore_errors=True)
            measure(cmds[CACHED_MODE])  # fills the index cache
        runs = interleaved_rounds({name: (lambda c=command: measure(c)) for name, command in cmds.items()},
                                  args.rounds)
        times = {name: [seconds for seconds, _ in (r.value for r in results)] for name, results in runs.items()}
        peaks = {name: max(peak for _, peak in (r.value for r in results)) for name, results in runs.items()}
        report["sizes"][f"{scale}x"] = {
            "records_in": records,
            "archive_mb": round(sum(os.path.getsize(os.path.join(data_dir, n))
                                    for n in os.listdir(data_dir)) / 1e6, 1),
            "variants": {
                name: {"seconds": round(statistics.median(ts), 2),
                       "rounds": [round(t, 2) for t in ts],
                       "seconds_spread": summary(ts)["spread"],
                       "records_in_per_s": round(records / statistics.median(ts)),
                       "peak_rss_mb": round(peaks[name] / 1e6),
                       # per round: the script's seconds over this mode's in the same round
                       "throughput_vs_single_core_script": round(
                           paired_ratio(times["single_core_script"], ts)["median"], 2),
                       "throughput_vs_single_core_script_spread": paired_ratio(times["single_core_script"],
                                                                               ts)["spread"]}
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
    return report


if __name__ == "__main__":
    main()
