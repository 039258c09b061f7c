"""The shards' codecs on lc0 data: encode CPU, size, and reading speed through ShardReader, against zstd-1.

On bench_lc0_floor's data (--archives archives of --games games, tests/datagen/lc0.py; --data-root keeps it
for reuse) and its all-positions workload (every record once, 64 MiB shards), `shardmill run` writes one
output per codec (output.codec; ZSTD at zstd_level 1, the default), each as a child process (its CPU, user +
system of the process tree, and wall: one run each, informative). Then, in this process, interleaved over
--rounds rounds with the codecs' order rotated each time (so drift hits every codec alike):

  encode   the zstd output's shards' rows, read back untimed, encoded by the job's shard encoder
           (shard_format.encode_shard: the codec, the job's row groups and lc0 Parquet options), shard by
           shard, every codec on the same table before the next shard; CPU seconds (single-threaded)
  read     every record's frame served by ShardReader (its defaults: shuffled windows, 2 decoding threads)
           from the codec's output; records/s (wall) and decode CPU seconds (this process's CPU during the
           epoch: the reader's threads and the serving thread)

Sizes are the committed shards' bytes. Ratios are against zstd-1 per round (paired_ratio), then their median.

    python -m benchmarks.bench_codecs [--archives 8] [--games 150] [--rounds 3] [--data-root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from benchmarks.harness import emit, paired_ratio, progress, run_child, summary
from tests.datagen.lc0 import write_dataset

CODECS = ["ZSTD", "LZ4_RAW", "SNAPPY", "UNCOMPRESSED"]  # the config's ShardCodec; ZSTD (level 1) first: the base
TARGET_SHARD_BYTES = 64 << 20  # bench_lc0_floor's (and bench_job's)
CHILD_TIMEOUT_S = 3600


def write_config(path: str, data_dir: str, codec: str) -> str:
    with open(path, "w") as f:
        f.write(f'input: "{data_dir}"\nlc0 {{ index {{ cache: "none" }} }}\n'
                f'output {{ target_shard_bytes: {TARGET_SHARD_BYTES} overwrite: true codec: {codec} }}\n'
                f'max_error_fraction: 1\n')
    return path


def run_job(config: str, output: str) -> dict:
    command = [sys.executable, "-m", "shardmill.pipelines.cli", "run", "--config", config, "--output", output]
    run = run_child(command, timeout=CHILD_TIMEOUT_S).check("shardmill run")
    return {"job_cpu_s": round(run.cpu_seconds, 2), "job_wall_s": round(run.seconds, 2)}


def encode_rounds(output: str, manifest: dict, rounds: int) -> dict[str, list[float]]:
    """CPU seconds per codec and round to encode every shard of output."""
    import pyarrow.parquet as pq

    from shardmill.pipelines.config import parse_config
    from shardmill.transforms.lc0.shards import Lc0ShardFormat
    from shardmill.transforms.output.shard_format import ShardCompression, encode_shard

    shard_format = Lc0ShardFormat()
    compressions = {codec: ShardCompression.of(parse_config(f"output {{ codec: {codec} }}").output)
                    for codec in CODECS}
    row_group_bytes = parse_config("").output.row_group_bytes
    cpu = {codec: [0.0] * rounds for codec in CODECS}
    for round_index in range(rounds):
        for shard in manifest["shards"]:
            table = pq.read_table(os.path.join(output, shard["path"]))
            row_group_rows = max(1, row_group_bytes // shard_format.row_bytes(table, manifest["record"]))
            shift = round_index % len(CODECS)
            for codec in CODECS[shift:] + CODECS[:shift]:
                began = time.process_time()
                data = encode_shard(table, row_group_rows, compressions[codec], **shard_format.parquet_options)
                cpu[codec][round_index] += time.process_time() - began
                del data
            del table
    return cpu


def read_once(output: str) -> tuple[float, float, int]:
    """(wall s, CPU s, records) of one epoch of every record's frame through ShardReader."""
    from shardmill.native_ext import ShardReader

    records = 0
    wall, began = time.perf_counter(), time.process_time()
    with ShardReader(output, batch_size=256, columns=["frame"]) as reader:
        for batch in reader:
            records += len(batch["frame"])
    return time.perf_counter() - wall, time.process_time() - began, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--archives", type=int, default=8)
    parser.add_argument("--games", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-root", help="keep generated data here and reuse it across runs")
    args = parser.parse_args()
    from shardmill.core.output_contract import MANIFEST_NAME

    work = tempfile.mkdtemp(prefix="bench-codecs-")
    report = {"archives": args.archives, "games": args.games, "rounds": args.rounds, "workload": "all_positions",
              "codecs": {}}
    try:
        data_dir = os.path.join(args.data_root or work, "data1")
        if not os.path.isdir(data_dir):  # bench_lc0_floor's 1x data: the same archives
            write_dataset(data_dir, args.archives, args.games, loose_games=0, bad=False, seed=1)
        outputs, manifests = {}, {}
        for codec in CODECS:
            outputs[codec] = os.path.join(work, f"out-{codec.lower()}")
            job = run_job(write_config(os.path.join(work, f"{codec}.textproto"), data_dir, codec), outputs[codec])
            with open(os.path.join(outputs[codec], MANIFEST_NAME)) as f:
                manifests[codec] = json.load(f)
            report["codecs"][codec.lower()] = {"compression": manifests[codec]["compression"], **job,
                                               "bytes": sum(s["bytes"] for s in manifests[codec]["shards"])}
            progress({"codec": codec, **report["codecs"][codec.lower()]})
        base = manifests["ZSTD"]
        records = sum(s["rows"] for s in base["shards"])
        assert all(sum(s["rows"] for s in m["shards"]) == records for m in manifests.values())
        report.update(records=records, shards=len(base["shards"]))

        encode = encode_rounds(outputs["ZSTD"], base, args.rounds)
        read = {codec: [] for codec in CODECS}
        read_once(outputs["ZSTD"])  # untimed: the reader's first use pays its page faults and imports
        for round_index in range(args.rounds):
            shift = round_index % len(CODECS)
            for codec in CODECS[shift:] + CODECS[:shift]:
                wall, cpu, served = read_once(outputs[codec])
                assert served == records, (codec, served, records)
                read[codec].append((wall, cpu))
        for codec in CODECS:
            walls, cpus = [w for w, _ in read[codec]], [c for _, c in read[codec]]
            base_walls, base_cpus = [w for w, _ in read["ZSTD"]], [c for _, c in read["ZSTD"]]
            entry = report["codecs"][codec.lower()]
            entry.update({
                "bytes_vs_zstd1": round(entry["bytes"] / report["codecs"]["zstd"]["bytes"], 3),
                "encode_cpu_s": summary(encode[codec]),
                "encode_cpu_vs_zstd1": paired_ratio(encode[codec], encode["ZSTD"]),
                "read_records_per_s": round(records / summary(walls)["median"]),
                "read_wall_s": summary(walls),
                "read_cpu_s": summary(cpus),
                "read_records_per_s_vs_zstd1": paired_ratio(base_walls, walls),
                "read_cpu_vs_zstd1": paired_ratio(cpus, base_cpus),
            })
            progress({"codec": codec, **{k: v for k, v in entry.items() if not isinstance(v, dict)}})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(report)


if __name__ == "__main__":
    main()
