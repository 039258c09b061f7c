"""Where the lc0 job's time goes, stage by stage, for the sampled and the all-positions workloads.

    python -m benchmarks.profile_lc0_stages [--archives 32 --games 150 --rounds 2 --data-root DIR]

A corpus like the held-out one (32 archives of 150 games: ~4,800 chunks, ~700k records); each workload is
run by `run_job` in a fresh process on the in-process runner with one worker, so bundles run one after
another. Each stage's DoFn (or function) is wrapped with a timer that also drains its outputs, so the time
of what consumes them is not counted in it:

- discovery: listing and batching the files;
- index: indexing the sources (index cache off: every source read);
- plan: per-source summaries, global decisions, planning each index table, read tasks;
- load (inflate): inflating the planned chunks and picking their records (`load_task`);
- spill: writing the loaded records to spill files per shard;
- write: reading the spills back and writing the Parquet shards;
- other: the rest of the run's wall time (Python and Beam start-up, graph construction, Beam's own work
  between stages, claim, commit).

Each stage's seconds are the wall time its intervals cover: read tasks are loaded and spilled two at a
time and shards written two at a time, so load and spill overlap each other (their seconds can add up
to more than the time both took), while "other" is the time no stage covers.

Prints one JSON object: seconds per stage and workload (median of the rounds) and each stage's share.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from benchmarks.harness import emit, last_json_line, run_child
from tests.datagen.lc0 import write_dataset

WORKLOADS = {
    "sampled": "lc0 { index { cache: \"none\" } chunk_pool { passes: 4 position_count: 8 "
               "hanse_sampling_threshold: 150 } }",
    "all_positions": "lc0 { index { cache: \"none\" } }",
}

PROFILE_SCRIPT = r"""
import builtins, json, sys, time
start = time.perf_counter()
import shardmill.pipelines.cli  # first: whatever the installed `shardmill` command sets before pyarrow loads
from apache_beam.options.pipeline_options import PipelineOptions
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.common import discovery
from shardmill.transforms.lc0 import graph
from shardmill.transforms.output import sharded_output

# Beam pickles the functions it is handed (a closure's dict would be a copy): the stages' intervals are kept
# on a module every copy reaches by reference. Stages run on several threads (two read tasks at once, two
# shards at once) and overlap, so a stage's time is the wall time covered by its intervals.
builtins.shardmill_stage_intervals = intervals = []


def add(stage, began):
    builtins.shardmill_stage_intervals.append((stage, began, time.perf_counter()))

def timed_function(owner, name, stage, drain=False):  # a module's function or a class's method (self in *args)
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        out = original(*args, **kwargs)
        if drain and out is not None:
            out = list(out)
        add(stage, t)
        return out
    setattr(owner, name, wrapper)

def covered(spans):
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total

timed_function(discovery._ListInputFn, "process", "discovery", drain=True)
timed_function(discovery._BatchFilesFn, "process", "discovery", drain=True)
timed_function(discovery._BatchFilesFn, "finish_bundle", "discovery", drain=True)
timed_function(graph._IndexFilesFn, "process", "index", drain=True)
for name in ("summarize_sources", "decide", "plan_table"):
    timed_function(graph, name, "plan")
timed_function(graph, "read_tasks", "plan", drain=True)
timed_function(graph, "load_task", "load (inflate)")
timed_function(graph, "write_spill", "spill", drain=True)
timed_function(sharded_output._WriteShardFn, "_write", "write")

data, out, extra = sys.argv[1], sys.argv[2], sys.argv[3]
config = validate(parse_config(f'input: "{data}"\nmax_error_fraction: 1\noutput {{ overwrite: true }}\n{extra}'))
run_job(config, [data], out, PipelineOptions(["--direct_num_workers=1"]))
total = time.perf_counter() - start
spent = {}
for stage in dict.fromkeys(stage for stage, _, _ in intervals):
    spent[stage] = covered([(a, b) for s, a, b in intervals if s == stage])
spent["other"] = total - covered([(a, b) for _, a, b in intervals])
spent["total"] = total
print(json.dumps(spent))
"""


def profile(python: str, data: str, out: str, extra: str) -> dict:
    return last_json_line(run_child([python, "-c", PROFILE_SCRIPT, data, out, extra]).check("a profiled run").stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archives", type=int, default=32)
    parser.add_argument("--games", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--baseline-python", default=None,
                        help="also profile the shardmill installed for this interpreter (e.g. a venv of an earlier "
                             "commit), rounds interleaved with this one's: a before/after in one run")
    args = parser.parse_args()
    pythons = {"this": sys.executable}
    if args.baseline_python:
        pythons["baseline"] = args.baseline_python
    work = tempfile.mkdtemp(prefix="profile_lc0_stages_")
    data = os.path.join(args.data_root or work, f"corpus-{args.archives}x{args.games}")
    try:
        if not os.path.isdir(data):
            write_dataset(data, args.archives, args.games, loose_games=0, bad=False, seed=3)
        runs = {(who, name): [] for who in pythons for name in WORKLOADS}
        for _ in range(args.rounds):
            for name, extra in WORKLOADS.items():
                for who, python in pythons.items():
                    runs[who, name].append(profile(python, data, os.path.join(work, "out"), extra))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    reports = {}
    for who in pythons:
        report = {"archives": args.archives, "games": args.games, "rounds": args.rounds, "seconds": {}, "share": {}}
        for name in WORKLOADS:
            results = runs[who, name]
            stages = {stage: statistics.median(r.get(stage, 0.0) for r in results) for stage in results[0]}
            report["seconds"][name] = {stage: round(value, 2) for stage, value in stages.items()}
            report["share"][name] = {stage: round(value / stages["total"], 3) for stage, value in stages.items()
                                     if stage != "total"}
        reports[who] = report
    emit(reports["this"] if len(reports) == 1 else reports)


if __name__ == "__main__":
    main()
