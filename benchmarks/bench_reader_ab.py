"""Two builds of the reader, paired: rows/s of build A and build B, alternating.

For a change to the native reader: install the build before the change into
a directory of its own (a copy of the installed `shardmill` package), then
compare it with the installed build. Each round runs A then B, each in a
fresh process reading the same shards (rank 0 of 2, shuffled, 256-row
batches, best of 3 passes), A first in odd rounds and B first in even ones;
the figure that matters is the median of the per-round ratios B/A (with
their spread), which the machine's noise affects far less than two
separate runs. Datasets: 8356 B frames of id-derived bytes (decode is mostly
copying) and real V6 records (decode-bound), windows of 1 and 8 row groups;
and the V6 records with lc0 tensors (loader, float16 planes) converted on the
decode threads. Builds of either reader API (option objects or the flat
keyword arguments before them) are driven the way each takes them.

    cp -r .venv/lib/python3.11/site-packages/shardmill /tmp/before/   # before the change
    python -m benchmarks.bench_reader_ab --a-path /tmp/before [--rounds 6] [--rows-per-shard 60000]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile

from benchmarks.harness import emit, last_json_line, paired_ab, run_child
from tests.datagen.lc0 import shuffled_v6_frames
from tests.datagen.shards import frame_bytes, write_output

# Both builds' APIs: option objects, or the flat keyword arguments of builds before them.
READ_ONE = """
import json, sys, time
from shardmill import native_ext
from shardmill.native_ext import ShardReader
directory, window, lc0 = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if hasattr(native_ext, "OrderOptions"):
    settings = dict(order_options=native_ext.OrderOptions(seed=1, window_row_groups=window),
                    shard_options=native_ext.ShardOptions(0, 2))
    if lc0:
        settings["converter"] = native_ext.Lc0Tensors(lc0, planes="float16")
else:
    settings = dict(shard_index=0, shard_count=2, seed=1, window_row_groups=window)
    if lc0:
        settings.update(lc0_tensors=lc0, planes="float16")
rates = []
for _ in range(3):
    start, rows = time.perf_counter(), 0
    with ShardReader(directory, 256, ["frame"], **settings) as reader:
        for batch in reader:
            rows += len(batch["frame"])
    rates.append(rows / (time.perf_counter() - start))
print(json.dumps(max(rates)))
"""


def rows_per_s(python_path: str | None, directory: str, window: int, lc0: str = "") -> float:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if python_path:
        env["PYTHONPATH"] = python_path
    else:
        env.pop("PYTHONPATH", None)
    # Not the repository root: only the build on PYTHONPATH (or installed) may be importable.
    done = run_child([sys.executable, "-c", READ_ONE, directory, str(window), lc0], env=env,
                     cwd=tempfile.gettempdir()).check("a reader's pass")
    return float(last_json_line(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--a-path", required=True, help="PYTHONPATH holding build A's shardmill package")
    parser.add_argument("--b-path", default=None, help="PYTHONPATH of build B (default: the installed one)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--rows-per-shard", type=int, default=60_000, help="rows of each of the 4 shards")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-reader-ab-")
    atexit.register(shutil.rmtree, work, True)
    datasets = {"frames_8356B": frame_bytes, "v6_records_8356B": shuffled_v6_frames()}
    for name, frames in datasets.items():
        write_output(os.path.join(work, name), [args.rows_per_shard] * 4, row_group_rows=501, width=8356,
                     frames=frames, nullable=False)
    report = {}
    cases = [(name, window, "") for name in datasets for window in (1, 8)]
    cases.append(("v6_records_8356B", 8, "loader"))  # with lc0 tensors (float16 planes) on the decode threads
    for name, window, lc0 in cases:
        directory = os.path.join(work, name)
        rates = paired_ab(lambda: rows_per_s(args.a_path, directory, window, lc0),
                          lambda: rows_per_s(args.b_path, directory, window, lc0), args.rounds)
        ratio = rates["b_over_a"]
        report[f"{name}_window{window}" + (f"_lc0_{lc0}" if lc0 else "")] = {
            "a_rows_per_s_median": round(statistics.median(rates["a"])),
            "b_rows_per_s_median": round(statistics.median(rates["b"])),
            "b_over_a_per_round": ratio["per_round"],
            "b_over_a_median": ratio["median"],
            "b_over_a_spread": ratio["spread"],
        }
    emit(report)


if __name__ == "__main__":
    main()
