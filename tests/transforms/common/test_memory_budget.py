import os
import subprocess
import sys

import pytest

from shardmill.transforms.common.memory_budget import (DEFAULT_SHUFFLE_FRACTION, available_memory,
                                                       cgroup_memory_limit, default_shuffle_budget)

MEMINFO = "MemTotal:       16384000 kB\nMemFree:         1000000 kB\n"


def fake_system(tmp_path, cgroup_lines, limit_files):
    """A /proc/self/cgroup, a /proc/meminfo and cgroup files: {path under the cgroup root: content}."""
    proc = tmp_path / "proc"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(cgroup_lines)
    (tmp_path / "meminfo").write_text(MEMINFO)
    for relative, content in limit_files.items():
        path = tmp_path / "cg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return {"proc_self": str(proc), "cgroup_root": str(tmp_path / "cg"), "meminfo": str(tmp_path / "meminfo")}


def test_cgroup_v2_memory_max_is_the_smallest_along_the_path(tmp_path):
    paths = fake_system(tmp_path, "0::/user.slice/job.scope\n", {
        "memory.max": "max",  # the root has none
        "user.slice/memory.max": str(6 << 30),
        "user.slice/job.scope/memory.max": "max",
    })
    assert cgroup_memory_limit(paths["proc_self"], paths["cgroup_root"]) == 6 << 30
    assert default_shuffle_budget(**paths) == (6 << 30) // DEFAULT_SHUFFLE_FRACTION


def test_cgroup_v1_memory_limit_in_bytes_counts_and_its_unlimited_value_does_not(tmp_path):
    paths = fake_system(tmp_path, "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n", {
        "memory/memory.limit_in_bytes": "9223372036854771712",
        "memory/docker/abc/memory.limit_in_bytes": str(2 << 30),
    })
    assert available_memory(**paths) == 2 << 30
    assert default_shuffle_budget(**paths) == (2 << 30) // DEFAULT_SHUFFLE_FRACTION


def test_a_container_seeing_its_cgroup_as_the_root_reads_the_mounts_own_limit(tmp_path):
    # In a cgroup namespace /proc names the host's path, which the container's mount does not have.
    paths = fake_system(tmp_path, "0::/kubepods/pod1/ctr\n", {"memory.max": str(3 << 30)})
    assert available_memory(**paths) == 3 << 30


def test_without_a_cgroup_limit_the_machines_memory_counts(tmp_path):
    paths = fake_system(tmp_path, "4:memory:/\n", {"memory/memory.limit_in_bytes": "9223372036854771712"})
    assert available_memory(**paths) == 16384000 * 1024
    paths = fake_system(tmp_path / "bigger", "0::/\n", {"memory.max": str(64 << 30)})  # above MemTotal
    assert available_memory(**paths) == 16384000 * 1024


def test_no_proc_at_all_asks_for_a_budget(tmp_path):
    with pytest.raises(OSError, match="set output.shuffle_memory_bytes"):
        available_memory(str(tmp_path / "none"), str(tmp_path / "none"), str(tmp_path / "none"))


V1_MEMORY = "/sys/fs/cgroup/memory"


@pytest.mark.slow
def test_a_process_in_a_memory_limited_cgroup_gets_a_quarter_of_its_limit(tmp_path):
    """A real cgroup (v1 here, v2 where the machine has it) with a limit; the process moved into it reads it."""
    limit = 768 << 20
    if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):  # v2 unified
        group, limit_file = f"/sys/fs/cgroup/shardmill-test-{os.getpid()}", "memory.max"
    else:
        group, limit_file = f"{V1_MEMORY}/shardmill-test-{os.getpid()}", "memory.limit_in_bytes"
    try:
        os.mkdir(group)
        with open(os.path.join(group, limit_file), "w") as f:
            f.write(str(limit))
    except OSError as err:
        pytest.skip(f"cannot create a memory cgroup with a limit here ({err})")
    try:
        script = ("import os\n"
                  f"open({os.path.join(group, 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
                  "from shardmill.transforms.common.memory_budget import default_shuffle_budget\n"
                  "print(default_shuffle_budget())\n")
        child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr
        assert int(child.stdout.split()[-1]) == limit // DEFAULT_SHUFFLE_FRACTION
    finally:
        os.rmdir(group)


def dead_pid() -> int:
    """The pid of a process that has ended (a killed launcher's)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           timeout=60, check=True)
    return int(child.stdout)


@pytest.mark.parametrize("budget", [None, 0], ids=["default-budget", "budget-0"])
def test_an_in_process_local_run_removes_the_shared_directories_of_killed_runs(budget):
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.transforms.common import spill
    from shardmill.transforms.common.memory_budget import run_shuffle_memory

    orphan = os.path.join(spill.SHARED_ROOT, f"{spill.SHARED_PREFIX}{dead_pid()}-killed-run")
    os.makedirs(orphan)
    try:
        with open(os.path.join(orphan, "task.arrow"), "wb") as f:
            f.write(b"x" * 4096)
        memory = run_shuffle_memory(budget, "in-process-run", PipelineOptions([]))  # the in-process runner
        assert memory.shared_dir is None
        assert not os.path.exists(orphan)
        assert not [n for n in os.listdir(spill.SHARED_ROOT) if n.startswith(os.path.basename(orphan))]
    finally:
        import shutil
        shutil.rmtree(orphan, ignore_errors=True)
