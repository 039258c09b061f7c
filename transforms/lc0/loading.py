"""Stage 4 kernel: read the planned chunks of a task and cut out their records.

For a ReadTask (chunks of one or more sources, each in file order) it inflates each chunk,
verifies the indexed record count and every record's version, emits the
positions of every planned use, and gives each emitted record its shard and
order key. The output is one Arrow RecordBatch per shard (SHUFFLE_SCHEMA), its records packed
(kernels.pack_records: runs of repeated words, ~6x smaller for lc0) for as long as the shuffle holds them.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import io
import os

import numpy as np
import pyarrow as pa

from shardmill.core import kernels
from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.common.filesystem import Opener, default_opener
from shardmill.transforms.common.pooled import pooled_empty
from shardmill.transforms.common.sampling import shuffle_keys
from shardmill.transforms.lc0.gzip_chunks import ChunkError, ChunkSpan, inflate_chunk
from shardmill.transforms.lc0.sampling import ReadTask, emissions

# Threads inflating chunks inside one load task (Arrow's inflate releases the GIL).
INFLATE_THREADS = min(4, os.cpu_count() or 1)


# Where each record came from, in the shuffle and in the shards.
IDENTITY_FIELDS = [
    pa.field("source", pa.string(), nullable=False),  # sort key of the chunk's source
    pa.field("chunk", pa.int32(), nullable=False),  # chunk ordinal within the source
    pa.field("use_count", pa.int32(), nullable=False),  # the use that emitted the record
    pa.field("position", pa.int32(), nullable=False),  # record index within the chunk
]
# Columns of the batches moved by the shuffle; the shard writer unpacks the records and drops the order key.
SHUFFLE_SCHEMA = pa.schema([
    pa.field("packed_frame", pa.large_binary(), nullable=False),  # one lc0 record, kernels.pack_records
    *IDENTITY_FIELDS,
    pa.field("order_key", pa.uint64(), nullable=False),
])


def unpack_frames(packed: pa.Array, dest_rows: np.ndarray, out: np.ndarray) -> None:
    """Unpacks a shuffle batch's packed_frame column: record i into out[dest_rows[i]] (rows of the record size)."""
    offsets = np.frombuffer(packed.buffers()[1], dtype=np.int64, count=len(packed) + 1, offset=packed.offset * 8)
    kernels.unpack_records(packed.buffers()[2] or b"", offsets, dest_rows, out)


@dataclasses.dataclass
class LoadedTask:
    batches: dict[int, pa.RecordBatch]  # shard -> records
    dead_letters: list[DeadLetter]
    chunks_loaded: int = 0
    uses_written: int = 0
    records_written: int = 0


def _records_of_chunk(compressed: bytes, row: dict, max_bytes: int) -> np.ndarray:
    """The chunk's records as an (n, record_size) uint8 array, verified against the index.

    The streaming inflater (every member, CRC checked, bounded by max_bytes): the path that names what is
    wrong with a chunk the native kernel declined or found broken.
    """
    size, n = row["record_size"], row["num_records"]
    if len(compressed) < row["length"]:
        raise ChunkError("truncated", f"source ends after {len(compressed)} of the chunk's {row['length']} bytes")
    payload = inflate_chunk(ChunkSpan(io.BytesIO(compressed), 0, len(compressed)), max_bytes)
    if len(payload) != n * size:
        raise ChunkError("count_mismatch",
                         f"inflated to {len(payload)} bytes = {len(payload) / size:g} records, index says {n}")
    records = np.frombuffer(payload, dtype=np.uint8).reshape(n, size)
    versions = records[:, :4].copy().view("<u4").ravel()
    bad = np.flatnonzero(versions != row["version"])
    if len(bad):
        raise ChunkError("corrupt", f"record {bad[0]} has version {versions[bad[0]]}, chunk is V{row['version']}")
    return records


