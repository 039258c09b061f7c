"""Shuffle by reference: record batches stay in memory within a budget or go through storage; Beam moves only
references.

A load task writes all its per-shard batches at once (shards in ascending order) and emits one small
(shard, (path, batch_index)) pair per shard; the group-by-shard then moves references instead of megabytes of
frames, and each shard writer takes only its own batches. Measured here, pushing the frames themselves through
the in-process runner's data plane cost more than inflating them.

Where the batches go (ShuffleMemory, decided by the launcher for the run):
- a local run in one process: while the run's held bytes stay within the budget, into this process's registry,
  unchanged (no copy, no encoding); the writer takes them out, so memory is freed shard by shard;
- a local run with worker processes (the load in one process, the write in another): while the shared
  directory (tmpfs, /dev/shm) holds less than the budget and has room, an uncompressed Arrow IPC file there,
  which the writer maps without a copy;
- past the budget, and on a cluster: an LZ4 Arrow IPC file under the run's staging directory
  (RunPaths.spill_dir), which goes when the run commits or fails.
Either way the writer receives the same batches, so the shards are the same bytes.

A ref is (path or memory ref, batch index, CRC-32 of the batch as it reads back from its file, or None in
memory): a file changed or damaged between its writing and its reading (a stray write into /dev/shm, a bad
disk; Arrow's IPC format checks nothing) fails the shard that reads it instead of landing in its rows.

Paths are a pure function of the task, so a retried task replaces its own entry or file.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import logging
import os
import shutil
import threading

import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.core import kernels
from shardmill.transforms.common.filesystem import is_local, normalize, write_bytes_atomically

_LOG = logging.getLogger(__name__)

# LZ4 frames: lc0 records shrink ~10x, so writing and reading a spill cost
# less than moving the raw bytes through the page cache (measured on 8356 B
# frames: write 0.045 s vs 0.076 s, read 0.013 s vs 0.038 s per 67 MB), and
# on a cluster the spill is that much less object-store traffic.
SPILL_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")

# A ref to batches held in this process's registry: this prefix, then the spill path they stand for.
MEMORY_REF_PREFIX = "shuffle-memory:"
# Worker processes' shared directories: SHARED_ROOT/SHARED_PREFIX<launcher pid>-<run id>. The launcher's pid
# in the name lets any later run remove a directory whose launcher is gone (killed before it could).
SHARED_ROOT = "/dev/shm"
SHARED_PREFIX = "shardmill-shuffle-"
# Room left free on the tmpfs beyond a file: other users of /dev/shm (Docker's is 64 MiB in all).
SHARED_HEADROOM = 16 << 20


@dataclasses.dataclass(frozen=True)
class ShuffleMemory:
    """Where a run's load tasks may keep their batches in memory: plain values, handed to workers.

    budget_bytes 0 spills every task (a cluster run, a forced spill). shared_dir None keeps them in the
    process's registry (a run in one process); else in files under that tmpfs directory (worker processes).
    """

    budget_bytes: int = 0
    run_key: str = ""
    shared_dir: str | None = None


@dataclasses.dataclass
class _Held:
    batches: list  # index -> batch, None once taken
    nbytes: int


@dataclasses.dataclass
class _RunHeld:
    entries: dict = dataclasses.field(default_factory=dict)  # spill path -> _Held
    held_bytes: int = 0
    peak_bytes: int = 0
    tasks_held: int = 0
    tasks_spilled: int = 0


_REGISTRY: dict[str, _RunHeld] = {}  # run key -> what that run holds in this process
_LOCK = threading.Lock()


def write_spill(path: str, batches: dict[int, pa.RecordBatch],
                memory: ShuffleMemory | None = None) -> list[tuple[int, tuple[str, int, int | None]]]:
    """Keeps the batches (ascending shard) in memory within the budget, else writes them to one IPC file at path;
    returns (shard, (path or memory ref, index, checksum)) refs."""
    shards = sorted(batches)
    if not shards:
        return []
    ordered = [batches[shard] for shard in shards]
    where = None
    if memory is not None and memory.budget_bytes > 0:
        if memory.shared_dir is None:
            where = _hold_in_process(memory, path, ordered)
        else:
            where = _hold_in_shared_dir(memory, path, ordered)
    if where is None:
        checksums = _write_ipc(path, ordered, SPILL_OPTIONS)
        where = path
        if memory is not None and memory.run_key:  # a local run's spill, whatever its budget (0 included)
            _count(memory.run_key, spilled=1)
    elif where.startswith(MEMORY_REF_PREFIX):
        checksums = [None] * len(ordered)
    else:
        with pa.memory_map(where) as mapped:
            checksums = _file_checksums(mapped)
    return [(shard, (where, index, checksums[index])) for index, shard in enumerate(shards)]


def read_spilled(refs: list[tuple[str, int, int | None]]) -> list[pa.RecordBatch]:
    """The batches behind refs: taken out of this process's registry, or read from each file's footer and those
    batches only, each checked against the checksum its ref carries."""
    by_path: dict[str, list[tuple[int, int | None]]] = {}
    for path, index, checksum in refs:
        by_path.setdefault(path, []).append((index, checksum))
    batches = []
    for path in sorted(by_path):
        wanted = sorted(by_path[path])
        if path.startswith(MEMORY_REF_PREFIX):
            batches.extend(_take_held(path[len(MEMORY_REF_PREFIX):], [index for index, _ in wanted]))
            continue
        with _open_spill(path) as f:
            reader = pa.ipc.open_file(f)
            for index, checksum in wanted:
                batch = reader.get_batch(index)
                found = batch_checksum(batch)
                if found != checksum:
                    raise SpillCorrupted(f"shuffle: batch {index} of {path} is not what was written (CRC-32 "
                                         f"{found:08x}, written {checksum:08x}): the file was changed or damaged "
                                         f"since")
                batches.append(batch)
    return batches


class SpillCorrupted(RuntimeError):
    """A shuffle file's batch reads back other than it was written."""


