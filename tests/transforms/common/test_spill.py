import glob
import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.common import spill
from shardmill.transforms.common.discovery import expand_inputs
from shardmill.transforms.common.spill import (MEMORY_REF_PREFIX, ShuffleMemory, SpillCorrupted, held_bytes,
                                               read_spilled, release_shuffle_memory, remove_orphaned_shared_dirs,
                                               write_spill)
from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES
from tests.support.cli import run_shardmill


def batches_of(sizes, width=64):
    """One batch per shard: rows of `width` bytes, distinct per shard."""
    return {shard: pa.record_batch({"frame": pa.array([bytes([shard]) * width] * n, pa.binary(width))})
            for shard, n in sizes.items()}


def test_batches_within_the_budget_stay_in_memory_and_are_freed_as_shards_take_them(tmp_path):
    memory = ShuffleMemory(budget_bytes=1 << 20, run_key="run-a")
    try:
        refs = write_spill(str(tmp_path / "task-1.arrow"), batches_of({0: 10, 2: 5}), memory)
        assert [shard for shard, _ in refs] == [0, 2]
        assert all(path.startswith(MEMORY_REF_PREFIX) and checksum is None for _, (path, _, checksum) in refs)
        assert not os.listdir(tmp_path)  # nothing written
        assert held_bytes("run-a") == 15 * 64
        assert read_spilled([refs[1][1]])[0].num_rows == 5
        assert held_bytes("run-a") == 15 * 64  # the task's entry goes with its last batch
        assert read_spilled([refs[0][1]])[0].num_rows == 10
        assert held_bytes("run-a") == 0
    finally:
        release_shuffle_memory(memory)


def test_a_task_past_the_budget_spills_and_reads_back_the_same_batches(tmp_path):
    memory = ShuffleMemory(budget_bytes=1000, run_key="run-b")
    try:
        held = write_spill(str(tmp_path / "task-1.arrow"), batches_of({0: 10}), memory)  # 640 bytes: held
        spilled = write_spill(str(tmp_path / "task-2.arrow"), batches_of({0: 10, 1: 3}), memory)  # 832 more: spills
        assert held[0][1][0].startswith(MEMORY_REF_PREFIX)
        assert [ref[:2] for _, ref in spilled] == [(str(tmp_path / "task-2.arrow"), 0), (str(tmp_path / "task-2.arrow"), 1)]
        batches = read_spilled([ref for _, ref in held + spilled])
        assert sorted(b.num_rows for b in batches) == [3, 10, 10]
    finally:
        figures = release_shuffle_memory(memory)
    assert (figures["tasks_held"], figures["tasks_spilled"], figures["peak_bytes"]) == (1, 1, 640)


def test_releasing_a_run_frees_what_no_shard_took():
    memory = ShuffleMemory(budget_bytes=1 << 20, run_key="run-c")
    refs = write_spill("/nonexistent/task.arrow", batches_of({0: 4}), memory)
    release_shuffle_memory(memory)
    assert held_bytes("run-c") == 0
    with pytest.raises(RuntimeError, match="in-memory batches of /nonexistent/task.arrow are gone"):
        read_spilled([refs[0][1]])


def test_a_shared_directory_holds_uncompressed_files_within_the_budget(tmp_path):
    shared = tmp_path / "shm"
    shared.mkdir()
    memory = ShuffleMemory(budget_bytes=4000, run_key="run-d", shared_dir=str(shared))
    first = write_spill(str(tmp_path / "spill" / "t1.arrow"), batches_of({0: 20}), memory)  # ~1.3 kB file
    second = write_spill(str(tmp_path / "spill" / "t2.arrow"), batches_of({1: 20}), memory)
    os.makedirs(tmp_path / "spill", exist_ok=True)
    third = write_spill(str(tmp_path / "spill" / "t3.arrow"), batches_of({1: 40}), memory)  # past 4000: spilled
    assert first[0][1][:2] == (str(shared / "t1.arrow"), 0) and second[0][1][:2] == (str(shared / "t2.arrow"), 0)
    assert third[0][1][:2] == (str(tmp_path / "spill" / "t3.arrow"), 0)
    assert [b.num_rows for b in read_spilled([r for _, r in first + second + third])] == [20, 20, 40]
    release_shuffle_memory(memory)
    assert not shared.exists()


