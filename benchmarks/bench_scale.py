"""How `shardmill run` and the plan scale with the number of sources and chunks.

Three parts, one JSON object:

- "sources": `shardmill run` (in-process runner) on 10^2 … 2·10^4 loose `.gz`
  files of small games: wall time and peak memory (from wait4: see
  benchmarks/harness.py), and the growth of each from the smallest size (the
  baseline of this run).
- "chunks": the same on ≥ 10^6 chunks in tar archives (the window keeps the
  newest 20,000 so the output stays small; every chunk is indexed and planned).
- "plan": the plan stage alone on a synthetic index of up to 10^7 rows, as the
  job runs it (per-source summaries, global decisions, then each index table
  planned on its own), against planning the whole index as one table (what
  the job did before), side by side in subprocesses: time and peak RSS.

    python -m benchmarks.bench_scale [--sources 100,1000,5000,20000] [--chunks 1000000]
                                     [--plan-rows 1000000,10000000] [--whole-plan-rows 1000000] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import textwrap

import numpy as np

from benchmarks.harness import emit, last_json_line, progress, python_child, run_child
from tests.datagen.lc0 import write_archives, write_loose_games

SHARDMILL = [sys.executable, "-m", "shardmill.pipelines.cli", "run"]
def run_job(data_dir: str, work: str, chunk_pool: str) -> dict:
    config = os.path.join(work, "job.textproto")
    with open(config, "w") as f:
        f.write(f'input: "{data_dir}"\nlc0 {{ index {{ lc0_version: 6 }} chunk_pool {{ {chunk_pool} }} }}\n'
                'max_error_fraction: 1\n')
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    run = run_child(SHARDMILL + ["--config", config, "--output", out]).check("shardmill run")
    with open(os.path.join(out, ".manifest.json")) as f:
        acc = json.load(f)["stats"]["accounting"]
    return {"seconds": round(run.seconds, 2), "peak_rss_mib": run.peak_rss_mib,
            "chunks_indexed": acc["chunks_indexed"], "records_written": acc["records_written"]}


PLAN_SCRIPT = textwrap.dedent("""
    import json, pickle, sys, time
    import numpy as np, pyarrow as pa
    from benchmarks.bench_scale import synthetic_table
    from shardmill.transforms.lc0 import sampling as job_plan
    from shardmill.transforms.lc0.sampling import SamplingParams
    from shardmill.transforms.output.shard_count import ShardSizing, shard_count

    mode, rows, per_table = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    params = SamplingParams(seed=1, passes=4, position_count=8, threshold=150, gamma=1.0, pool_size=rows // 2)
    tables = rows // per_table
    start = time.perf_counter()
    if mode == "whole":
        from tests.support.lc0_plan import make_plan

        plan = make_plan(pa.concat_tables([synthetic_table(t, per_table) for t in range(tables)]), params)
        tasks, planned = len(plan.tasks), plan.stats["accounting"]["records_planned"]
    else:
        # As the job: each index table is an element, summarised, then planned on its own (on a
        # cluster, in parallel); only summaries and sums meet. Here the tables are made again for
        # each step instead of being held, as Beam keeps them on its workers.
        summaries = [s for t in range(tables) for s in job_plan.summarize_sources(synthetic_table(t, per_table))]
        decisions = job_plan.decide(summaries, params.pool_size)
        stats, planned = [], 0
        for t in range(tables):
            part = job_plan.plan_table(synthetic_table(t, per_table), decisions, params)
            stats.append(part.stats)
            planned += part.records_planned
        num_shards = shard_count(planned * decisions.record_size, ShardSizing(), job_plan.WRITE_LESS)
        tasks = largest_task = 0
        for t in range(tables):
            part = job_plan.plan_table(synthetic_table(t, per_table), decisions, params)
            for task in job_plan.read_tasks(part.used, params, num_shards, job_plan.MAX_TASK_BYTES):
                tasks += 1
                largest_task = max(largest_task, len(pickle.dumps(task)))
        job_plan.final_stats(job_plan.merge_stats(stats), params)
        print(json.dumps({"largest_task_pickle_bytes": largest_task, "summaries_pickle_bytes":
                          len(pickle.dumps(summaries))}), file=sys.stderr)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": round(seconds, 2), "us_per_row": round(seconds / rows * 1e6, 3),
                      "tasks": tasks, "records_planned": planned}))