def batch_checksum(batch: pa.RecordBatch) -> int:
    """CRC-32 of every buffer of every column (children included), in order."""
    crc = 0
    for column in batch.columns:
        for buffer in column.buffers():
            if buffer is not None:
                crc = kernels.crc32(buffer, crc)
    return crc


def _file_checksums(source) -> list[int]:
    """Each batch's checksum as it reads back from the IPC file (what read_spilled will see)."""
    reader = pa.ipc.open_file(source)
    return [batch_checksum(reader.get_batch(i)) for i in range(reader.num_record_batches)]


def release_shuffle_memory(memory: ShuffleMemory, spill_dir: str | None = None) -> dict:
    """Frees what the run holds (the registry's batches, its shared directory): at the end of a run, whatever its
    outcome. Returns the run's figures: peak_bytes held, tasks_held, tasks_spilled.

    Given the run's spill_dir (spill files stay there until the run commits or fails), tasks_spilled is the
    number of spill files in it: worker processes spill where this process's registry cannot count them, with a
    budget of 0 as well as past one. Without it (None), tasks_spilled is this process's own count."""
    with _LOCK:
        run = _REGISTRY.pop(memory.run_key, None) or _RunHeld()
    figures = {"peak_bytes": run.peak_bytes, "tasks_held": run.tasks_held, "tasks_spilled": run.tasks_spilled}
    if memory.shared_dir is not None:  # what the workers left there (files are never removed before the end)
        try:
            files = [e for e in os.scandir(memory.shared_dir) if e.name.endswith(".arrow")]
        except OSError:
            files = []
        figures["tasks_held"] = len(files)
        figures["peak_bytes"] = sum(e.stat().st_size for e in files)
        shutil.rmtree(memory.shared_dir, ignore_errors=True)
    if spill_dir is not None:
        figures["tasks_spilled"] = count_spill_files(spill_dir)
    return figures


def count_spill_files(spill_dir: str) -> int:
    """The spill files (*.arrow) under spill_dir, local or on a Beam filesystem; 0 when there is none."""
    try:
        return len(FileSystems.match([f"{spill_dir}/*.arrow"])[0].metadata_list)
    except Exception:  # an absent directory: Beam's filesystems raise their own errors for it
        return 0


def held_bytes(run_key: str) -> int:
    """Bytes the run holds in this process's registry now."""
    with _LOCK:
        run = _REGISTRY.get(run_key)
        return run.held_bytes if run else 0


def new_shared_dir(run_id: str, root: str = SHARED_ROOT) -> str:
    """Creates the run's shared directory for worker processes, after removing those whose launcher is gone."""
    remove_orphaned_shared_dirs(root)
    path = os.path.join(root, f"{SHARED_PREFIX}{os.getpid()}-{run_id}")
    os.makedirs(path, mode=0o700)
    return path


