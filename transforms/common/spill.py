"""Shuffle spill files: record batches go through storage, Beam moves only references.

A load task writes all its per-shard batches into one Arrow IPC file (shards
in ascending order) and emits one small (shard, (path, batch_index)) pair
per shard; the group-by-shard then moves references instead of megabytes of
frames, and each shard writer reads only its own batches by random access.
Measured here, pushing the frames themselves through the in-process
runner's data plane cost more than inflating them.

Spill paths are a pure function of the task, so a retried task overwrites
its own file; the files live under the run's staging directory
(RunPaths.spill_dir), which goes when the run commits or fails.
"""

from __future__ import annotations

import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from shardmill.transforms.common.filesystem import is_local, normalize, write_bytes_atomically

# LZ4 frames: lc0 records shrink ~10x, so writing and reading a spill cost
# less than moving the raw bytes through the page cache (measured on 8356 B
# frames: write 0.045 s vs 0.076 s, read 0.013 s vs 0.038 s per 67 MB), and
# on a cluster the spill is that much less object-store traffic.
SPILL_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def write_spill(path: str, batches: dict[int, pa.RecordBatch]) -> list[tuple[int, tuple[str, int]]]:
    """Writes the batches (ascending shard) to one IPC file; returns (shard, (path, index)) refs."""
    shards = sorted(batches)
    if not shards:
        return []

    # Encoded into memory by Arrow (compressing without the GIL), then written in one call.
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batches[shards[0]].schema, options=SPILL_OPTIONS) as writer:
        for shard in shards:
            writer.write_batch(batches[shard])
    write_bytes_atomically(path, sink.getvalue())
    return [(shard, (path, index)) for index, shard in enumerate(shards)]


def read_spilled(refs: list[tuple[str, int]]) -> list[pa.RecordBatch]:
    """The batches behind (path, index) refs, reading each file's footer and those batches only."""
    by_path: dict[str, list[int]] = {}
    for path, index in refs:
        by_path.setdefault(path, []).append(index)
    batches = []
    for path in sorted(by_path):
        with _open_spill(path) as f:
            reader = pa.ipc.open_file(f)
            batches.extend(reader.get_batch(i) for i in sorted(by_path[path]))
    return batches


def _open_spill(path: str) -> pa.NativeFile:
    """A local spill is mapped (Arrow reads it without the GIL or a copy); others go through Beam's filesystems."""
    if is_local(path):
        return pa.memory_map(normalize(path))
    return pa.PythonFile(FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED), mode="r")
