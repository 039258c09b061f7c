"""The lc0 job's total CPU against its floor: the CPU no implementation of the same output can avoid.

    python -m benchmarks.bench_lc0_floor [--archives 8 --games 150 --scales 1,4 --rounds 2 --data-root DIR]

For both lc0 workloads bench_job runs (`sampled`: 4 passes, threshold 150, 8 positions per use;
`all_positions`: every record once; 64 MiB shards, index cache off) at each input size (--archives x scale
archives of --games games, tests/datagen/lc0.py), each round runs, as child processes:

- the job: `shardmill run` in the default running mode (the in-process runner), its wall seconds, peak RSS and
  total CPU: user + system from wait4, which holds the process's own and those of every descendant it waited
  for (a multi-process run's workers are waited for by Beam when their pipeline ends; see --running-mode);
- the floor, single-threaded, no Beam, over the run's output:
  - inflate: each chunk the run used inflated once, by the load stage's own kernel
    (shardmill.core.kernels.pack_chunk_records with no positions: libdeflate, CRC and versions checked, no
    record copied or packed: that is the job's own work, not the floor's). Which chunks
    and which of their records come from the job's own functions: its index (index_source) and plan
    (summarize_sources, decide, plan_table: the accepted chunks and their planned records; every chunk for all
    positions), less any chunk the run's dead letters say failed at load; their number and records must equal
    the run's manifest;
  - write: the committed shards' rows, read back untimed, encoded again by the job's shard encoder
    (transforms/output/shard_format.encode_shard: the config's codec and level, its row-group bytes,
    the lc0 shards' Parquet options) and written to a file; the bytes must equal the committed shard's;
  reading the compressed chunks, planning and reading shards back are outside the timed parts;
- the start-up: the same job on 1 archive of 1 game, its CPU (Python, Beam, the graph, claim and commit).

Prints one JSON object: per workload and size, the medians of job_cpu_s, job_wall_s, job_peak_rss_mb,
floor_inflate_cpu_s, floor_write_cpu_s, floor_cpu_s, startup_cpu_s, job_cpu_over_floor (per round, paired)
and (job_cpu_s - startup_cpu_s) / floor_cpu_s.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks.harness import emit, interleaved_rounds, last_json_line, paired_ratio, progress, run_child, summary
from tests.datagen.lc0 import write_dataset

# bench_job's lc0 workloads (its WORKLOADS "sampled" and "all_positions" and the config its commands() writes).
WORKLOADS = {
    "sampled": "chunk_pool { passes: 4 position_count: 8 hanse_sampling_threshold: 150 hanse_sampling_gamma: 1.0 }",
    "all_positions": "",
}
TARGET_SHARD_BYTES = 64 << 20
RUNNING_MODES = {
    "in_process": [],  # the default: bench_job's shardmill_in_process
    "2_workers": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}
CHILD_TIMEOUT_S = 3600
# The config's output.shuffle_memory_bytes (--shuffle-memory-bytes), where set; unset, the job's default.
SHUFFLE_MEMORY = ""


def write_config(path: str, data_dir: str, pool: str) -> str:
    with open(path, "w") as f:
        f.write(f'input: "{data_dir}"\n'
                f'lc0 {{ index {{ cache: "none" }} {pool} }}\n'
                f'output {{ target_shard_bytes: {TARGET_SHARD_BYTES} overwrite: true {SHUFFLE_MEMORY} }}\n'
                f'max_error_fraction: 1\n')
    return path


def run_job(config: str, output: str, running_mode: str):
    command = [sys.executable, "-m", "shardmill.pipelines.cli", "run", "--config", config, "--output", output,
               *RUNNING_MODES[running_mode]]
    return run_child(command, timeout=CHILD_TIMEOUT_S).check("shardmill run")


def run_floor(config: str, output: str) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_lc0_floor", "--floor-of", output, "--config", config]
    return last_json_line(run_child(command, timeout=CHILD_TIMEOUT_S).check("the floor").stdout)


# ---- the floor (in its own process) -------------------------------------------------------------------------

def _used_chunks(config):
    """The chunks the run used, as the job decides them: its index of every input file, then its plan."""
    import pyarrow as pa

    from shardmill.transforms.common.discovery import list_input
    from shardmill.transforms.lc0.index import index_source
    from shardmill.transforms.lc0.plan import plan_lc0
    from shardmill.transforms.lc0.record_format import LC0_INPUT_SUFFIXES
    from shardmill.transforms.lc0.sampling import decide, plan_table, summarize_sources

    plan = plan_lc0(config, list(config.input))
    files = [event[1:] for item in plan.inputs for event in list_input(item, LC0_INPUT_SUFFIXES)
             if event[0] == "file"]
    tables = [index_source(path, size, plan.count_method, plan.expected_version,
                           max_chunk_bytes=plan.max_chunk_bytes).table for path, size in files]
    decisions = decide([s for table in tables for s in summarize_sources(table)], plan.params.pool_size)
    used = pa.concat_tables([plan_table(table, decisions, plan.params).used for table in tables])
    return used.sort_by([("source", "ascending"), ("offset", "ascending")]), plan.params


def _inflate_floor(config, failed_at_load: set) -> dict:
    """CPU seconds to inflate and check each used chunk once (the records the run emits from it counted)."""
    import numpy as np

    from shardmill.core import kernels
    from shardmill.transforms.lc0.sampling import emissions

    used, params = _used_chunks(config)
    rows = [row for row in used.to_pylist() if (row["source"], row["chunk"]) not in failed_at_load]
    if not rows:
        return {"cpu_s": 0.0, "chunks": 0, "records": 0}
    nothing, no_room, one_offset = np.empty(0, np.int64), np.empty(0, np.uint8), np.zeros(1, np.int64)
    cpu = 0.0
    records = 0
    start = 0
    while start < len(rows):  # source by source: its chunks read and their positions planned, then timed
        source = rows[start]["source"]
        stop = next((i for i in range(start, len(rows)) if rows[i]["source"] != source), len(rows))
        work = []
        with open(source, "rb") as f:
            for row in rows[start:stop]:
                f.seek(row["offset"])
                _, positions = emissions(row["chunk_key"], row["num_records"], params.position_count, params.seed,
                                         0, row["planned_records"])
                work.append((f.read(row["length"]), row, positions.astype(np.int64)))
        began = time.process_time()
        for compressed, row, positions in work:
            outcome = kernels.pack_chunk_records(compressed, row["num_records"], row["record_size"], row["version"],
                                                 nothing, no_room, one_offset)
            if outcome != -1:
                raise RuntimeError(f"{source} chunk {row['chunk']}: the kernel declined it ({outcome})")
        cpu += time.process_time() - began
        records += sum(len(positions) for _, _, positions in work)
        start = stop
    return {"cpu_s": cpu, "chunks": len(rows), "records": records}


def _write_floor(config, output: str, manifest: dict, scratch: str) -> dict:
    """CPU seconds to encode the committed shards' rows as the job does and write them, shard by shard."""
    import pyarrow.parquet as pq

    from shardmill.transforms.lc0.shards import Lc0ShardFormat
    from shardmill.transforms.output.shard_format import ShardCompression, encode_shard

    shard_format = Lc0ShardFormat()
    cpu = 0.0
    identical = True
    for shard in manifest["shards"]:
        table = pq.read_table(os.path.join(output, shard["path"]))
        # As WriteShardedOutput sizes row groups: the config's bytes over the format's row bytes.
        row_group_rows = max(1, config.output.row_group_bytes // shard_format.row_bytes(table, manifest["record"]))
        began = time.process_time()
        data = encode_shard(table, row_group_rows, ShardCompression.of(config.output),
                            **shard_format.parquet_options)
        with open(scratch, "wb") as f:
            f.write(data)
        cpu += time.process_time() - began
        identical &= hashlib.sha256(data).hexdigest() == shard["sha256"]
        del table, data
    return {"cpu_s": cpu, "shards": len(manifest["shards"]), "identical_bytes": identical}


def floor_main(output: str, config_path: str) -> None:
    import shardmill.pipelines.cli  # noqa: F401 - first: what the installed command sets before pyarrow loads
    from shardmill.core.output_contract import MANIFEST_NAME
    from shardmill.pipelines.config import load_config, validate

    config = load_config(config_path)
    config.output.path = output
    validate(config)
    with open(os.path.join(output, MANIFEST_NAME)) as f:
        manifest = json.load(f)
    failed_at_load = set()
    if manifest.get("errors", {}).get("count"):
        with open(os.path.join(output, manifest["errors"]["path"])) as f:
            failed_at_load = {(d["path"], d.get("chunk")) for d in map(json.loads, f) if d["stage"] == "load"}
    inflate = _inflate_floor(config, failed_at_load)
    with tempfile.TemporaryDirectory(prefix="floor-write-") as scratch:
        write = _write_floor(config, output, manifest, os.path.join(scratch, "shard.parquet"))
    accounting = manifest["stats"]["accounting"]
    # The floor did exactly the run's work: its chunks, its records, its shards' bytes.
    checks = {"chunks_as_run": inflate["chunks"] == accounting["chunks_loaded"],
              "records_as_run": inflate["records"] == accounting["records_written"],
              "shard_bytes_as_run": write["identical_bytes"]}
    if not all(checks.values()):
        raise SystemExit(f"the floor's work differs from the run's: {checks}, floor {inflate}, {write}, "
                         f"run {accounting}")
    print(json.dumps({"inflate_cpu_s": inflate["cpu_s"], "write_cpu_s": write["cpu_s"], "chunks": inflate["chunks"],
                      "records": inflate["records"], "shards": write["shards"]}))


# ---- the benchmark ---------------------------------------------------------------------------------------------

def measure(data_dir: str, startup_dir: str, pool: str, work: str, rounds: int, running_mode: str) -> dict:
    os.makedirs(work, exist_ok=True)
    config = write_config(os.path.join(work, "job.textproto"), data_dir, pool)
    startup_config = write_config(os.path.join(work, "startup.textproto"), startup_dir, pool)
    output = os.path.join(work, "out")
    run_job(config, output, running_mode)  # untimed: the floor's first round reads a finished output
    runs = interleaved_rounds({
        "job": lambda: run_job(config, output, running_mode),
        "floor": lambda: run_floor(config, output),
        "startup": lambda: run_job(startup_config, os.path.join(work, "startup-out"), running_mode),
    }, rounds)
    jobs = [run.value for run in runs["job"]]
    floors = [run.value for run in runs["floor"]]
    job_cpu = [job.cpu_seconds for job in jobs]
    floor_cpu = [floor["inflate_cpu_s"] + floor["write_cpu_s"] for floor in floors]
    startup_cpu = [run.value.cpu_seconds for run in runs["startup"]]
    above_startup = [job - start for job, start in zip(job_cpu, startup_cpu)]
    median = lambda values, digits=2: round(statistics.median(values), digits)  # noqa: E731
    return {
        "job_cpu_s": median(job_cpu),
        "job_cpu_s_rounds": [round(x, 2) for x in job_cpu],
        "job_wall_s": median([job.seconds for job in jobs]),
        "job_peak_rss_mb": round(max(job.peak_rss_bytes for job in jobs) / 1e6),
        "floor_inflate_cpu_s": median([floor["inflate_cpu_s"] for floor in floors]),
        "floor_write_cpu_s": median([floor["write_cpu_s"] for floor in floors]),
        "floor_cpu_s": median(floor_cpu),
        "floor_cpu_s_spread": summary(floor_cpu)["spread"],
        "job_cpu_over_floor": paired_ratio(job_cpu, floor_cpu)["median"],
        "job_cpu_over_floor_spread": paired_ratio(job_cpu, floor_cpu)["spread"],
        "startup_cpu_s": median(startup_cpu),
        "job_cpu_above_startup_over_floor": paired_ratio(above_startup, floor_cpu)["median"],
        "chunks_inflated": floors[0]["chunks"],
        "records_out": floors[0]["records"],
        "shards": floors[0]["shards"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archives", type=int, default=8)
    parser.add_argument("--games", type=int, default=150)
    parser.add_argument("--scales", default="1,4", help="input sizes as multiples of --archives")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--running-mode", choices=list(RUNNING_MODES), default="in_process",
                        help="the job's: the default runner in process, or 2 worker processes")
    parser.add_argument("--data-root", help="keep generated data here and reuse it across runs")
    parser.add_argument("--shuffle-memory-bytes", type=int,
                        help="the job's output.shuffle_memory_bytes (0: every task spills); default: unset")
    parser.add_argument("--floor-of", help=argparse.SUPPRESS)  # the floor's child process: a run's output
    parser.add_argument("--config", help=argparse.SUPPRESS)  # and the config it ran
    args = parser.parse_args()
    if args.floor_of:
        floor_main(args.floor_of, args.config)
        return
    global SHUFFLE_MEMORY
    if args.shuffle_memory_bytes is not None:
        SHUFFLE_MEMORY = f"shuffle_memory_bytes: {args.shuffle_memory_bytes}"
    work = tempfile.mkdtemp(prefix="bench-lc0-floor-")
    report = {"archives": args.archives, "games": args.games, "rounds": args.rounds,
              "running_mode": args.running_mode, "shuffle_memory_bytes": args.shuffle_memory_bytes, "sizes": {}}
    try:
        startup_dir = os.path.join(work, "startup-data")
        write_dataset(startup_dir, 1, 1, loose_games=0, bad=False, seed=1)
        for scale in (int(x) for x in args.scales.split(",")):
            data_dir = os.path.join(args.data_root or work, f"data{scale}")
            if not os.path.isdir(data_dir):  # bench_job's data: the same archives at the same scale
                write_dataset(data_dir, args.archives * scale, args.games, loose_games=0, bad=False, seed=scale)
            size = report["sizes"][f"{scale}x"] = {
                "archive_mb": round(sum(os.path.getsize(os.path.join(data_dir, n)) for n in os.listdir(data_dir))
                                    / 1e6, 1)}
            for name in args.workloads.split(","):
                size[name] = measure(data_dir, startup_dir, WORKLOADS[name], os.path.join(work, name), args.rounds,
                                     args.running_mode)
                progress({"scale": scale, "workload": name, **size[name]})
                shutil.rmtree(os.path.join(work, name), ignore_errors=True)
            if not args.data_root:
                shutil.rmtree(data_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(report)


if __name__ == "__main__":
    main()
