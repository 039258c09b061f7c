"""Stage 6 kernel: one shard = its records sorted by order key, written as Parquet.

Records of a shard arrive as batches in any order; sorting by the order key
(ties broken by identity) makes the file independent of arrival order, worker
count and runner, so the bytes are identical for the same plan.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardmill.transforms.atomic_io import write_bytes_atomically
from shardmill.transforms.chunk_loading import shuffle_schema

ORDER_COLUMNS = ["order_key", "source", "chunk", "use_count", "position"]


def shard_name(shard: int, num_shards: int) -> str:
    return f"shard-{shard:05d}-of-{num_shards:05d}.parquet"


def output_schema(record_size: int) -> pa.Schema:
    return shuffle_schema(record_size).remove(shuffle_schema(record_size).get_field_index("order_key"))


def shard_table(batches: list[pa.RecordBatch], record_size: int) -> pa.Table:
    """The shard's rows in their final order, without the order key."""
    schema = shuffle_schema(record_size)
    table = pa.Table.from_batches(batches, schema=schema).combine_chunks()
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in ORDER_COLUMNS]).to_numpy()
    # Gather the frames with numpy: one memcpy per row, faster than Arrow's take on fixed_size_binary.
    frames = table["frame"].chunk(0) if table.num_rows else pa.array([], schema.field("frame").type)
    frame_bytes = np.frombuffer(frames.buffers()[1], dtype=np.uint8, count=len(frames) * record_size,
                                offset=frames.offset * record_size).reshape(len(frames), record_size)
    gathered = np.ascontiguousarray(frame_bytes[order])
    columns = [pa.FixedSizeBinaryArray.from_buffers(frames.type, len(order), [None, pa.py_buffer(gathered)])]
    columns += [table[name].take(order) for name in ("source", "chunk", "use_count", "position")]
    return pa.Table.from_arrays(columns, schema=output_schema(record_size))


def write_shard(
    output_dir: str,
    shard: int,
    num_shards: int,
    batches: list[pa.RecordBatch],
    record_size: int,
    row_group_rows: int,
    zstd_level: int = 1,
) -> dict:
    """Writes one shard atomically; returns its manifest entry."""
    table = shard_table(batches, record_size)
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=max(1, row_group_rows),
        compression="zstd",
        compression_level=zstd_level,
        use_dictionary=["source"],
        write_statistics=["source", "chunk", "use_count", "position"],
    )
    data = sink.getvalue()
    name = shard_name(shard, num_shards)
    write_bytes_atomically(f"{output_dir.rstrip('/')}/{name}", data)
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    return {
        "shard": shard,
        "path": name,
        "rows": table.num_rows,
        "row_groups": [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)],
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
