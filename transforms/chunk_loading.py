"""Stage 4 kernel: read the planned chunks of one source and cut out their records.

For a ReadTask (chunks of one source in file order) it inflates each chunk,
verifies the indexed record count and every record's version, emits the
positions of every planned use, and gives each emitted record its shard and
order key. The output is one Arrow RecordBatch per shard (SHUFFLE_SCHEMA).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from shardmill.transforms.chunk_index import DeadLetter, Opener, default_opener
from shardmill.transforms.chunk_sampling import positions_of_uses, shuffle_keys
from shardmill.transforms.gzip_chunks import ChunkError, ChunkSpan, inflate_chunk
from shardmill.transforms.job_plan import ReadTask


def shuffle_schema(record_size: int) -> pa.Schema:
    """Columns of the batches moved by the shuffle; order_key is dropped when shards are written."""
    return pa.schema([
        pa.field("frame", pa.binary(record_size), nullable=False),  # one raw lc0 record
        pa.field("source", pa.string(), nullable=False),  # sort key of the chunk's source
        pa.field("chunk", pa.int32(), nullable=False),  # chunk ordinal within the source
        pa.field("use_count", pa.int32(), nullable=False),  # the use that emitted the record
        pa.field("position", pa.int32(), nullable=False),  # record index within the chunk
        pa.field("order_key", pa.uint64(), nullable=False),
    ])


@dataclasses.dataclass
class LoadedTask:
    batches: dict[int, pa.RecordBatch]  # shard -> records
    dead_letters: list[DeadLetter]
    chunks_loaded: int = 0
    uses_written: int = 0
    records_written: int = 0


def _records_of_chunk(fileobj, row) -> np.ndarray:
    """The chunk's records as an (n, record_size) uint8 array, verified against the index."""
    payload = inflate_chunk(ChunkSpan(fileobj, row["offset"], row["length"]))
    size, n = row["record_size"], row["num_records"]
    if len(payload) != n * size:
        raise ChunkError("count_mismatch",
                         f"inflated to {len(payload)} bytes = {len(payload) / size:g} records, index says {n}")
    records = np.frombuffer(payload, dtype=np.uint8).reshape(n, size)
    versions = records[:, :4].copy().view("<u4").ravel()
    bad = np.flatnonzero(versions != row["version"])
    if len(bad):
        raise ChunkError("corrupt", f"record {bad[0]} has version {versions[bad[0]]}, chunk is V{row['version']}")
    return records


def load_task(task: ReadTask, opener: Opener = default_opener) -> LoadedTask:
    """Reads a task's chunks in file order; bad chunks become dead letters (stage 'load')."""
    dead: list[DeadLetter] = []
    parts = []  # per loaded chunk: (records[positions], chunk, use_count, position, chunk_key)
    uses_written = 0
    rows = task.chunks.to_pylist()
    done = 0
    try:
        with opener(task.source) as fileobj:
            for row in rows:
                done += 1
                try:
                    records = _records_of_chunk(fileobj, row)
                except ChunkError as err:
                    dead.append(DeadLetter(task.source, "load", err.reason, err.detail, row["member"], row["chunk"]))
                    continue
                use, pos = positions_of_uses(row["chunk_key"], row["num_records"], row["num_uses"],
                                             task.params.position_count, task.params.seed)
                parts.append((records[pos], row["chunk"], use, pos, row["chunk_key"]))
                uses_written += row["num_uses"]
    except OSError as err:  # opening failed (done == 0) or reading chunk done-1 failed
        for row in rows[max(done - 1, 0) :]:
            dead.append(DeadLetter(task.source, "load", "unreadable", str(err), row["member"], row["chunk"]))
    if not parts:
        return LoadedTask({}, dead)
    chunk = np.concatenate([np.full(len(p[3]), p[1], dtype=np.int32) for p in parts])
    use = np.concatenate([p[2] for p in parts]).astype(np.int32)
    pos = np.concatenate([p[3] for p in parts]).astype(np.int32)
    keys = np.concatenate([np.full(len(p[3]), p[4], dtype=np.uint64) for p in parts])
    shard, order = shuffle_keys(keys, use, pos, task.params.seed, task.num_shards)
    # One gather puts every column in shard order; each shard is then a zero-copy slice.
    by_shard = np.argsort(shard, kind="stable")
    frame = np.concatenate([p[0] for p in parts])[by_shard]
    chunk, use, pos, order = chunk[by_shard], use[by_shard], pos[by_shard], order[by_shard]
    bounds = np.searchsorted(shard[by_shard], np.arange(task.num_shards + 1))
    schema = shuffle_schema(frame.shape[1])
    source = pa.array([rows[0]["sort_key"]])  # one source per task
    batches = {}
    for s in range(task.num_shards):
        lo, hi = bounds[s], bounds[s + 1]
        if hi == lo:
            continue
        batches[s] = pa.RecordBatch.from_arrays(
            [
                pa.FixedSizeBinaryArray.from_buffers(schema.field("frame").type, int(hi - lo),
                                                     [None, pa.py_buffer(frame[lo:hi])]),
                pa.DictionaryArray.from_arrays(np.zeros(hi - lo, dtype=np.int32), source).cast(pa.string()),
                pa.array(chunk[lo:hi]),
                pa.array(use[lo:hi]),
                pa.array(pos[lo:hi]),
                pa.array(order[lo:hi]),
            ],
            schema=schema,
        )
    return LoadedTask(batches, dead, len(parts), uses_written, len(frame))