def _pack_chunk(compressed: bytes, row: dict, positions: np.ndarray, region: np.ndarray, starts: np.ndarray,
                lengths: np.ndarray, max_bytes: int) -> None:
    """Inflates one chunk and packs record positions[i] into `region` (the chunk's part of the task's arena,
    kernels.max_packed_bytes of the positions), at starts[i] (within the region) for lengths[i] bytes.

    The native kernel does it with the GIL released, gzip member after
    member (libdeflate). When bytes follow a member that are not a member,
    or the kernel finds the chunk broken, the streaming path runs so the
    ChunkError says precisely what is wrong.
    """
    offsets = np.empty(len(positions) + 1, np.int64)
    try:
        outcome = kernels.pack_chunk_records(compressed, row["num_records"], row["record_size"], row["version"],
                                             positions, region, offsets)
    except kernels.NativeError:
        outcome = None
    if outcome is None or outcome >= 0:  # let the checking path name the problem
        records = _records_of_chunk(compressed, row, max_bytes)
        offsets, packed = kernels.pack_records(records, positions)
        region[:len(packed)] = packed
    starts[:] = offsets[:-1]
    lengths[:] = np.diff(offsets)


def _plan_emissions(rows: list[dict], params, num_shards: int):
    """Every record the task writes (each chunk's emission range), known from the index alone.

    Returns (row, chunk, use_count, position, order_key, shard, per-row
    emission offsets) with emissions grouped by row in task order.
    """
    emitted = [emissions(row["chunk_key"], row["num_records"], params.position_count, params.seed,
                         row["emit_start"], row["emit_stop"]) for row in rows]
    counts = np.array([len(pos) for _, pos in emitted], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    row_of = np.repeat(np.arange(len(rows), dtype=np.int32), counts)
    chunk = np.array([row["chunk"] for row in rows], dtype=np.int32)[row_of]
    keys = np.array([row["chunk_key"] for row in rows], dtype=np.uint64)[row_of]
    use = np.concatenate([u for u, _ in emitted]).astype(np.int32)
    pos = np.concatenate([p for _, p in emitted]).astype(np.int64)
    shard, order = shuffle_keys(keys, use, pos, params.seed, num_shards)
    return row_of, chunk, use, pos, order, shard, offsets


def _packed_column(arena: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The packed records arena[starts[i]:starts[i] + lengths[i]], back to back in an array of their own."""
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    kernels.copy_runs(arena, starts, lengths, data)
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(starts), [None, pa.py_buffer(offsets),
                                                                            pa.py_buffer(data)])


def _runs_by_source(rows: list[dict]):
    """(source, [row indices]) for each run of consecutive rows of one source (tasks keep file order)."""
    start = 0
    for end in range(1, len(rows) + 1):
        if end == len(rows) or rows[end]["source"] != rows[start]["source"]:
            yield rows[start]["source"], range(start, end)
            start = end


def load_task(task: ReadTask, opener: Opener = default_opener, threads: int = INFLATE_THREADS) -> LoadedTask:
    """Reads a task's chunks in file order, source after source; bad chunks become dead letters ('load').

    Every emitted record's shard is planned first; each chunk's records are
    packed as it is inflated, and each shard's are then copied together.
    Compressed bytes are read sequentially; inflating and packing run on
    `threads` threads, at most 2 * threads chunks ahead.
    """
    rows = task.chunks.to_pylist()
    if not rows:
        return LoadedTask({}, [])
    record_size = rows[0]["record_size"]
    if any(row["record_size"] != record_size for row in rows):
        raise ValueError(f"read task for {task.source} mixes record sizes")  # the plan keeps one version
    row_of, chunk, use, pos, order, shard, offsets = _plan_emissions(rows, task.params, task.num_shards)
    by_shard = np.argsort(shard, kind="stable")  # emissions in shard order
    # Each chunk packs its records into its own region of one arena (from Arrow's pool: the next task reuses
    # its pages); emission i's packed record is arena[starts[i]:starts[i] + lengths[i]].
    region = kernels.max_packed_bytes(record_size, 1) * offsets
    arena = pooled_empty((max(1, int(region[-1])),))
    starts = np.zeros(len(pos), np.int64)
    lengths = np.zeros(len(pos), np.int64)
    failed = np.zeros(len(rows), dtype=bool)
    dead: list[tuple[int, DeadLetter]] = []  # (row index, dead letter)
    pending: collections.deque = collections.deque()  # (row index, future) in file order

    def fail(i: int, reason: str, detail: str) -> None:
        failed[i] = True
        dead.append((i, DeadLetter(rows[i]["source"], "load", reason, detail, rows[i]["member"], rows[i]["chunk"])))

    def collect_oldest():
        i, future = pending.popleft()
        try:
            future.result()
        except ChunkError as err:
            fail(i, err.reason, err.detail)
        else:
            starts[offsets[i]:offsets[i + 1]] += region[i]

    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        for source, indices in _runs_by_source(rows):
            read = indices.start
            try:
                with opener(source) as fileobj:
                    for i in indices:
                        row = rows[i]
                        fileobj.seek(row["offset"])
                        compressed = fileobj.read(row["length"])
                        read = i + 1
                        lo, hi = offsets[i], offsets[i + 1]
                        pending.append((i, pool.submit(_pack_chunk, compressed, row, pos[lo:hi],
                                                       arena[region[i]:region[i + 1]], starts[lo:hi],
                                                       lengths[lo:hi], task.max_chunk_bytes)))
                        if len(pending) > 2 * threads:
                            collect_oldest()
            except OSError as err:  # opening or reading failed: the source's chunks not yet read are unreadable
                for i in range(read, indices.stop):
                    fail(i, "unreadable", str(err))
        while pending:
            collect_oldest()
    # Columns in shard order; rows of failed chunks (never written) are dropped. Each shard's packed records
    # are copied out of the arena into an array of their own, which waits for the shard writer.
    by_shard = by_shard[~failed[row_of][by_shard]]
    row_of, chunk, use, pos, order = row_of[by_shard], chunk[by_shard], use[by_shard], pos[by_shard], order[by_shard]
    bounds = np.searchsorted(shard[by_shard], np.arange(task.num_shards + 1))
    sort_keys, key_of_row = np.unique(np.array([row["sort_key"] for row in rows], dtype=object).astype(str),
                                      return_inverse=True)
    sort_keys = pa.array(sort_keys.tolist(), pa.string())
    key_of_row = key_of_row.reshape(-1).astype(np.int32)
    batches = {}
    for s in range(task.num_shards):
        lo, hi = bounds[s], bounds[s + 1]
        if hi == lo:
            continue
        batches[s] = pa.RecordBatch.from_arrays(
            [
                _packed_column(arena, starts[by_shard[lo:hi]], lengths[by_shard[lo:hi]]),
                pa.DictionaryArray.from_arrays(key_of_row[row_of[lo:hi]], sort_keys).cast(pa.string()),
                pa.array(chunk[lo:hi]),
                pa.array(use[lo:hi]),
                pa.array(pos[lo:hi].astype(np.int32)),
                pa.array(order[lo:hi]),
            ],
            schema=SHUFFLE_SCHEMA,
        )
    # A chunk split over several tasks is counted (loaded, or failed) by the task holding its
    # first emission, and each of its uses by the task holding the use's first emission.
    first_part = np.array([row["emit_start"] == 0 for row in rows], dtype=bool)
    loaded = int((~failed & first_part).sum())
    uses_written = sum(_uses_starting_in(row, task.params.position_count) for row, bad in zip(rows, failed)
                       if not bad)
    reported = [d for i, d in dead if first_part[i]]
    return LoadedTask(batches, reported, loaded, uses_written, len(by_shard))


def _uses_starting_in(row: dict, position_count: int) -> int:
    per_use = row["num_records"] if position_count <= 0 else position_count
    return -(-row["emit_stop"] // per_use) - -(-row["emit_start"] // per_use)