def remove_orphaned_shared_dirs(root: str = SHARED_ROOT) -> list[str]:
    """Removes shared directories whose launcher process no longer runs (killed: nothing else removed them)."""
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(SHARED_PREFIX):
            continue
        pid = name[len(SHARED_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _process_exists(int(pid)):
            _remove_shared_dir(os.path.join(root, name))
            removed.append(name)
    return removed


def _remove_shared_dir(path: str) -> None:
    """Renames the directory before removing it: the worker processes of a killed launcher outlive it for a
    moment and keep writing there by its name; once renamed, each new file they open fails (their task spills or
    dies with them), so the removal cannot race a file created after it listed the directory. A file they still
    have open is unlinked and its memory freed when they exit. The new name keeps the prefix and the dead
    launcher's pid, so a removal cut short is finished by the next sweep."""
    doomed = f"{path}-removing-{os.getpid()}"
    try:
        os.rename(path, doomed)
    except OSError:  # another sweep took it
        return
    shutil.rmtree(doomed, ignore_errors=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM
    return True


def _count(run_key: str, *, spilled: int = 0) -> None:
    with _LOCK:
        _REGISTRY.setdefault(run_key, _RunHeld()).tasks_spilled += spilled


def _hold_in_process(memory: ShuffleMemory, path: str, batches: list) -> str | None:
    nbytes = sum(batch.nbytes for batch in batches)
    with _LOCK:
        run = _REGISTRY.setdefault(memory.run_key, _RunHeld())
        previous = run.entries.get(path)  # a retried task replaces its own entry
        held = run.held_bytes - (previous.nbytes if previous else 0)
        if held + nbytes > memory.budget_bytes:
            return None
        run.entries[path] = _Held(list(batches), nbytes)
        run.held_bytes = held + nbytes
        run.peak_bytes = max(run.peak_bytes, run.held_bytes)
        run.tasks_held += 1
    return MEMORY_REF_PREFIX + path


def _take_held(path: str, indices: list[int]) -> list[pa.RecordBatch]:
    with _LOCK:
        for run in _REGISTRY.values():
            held = run.entries.get(path)
            if held is not None:
                break
        else:
            raise RuntimeError(f"shuffle: the in-memory batches of {path} are gone (taken, or the run was released)")
        taken = []
        for index in indices:
            batch = held.batches[index]
            if batch is None:
                raise RuntimeError(f"shuffle: batch {index} of {path} was already taken")
            held.batches[index] = None
            taken.append(batch)
        if all(batch is None for batch in held.batches):  # the task's entry goes with its last batch
            del run.entries[path]
            run.held_bytes -= held.nbytes
    return taken


def _hold_in_shared_dir(memory: ShuffleMemory, path: str, batches: list) -> str | None:
    """Writes the batches uncompressed to the shared directory when it stays within the budget and the tmpfs has
    room; the writer maps the file. One task at a time checks and writes (a lock file), so worker processes
    never overrun the budget together."""
    nbytes = sum(batch.nbytes for batch in batches)
    target = os.path.join(memory.shared_dir, os.path.basename(path))
    try:
        with open(os.path.join(memory.shared_dir, ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = sum(entry.stat().st_size for entry in os.scandir(memory.shared_dir)
                       if entry.is_file() and entry.path != target)
            free = os.statvfs(memory.shared_dir)
            if used + nbytes > memory.budget_bytes or free.f_bavail * free.f_frsize < nbytes + SHARED_HEADROOM:
                return None
            _write_mapped_ipc(target, batches)
    except OSError as err:  # a full or vanished tmpfs: the spill takes the task
        _LOG.debug("shuffle: %s not kept in %s (%s); spilling it", path, memory.shared_dir, err)
        try:
            os.unlink(target)
        except OSError:
            pass
        return None
    return target


def _write_ipc(path: str, batches: list, options) -> list[int]:
    """Encoded into memory by Arrow (compressing without the GIL), then written in one call; returns each batch's
    checksum as it reads back (decoded from the encoded bytes, before they leave)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batches[0].schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(batch)
    encoded = sink.getvalue()
    checksums = _file_checksums(encoded)
    write_bytes_atomically(path, encoded)
    return checksums


def _write_mapped_ipc(path: str, batches: list) -> None:
    # Straight into the tmpfs file (one copy of the frames), under a temporary name: a reader maps whole files.
    temporary = f"{path}.{os.getpid()}.tmp"
    with pa.OSFile(temporary, "wb") as sink, pa.ipc.new_file(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    os.replace(temporary, path)


def _open_spill(path: str) -> pa.NativeFile:
    """A local spill is mapped (Arrow reads it without the GIL or a copy); others go through Beam's filesystems."""
    if is_local(path):
        return pa.memory_map(normalize(path))
    return pa.PythonFile(FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED), mode="r")