@pytest.mark.parametrize("where", ["spill", "shared"])
def test_a_shuffle_file_changed_after_it_was_written_fails_the_read_naming_file_and_batch(tmp_path, where):
    shared = tmp_path / "shm"
    shared.mkdir()
    memory = ShuffleMemory(budget_bytes=(1 << 20) if where == "shared" else 0, run_key="run-e",
                           shared_dir=str(shared) if where == "shared" else None)
    rows = [np.random.default_rng(i).bytes(64) for i in range(200)]  # incompressible: LZ4 keeps them verbatim
    batches = {0: pa.record_batch({"frame": pa.array(rows, pa.binary(64)),
                                   "position": pa.array(range(200), pa.int32())}),
               1: batches_of({1: 30})[1].append_column("position", pa.array(range(30), pa.int32()))}
    refs = write_spill(str(tmp_path / "task.arrow"), batches, memory)
    path = refs[0][1][0]
    assert path.startswith(str(shared if where == "shared" else tmp_path)) and all(r[2] is not None for _, r in refs)
    assert read_spilled([refs[1][1]])[0].equals(batches[1])
    data = bytearray(open(path, "rb").read())
    offset = data.find(rows[100])  # inside batch 0's body
    assert offset > 0
    data[offset + 3] ^= 0x40
    with open(path, "wb") as f:
        f.write(data)
    try:
        with pytest.raises(SpillCorrupted, match=f"batch 0 of {path} is not what was written"):
            read_spilled([refs[0][1]])
    finally:
        release_shuffle_memory(memory)


