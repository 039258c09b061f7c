"""How much memory this process may use: its cgroup's limit, else the machine's.

A local run keeps its shuffle in memory up to a budget (output.shuffle_memory_bytes); unset, the budget is
DEFAULT_SHUFFLE_FRACTION of this figure. In a container the machine's MemTotal is the host's, so the limit of
the process's memory cgroup comes first: cgroup v2's memory.max, v1's memory.limit_in_bytes, the smallest along
the path from the process's cgroup up to the hierarchy's root (a parent's limit caps its children).
"""

from __future__ import annotations

import logging
import os

from apache_beam.options.pipeline_options import DirectOptions

from shardmill.transforms.common.spill import ShuffleMemory, new_shared_dir, remove_orphaned_shared_dirs

_LOG = logging.getLogger(__name__)

# Unset budget: a quarter of the memory, leaving the rest to the load and write stages' working set, the
# reader of a training job on the same machine and the page cache.
DEFAULT_SHUFFLE_FRACTION = 4

# cgroup v1 writes "no limit" as LONG_MAX rounded down to a page; anything this large is no limit.
_UNLIMITED = 1 << 60


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _limit_value(text: str | None) -> int | None:
    """A limit file's bytes, None for none ("max", LONG_MAX, unreadable)."""
    if text is None or text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _UNLIMITED else None


def _ancestors(mount: str, cgroup_path: str):
    """The process's cgroup directory under the mount and each parent up to the mount itself.

    Inside a cgroup namespace the path /proc reports may not exist under the mount (the container sees its own
    cgroup as the root): missing directories are skipped, the mount itself always tried.
    """
    parts = [p for p in cgroup_path.strip("/").split("/") if p]
    for depth in range(len(parts), -1, -1):
        yield os.path.join(mount, *parts[:depth])


def cgroup_memory_limit(proc_self: str = "/proc/self", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes) in bytes, the smallest
    along its path to the root; None when there is none or no cgroup file can be read."""
    cgroups = _read(f"{proc_self}/cgroup")
    if cgroups is None:
        return None
    limits = []
    for line in cgroups.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2: the unified hierarchy (alone, or beside v1 at .../unified)
            for mount in (cgroup_root, f"{cgroup_root}/unified"):
                limits += [_limit_value(_read(f"{d}/memory.max")) for d in _ancestors(mount, path)]
        elif "memory" in controllers.split(","):  # v1: the memory controller's own hierarchy
            limits += [_limit_value(_read(f"{d}/memory.limit_in_bytes"))
                       for d in _ancestors(f"{cgroup_root}/memory", path)]
    limits = [limit for limit in limits if limit is not None]
    return min(limits) if limits else None


def machine_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """MemTotal in bytes, None when /proc/meminfo cannot be read."""
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def available_memory(proc_self: str = "/proc/self", cgroup_root: str = "/sys/fs/cgroup",
                     meminfo: str = "/proc/meminfo") -> int:
    """The memory this process may use: its cgroup's limit where lower than the machine's memory. Raises OSError
    when neither can be read (not Linux): a budget must then be given."""
    figures = [m for m in (cgroup_memory_limit(proc_self, cgroup_root), machine_memory(meminfo)) if m is not None]
    if not figures:
        raise OSError("cannot tell this machine's memory (no /proc/meminfo): set output.shuffle_memory_bytes")
    return min(figures)


def default_shuffle_budget(**paths) -> int:
    """The shuffle's memory budget when the config sets none: 1/DEFAULT_SHUFFLE_FRACTION of available_memory()."""
    return available_memory(**paths) // DEFAULT_SHUFFLE_FRACTION


def run_shuffle_memory(requested_bytes: int | None, run_id: str, options) -> ShuffleMemory:
    """A local run's ShuffleMemory: the config's budget (None: the default), in this process's registry, or, when
    the local runner runs stages in worker processes (the load in one, the write in another), in a new shared
    tmpfs directory. Every local run first removes the shared directories of runs killed before they could (their
    memory is the machine's until someone does), whatever its own mode and budget."""
    removed = remove_orphaned_shared_dirs()
    if removed:
        _LOG.info("shuffle: removed %d shared memory director(ies) of killed runs: %s", len(removed),
                  ", ".join(removed))
    budget = default_shuffle_budget() if requested_bytes is None else requested_bytes
    if budget <= 0:  # every task spills; the run key still counts them for the run's summary line
        return ShuffleMemory(0, run_id)
    if options.view_as(DirectOptions).direct_running_mode != "multi_processing":
        return ShuffleMemory(budget, run_id)
    try:
        return ShuffleMemory(budget, run_id, new_shared_dir(run_id))
    except OSError as err:  # no tmpfs to share through: every task spills, as on a cluster
        _LOG.warning("shuffle: no shared memory directory for worker processes (%s); spilling every task", err)
        return ShuffleMemory(0, run_id)



# What a local lc0 run's peak resident memory adds to the shuffle it holds, measured with 64 MiB shards
# (benchmarks/RESULTS.md, "lc0 CPU floor"; the run with every task spilled holds none): the interpreter, Beam
# and the graph, the load tasks in flight (a packing arena of about sampling.MAX_TASK_BYTES each), the shards being
# unpacked and encoded, and the allocator's reuse. Larger shards add about twice their size (two are written at
# once).
SHUFFLE_WORKING_SET_BYTES = 640 << 20

# What each worker process of a multi_processing run adds to that: its own interpreter, Beam and the work it has
# in flight (the launcher keeps one of each too). Measured as the peak anonymous + tmpfs memory of the whole process
# tree in a v1 memory cgroup, every task spilled, 64 MiB shards (the small-budget test's data): one process 390 MiB,
# 2 workers 865 MiB, 4 workers 1204 MiB, i.e. about 170 MiB a worker over a launcher of about 525 MiB; with records
# packed, 2 workers and six ~84 MiB shards (~40 MiB more each): 927 MiB.
WORKER_PROCESS_WORKING_SET_BYTES = 192 << 20


def shuffle_working_set_bytes(worker_processes: int = 0) -> int:
    """What a local lc0 run's peak memory adds to its budget: in one process (0), or with that many worker
    processes beside the launcher (--direct_running_mode=multi_processing)."""
    return SHUFFLE_WORKING_SET_BYTES + worker_processes * WORKER_PROCESS_WORKING_SET_BYTES
