"""Stage 6 kernel: one shard = its records sorted by order key, written as Parquet.

Records of a shard arrive as batches in any order; sorting by the order key
(ties broken by identity) makes the file independent of arrival order, worker
count and runner, so the bytes are identical for the same plan.
"""

from __future__ import annotations

import hashlib
import io

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
    table = pa.Table.from_batches(batches, schema=shuffle_schema(record_size))
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in ORDER_COLUMNS])
    return table.take(order).drop_columns(["order_key"]).combine_chunks()


def write_shard(
    output_dir: str,
    shard: int,
    num_shards: int,
    batches: list[pa.RecordBatch],
    record_size: int,
    row_group_rows: int,
    zstd_level: int = 3,
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