@pytest.mark.slow
def test_a_shared_directory_whose_launcher_was_killed_is_removed_by_the_next_run(tmp_path):
    # A launcher holding a shared directory dies by SIGKILL (nothing of its own can remove it).
    script = textwrap.dedent(f"""
        import os, signal
        from shardmill.transforms.common.spill import new_shared_dir
        path = new_shared_dir("killed-run", root={str(tmp_path)!r})
        open(os.path.join(path, "task.arrow"), "wb").write(b"x" * 1000)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    killed = subprocess.run([sys.executable, "-c", script], timeout=120)
    assert killed.returncode == -signal.SIGKILL
    (orphan,) = os.listdir(tmp_path)
    live = spill.new_shared_dir("live-run", root=str(tmp_path))  # this process's: kept
    assert os.listdir(tmp_path) == [os.path.basename(live)]
    assert remove_orphaned_shared_dirs(str(tmp_path)) == []
    assert orphan.startswith(spill.SHARED_PREFIX)


def test_a_killed_launchers_workers_still_writing_cannot_keep_its_shared_directory(tmp_path):
    # The workers of a killed launcher write on for a moment, by the directory's name, while a sweep removes it.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=60, check=True)
    orphan = tmp_path / f"{spill.SHARED_PREFIX}{int(dead.stdout)}-killed-run"
    orphan.mkdir()
    for index in range(3000):  # enough files that the removal takes a while
        (orphan / f"task-{index}.arrow").write_bytes(b"x")
    stop = threading.Event()
    written = []

    def worker_still_writing():
        index = 0
        while not stop.is_set():
            try:
                with open(orphan / f"late-{index}.arrow.tmp", "wb") as f:
                    f.write(b"y" * 1000)
                written.append(index)
            except OSError:
                pass
            index += 1

    writer = threading.Thread(target=worker_still_writing)
    writer.start()
    try:
        while not written:  # the worker is writing when the sweep starts
            time.sleep(0.001)
        assert remove_orphaned_shared_dirs(str(tmp_path)) == [orphan.name]
    finally:
        stop.set()
        writer.join()
    assert os.listdir(tmp_path) == []


# ---- the job: the same shards whether the shuffle stays in memory or spills ------------------------------------

ALL_POSITIONS = 'input: "{data}"\nseed: 5\nmax_error_fraction: 0.5\noutput {{ num_shards: 3 {budget} }}\n'
MULTI_PROCESSING = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def shard_hashes(out_dir, manifest):
    def digest(name):
        with open(os.path.join(out_dir, name), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    return {s["path"]: (s["sha256"], digest(s["path"])) for s in manifest["shards"]}


SHUFFLE_LINE = re.compile(r"shuffle: (\d+) task\(s\) kept in memory \(peak ([\d.]+) MiB of a ([\d.]+) MiB budget\), "
                          r"(\d+) spilled")


def shuffle_line_counts(log_text):
    """The figures of the run's one `shuffle:` line (docs/operations.md's form, spilled count included)."""
    (match,) = SHUFFLE_LINE.findall(log_text)
    return {"held": int(match[0]), "peak": match[1], "budget": match[2], "spilled": int(match[3])}


def run_all_positions(data_dir, out_dir, budget, beam_args=()):
    config = validate(parse_config(ALL_POSITIONS.format(data=data_dir, budget=budget)))
    patterns = expand_inputs(list(config.input), LC0_INPUT_SUFFIXES)
    manifest = run_job(config, patterns, str(out_dir), PipelineOptions(list(beam_args))).manifest
    return shard_hashes(out_dir, manifest)


@pytest.mark.slow
def test_in_memory_and_spilled_shuffles_write_byte_identical_shards(lc0_dataset, tmp_path, caplog, monkeypatch):
    directory, _ = lc0_dataset
    writes = []
    real_write_ipc = spill._write_ipc
    monkeypatch.setattr(spill, "_write_ipc", lambda *a: writes.append(a[0]) or real_write_ipc(*a))
    caplog.set_level("INFO", logger="shardmill.pipelines.run_job")
    in_memory = run_all_positions(directory, tmp_path / "memory", "")  # the default budget
    assert writes == []
    tasks = shuffle_line_counts(caplog.text)["held"]
    assert tasks > 0 and shuffle_line_counts(caplog.text)["spilled"] == 0
    caplog.clear()
    spilled = run_all_positions(directory, tmp_path / "spilled", "shuffle_memory_bytes: 0")
    assert len(writes) == tasks  # every task spilled, and the line says so
    assert shuffle_line_counts(caplog.text) == {"held": 0, "peak": "0.0", "budget": "0.0", "spilled": tasks}
    assert in_memory == spilled
    assert all(manifest_sha == file_sha for manifest_sha, file_sha in in_memory.values())


@pytest.mark.slow
def test_worker_processes_share_the_shuffle_through_tmpfs_and_write_the_same_shards(lc0_dataset, tmp_path, caplog):
    directory, _ = lc0_dataset
    caplog.set_level("INFO", logger="shardmill.pipelines.run_job")
    shared = run_all_positions(directory, tmp_path / "shared", "", MULTI_PROCESSING)
    tasks = shuffle_line_counts(caplog.text)["held"]
    assert tasks > 0 and shuffle_line_counts(caplog.text)["spilled"] == 0
    caplog.clear()
    spilled = run_all_positions(directory, tmp_path / "spilled", "shuffle_memory_bytes: 0", MULTI_PROCESSING)
    assert shuffle_line_counts(caplog.text) == {"held": 0, "peak": "0.0", "budget": "0.0", "spilled": tasks}
    caplog.clear()
    past = run_all_positions(directory, tmp_path / "past", "shuffle_memory_bytes: 1", MULTI_PROCESSING)
    assert shuffle_line_counts(caplog.text)["spilled"] == tasks  # no task fits in 1 byte: the workers' spills
    assert shared == spilled == past
    ours = f"{spill.SHARED_PREFIX}{os.getpid()}-"  # the launcher's pid names them (other runs may be live beside)
    assert not [n for n in os.listdir(spill.SHARED_ROOT) if n.startswith(ours)]  # the runs' directories went too


@pytest.mark.slow
def test_a_shuffle_past_a_small_budget_spills_and_peak_memory_stays_within_budget_plus_working_set(tmp_path):
    from benchmarks.harness import run_child
    from shardmill.transforms.common.memory_budget import SHUFFLE_WORKING_SET_BYTES
    from tests.datagen.lc0 import write_dataset
    from tests.support.cli import shardmill_command

    data = tmp_path / "data"
    write_dataset(str(data), num_archives=6, games_per_archive=50, loose_games=0, bad=False, seed=3)  # ~310 MB out

    def run(budget):
        config = tmp_path / f"budget-{budget}.textproto"
        config.write_text(f'input: "{data}"\nlc0 {{ index {{ cache: "none" }} }}\n'
                          f'output {{ overwrite: true target_shard_bytes: {64 << 20} {budget} }}\n'
                          f'max_error_fraction: 1\n')
        child = run_child(shardmill_command("-v", "run", "--config", config, "--output", tmp_path / "out"),
                          timeout=600, address_limit_bytes=6 << 30)
        assert child.returncode == 0, child.stderr[-3000:]
        lines = [line for line in child.stderr.splitlines() if "shardmill.pipelines.run_job: shuffle:" in line]
        return child.peak_rss_bytes, "".join(lines)

    budget = 16 << 20  # a task's packed records (~11 MiB of its 64 MiB of records): one fits, not two
    small_peak, small = run(f"shuffle_memory_bytes: {budget}")
    counts = shuffle_line_counts(small)
    assert (counts["held"], counts["spilled"], counts["budget"]) == (1, 4, "16.0") and float(counts["peak"]) <= 16
    assert small_peak <= budget + SHUFFLE_WORKING_SET_BYTES
    spilled_peak, _ = run("shuffle_memory_bytes: 0")
    assert small_peak <= spilled_peak + budget + (32 << 20)  # the budget adds at most itself (and some noise)
    default_peak, default = run("")
    counts = shuffle_line_counts(default)
    assert counts["held"] == 5 and counts["spilled"] == 0
    # The budget is what kept the rest out of memory: unbudgeted, the run held more than it allows (every task
    # loads before the first shard can be written).
    assert float(counts["peak"]) > 2 * budget / 2**20, (small_peak, spilled_peak, default_peak, default)


def process_tree_memory(session: int) -> int:
    """Anonymous resident memory of every process in the session, plus the files of its launcher's shared shuffle
    directory (tmpfs: memory no process's RSS shows unless mapped)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[3]) != session:  # after the name: state ppid pgrp session
                    continue
            with open(f"/proc/{pid}/status") as f:
                total += sum(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    for directory in glob.glob(os.path.join(spill.SHARED_ROOT, f"{spill.SHARED_PREFIX}{session}-*")):
        for entry in os.scandir(directory) if os.path.isdir(directory) else ():
            try:
                total += entry.stat().st_size
            except OSError:
                pass
    return total


def run_sampling_tree_memory(command, *, timeout: float, address_limit_bytes: int):
    """Runs command to its end in its own session, every 50 ms summing process_tree_memory: the peak of the whole
    tree, which wait4 (one process's high-water mark) cannot give when worker processes run beside the launcher.
    Returns (exit code, stderr, peak bytes)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_limit_bytes, address_limit_bytes))

    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen([str(c) for c in command], stdout=subprocess.DEVNULL, stderr=err,
                                 start_new_session=True, preexec_fn=limit)
        deadline, peak = time.monotonic() + timeout, 0
        while child.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                raise TimeoutError(f"{command} ran past {timeout} s")
            peak = max(peak, process_tree_memory(child.pid))
            time.sleep(0.05)
        err.seek(0)
        return child.returncode, err.read().decode(errors="replace"), peak


@pytest.mark.slow
def test_with_worker_processes_peak_memory_stays_within_budget_plus_their_working_set(tmp_path):
    from shardmill.transforms.common.memory_budget import shuffle_working_set_bytes
    from tests.datagen.lc0 import write_dataset
    from tests.support.cli import shardmill_command

    data = tmp_path / "data"
    write_dataset(str(data), num_archives=6, games_per_archive=50, loose_games=0, bad=False, seed=3)
    budget = 24 << 20  # two tasks' packed records (~11 MiB each), of six
    config = tmp_path / "budget.textproto"
    config.write_text(f'input: "{data}"\nlc0 {{ index {{ cache: "none" }} }}\n'
                      f'output {{ overwrite: true target_shard_bytes: {64 << 20} shuffle_memory_bytes: {budget} }}\n'
                      f'max_error_fraction: 1\n')
    returncode, stderr, peak = run_sampling_tree_memory(
        shardmill_command("-v", "run", "--config", config, "--output", tmp_path / "out", *MULTI_PROCESSING),
        timeout=600, address_limit_bytes=6 << 30)
    assert returncode == 0, stderr[-3000:]
    figures = shuffle_line_counts(stderr)
    assert figures["held"] >= 1 and figures["spilled"] >= 1  # the budget kept some tasks, not all
    assert peak <= budget + shuffle_working_set_bytes(worker_processes=2), f"{peak / 2**20:.0f} MiB"
    assert peak > shuffle_working_set_bytes(worker_processes=0)  # three interpreters: more than one process's


@pytest.mark.slow
def test_a_run_that_fails_after_loading_frees_what_its_shuffle_held(lc0_dataset, tmp_path, monkeypatch):
    from shardmill.transforms.lc0.shards import Lc0ShardFormat

    directory, _ = lc0_dataset
    held = []

    def failing_table(self, batches, record):
        held.append(sum(run.held_bytes for run in spill._REGISTRY.values()))
        raise RuntimeError("shard writer broke")

    monkeypatch.setattr(Lc0ShardFormat, "table", failing_table)
    with pytest.raises(Exception, match="shard writer broke"):
        run_all_positions(directory, tmp_path / "out", "")
    assert held and held[0] > 0  # the records were in memory when the writer failed
    assert spill._REGISTRY == {}