""")

SOURCES_PER_TABLE = 256  # as many sources as the job's discovery batches together
CHUNKS_PER_SOURCE = 40


def synthetic_table(table: int, rows: int):
    """Index table `table`: SOURCES_PER_TABLE-ish sources of CHUNKS_PER_SOURCE games (20-400 records)."""
    import pyarrow as pa

    from shardmill.transforms.lc0.index import INDEX_SCHEMA

    rng = np.random.default_rng(table)
    per_source = min(rows, CHUNKS_PER_SOURCE)
    sources = rows // per_source
    ids = table * 10**6 + np.repeat(np.arange(sources), per_source)
    names = np.array([f"/data/training-{i:012d}.tar" for i in range(table * 10**6, table * 10**6 + sources)],
                     dtype=object)[ids - table * 10**6]
    n = len(ids)
    return pa.table({
        "source": pa.array(names.tolist()),
        "sort_key": pa.array([s[6:] for s in names.tolist()]),
        "chunk": pa.array(np.tile(np.arange(per_source), sources), pa.int32()),
        "member": pa.array(["games/x.gz"] * n),
        "offset": pa.array(np.tile(np.arange(per_source) * 20_000, sources), pa.int64()),
        "length": pa.array(np.full(n, 15_000), pa.int64()),
        "num_records": pa.array(rng.integers(20, 400, n), pa.int64()),
        "record_size": pa.array(np.full(n, 8356), pa.int32()),
        "version": pa.array(np.full(n, 6), pa.int32()),
        "verified": pa.array(np.zeros(n, bool)),
        "format": pa.array(["lc0"] * n),
    }, schema=INDEX_SCHEMA)


def plan_stage(mode: str, rows: int) -> dict:
    per_table = SOURCES_PER_TABLE * CHUNKS_PER_SOURCE
    done = run_child(python_child(PLAN_SCRIPT, mode, rows, per_table))
    if done.returncode:
        return {"failed": done.stderr.strip().splitlines()[-1] if done.stderr else f"exit {done.returncode}"}
    result = {**last_json_line(done.stdout), "peak_rss_mib": done.peak_rss_mib}
    for line in done.stderr.splitlines():
        if line.startswith("{"):
            result.update(json.loads(line))
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sources", default="100,1000,5000,20000")
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--chunk-archives", type=int, default=100)
    parser.add_argument("--plan-rows", default="1000000,10000000")
    parser.add_argument("--whole-plan-rows", default="1000000", help="sizes at which to also plan the whole index")
    parser.add_argument("--data-root", help="keep generated data here and reuse it")
    args = parser.parse_args()
    root = args.data_root or tempfile.mkdtemp(prefix="bench-scale-")
    work = tempfile.mkdtemp(prefix="bench-scale-work-")
    report = {"sources": {}, "chunks": {}, "plan": {}}
    sizes = [int(s) for s in args.sources.split(",") if s]
    for count in sizes:
        data = os.path.join(root, f"loose-{count}")
        if not os.path.isdir(data):
            write_loose_games(data, count)
        report["sources"][count] = run_job(data, work, "position_count: 2")
        progress({"sources": count, **report["sources"][count]})
    if sizes:
        base = report["sources"][sizes[0]]
        for count in sizes[1:]:
            r = report["sources"][count]
            r["growth_vs_smallest"] = {"sources": count / sizes[0], "seconds": round(r["seconds"] / base["seconds"], 2),
                                       "peak_rss": round(r["peak_rss_mib"] / base["peak_rss_mib"], 2)}
    if args.chunks:
        data = os.path.join(root, f"archives-{args.chunks}")
        if not os.path.isdir(data):
            write_archives(data, args.chunk_archives, args.chunks // args.chunk_archives)
        report["chunks"][args.chunks] = run_job(data, work, "chunk_pool_size: 20000 position_count: 1")
        progress({"chunks": args.chunks, **report["chunks"][args.chunks]})
    whole_sizes = {int(s) for s in args.whole_plan_rows.split(",") if s}
    for rows in (int(s) for s in args.plan_rows.split(",") if s):
        entry = {"per_table": plan_stage("per_table", rows)}
        if rows in whole_sizes:
            entry["whole_index"] = plan_stage("whole", rows)
            a, b = entry["per_table"], entry["whole_index"]
            if "failed" not in a and "failed" not in b:
                entry["whole_over_per_table"] = {"seconds": round(b["seconds"] / a["seconds"], 2),
                                                 "peak_rss": round(b["peak_rss_mib"] / a["peak_rss_mib"], 2)}
        report["plan"][rows] = entry
        progress({"plan_rows": rows, **entry})
    shutil.rmtree(work, ignore_errors=True)
    if not args.data_root:
        shutil.rmtree(root, ignore_errors=True)
    emit(report)


if __name__ == "__main__":
    main()
