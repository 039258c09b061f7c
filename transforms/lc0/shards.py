"""Stage 6 kernel: one shard = its records sorted by order key, written as Parquet.

Records of a shard arrive as batches in any order; sorting by the order key
(ties broken by identity) makes the file independent of arrival order, worker
count and runner, so the bytes are identical for the same plan.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardmill.transforms.common.discovery import skipped_files_accounting
from shardmill.transforms.common.pooled import pooled_empty
from shardmill.transforms.lc0.loading import IDENTITY_FIELDS, SHUFFLE_SCHEMA, unpack_frames
from shardmill.transforms.lc0.report import accounting
from shardmill.transforms.output.shard_format import ShardFormat

ORDER_COLUMNS = ["order_key", "source", "chunk", "use_count", "position"]


def output_schema(record_size: int) -> pa.Schema:
    return pa.schema([pa.field("frame", pa.binary(record_size), nullable=False), *IDENTITY_FIELDS])


def _final_order(table: pa.Table) -> np.ndarray:
    """Row order of a shard: by order key, ties (rare: a 64-bit hash) broken by identity."""
    keys = table["order_key"].to_numpy()
    order = np.argsort(keys, kind="stable")
    if len(keys) > 1 and (np.diff(keys[order]) == 0).any():
        order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in ORDER_COLUMNS]).to_numpy()
    return order


def shard_table(batches: list[pa.RecordBatch], record_size: int) -> pa.Table:
    """The shard's rows in their final order, without the order key.

    Each record is unpacked once, from the arriving batches straight to its
    final row of a buffer reused shard after shard; only the small columns
    are concatenated first.
    """
    small = pa.Table.from_batches([b.drop_columns(["packed_frame"]) for b in batches],
                                  schema=SHUFFLE_SCHEMA.remove(SHUFFLE_SCHEMA.get_field_index("packed_frame")))
    small = small.combine_chunks()
    order = _final_order(small)
    final_row = np.empty_like(order)
    final_row[order] = np.arange(len(order))
    frames = pooled_empty((len(order), record_size))
    start = 0
    for batch in batches:
        unpack_frames(batch.column("packed_frame"), final_row[start:start + batch.num_rows], frames)
        start += batch.num_rows
    schema = output_schema(record_size)
    columns = [pa.FixedSizeBinaryArray.from_buffers(schema.field("frame").type, len(order),
                                                    [None, pa.py_buffer(frames)])]
    columns += [small[name].take(order) for name in ("source", "chunk", "use_count", "position")]
    return pa.Table.from_arrays(columns, schema=schema)


# The lc0 shards' Parquet options: `source` repeats within a row group, the rest does not.
LC0_PARQUET_OPTIONS = {"use_dictionary": ["source"], "write_statistics": ["source", "chunk", "use_count", "position"]}


class Lc0ShardFormat(ShardFormat):
    job_kind = "lc0"
    parquet_options = LC0_PARQUET_OPTIONS

    def table(self, batches, record):
        return shard_table(batches, record["record_size"])

    def row_bytes(self, table, record):
        return record["record_size"]

    def finish_stats(self, parts, shards, dead_letters):
        plan_stats = next(p["plan"] for p in parts if "plan" in p)
        loads = [p["load"] for p in parts if "load" in p]
        acc = accounting(plan_stats, loads, dead_letters, shards)
        acc["sources_indexed"] = sum(p.get("sources", 0) for p in parts)
        acc.update(skipped_files_accounting(parts))
        stats = {"accounting": acc, "sampling": plan_stats["sampling"]}
        cache = next((p["index_cache"] for p in parts if "index_cache" in p), None)
        if cache is not None:  # how this run went, as its timings: a rerun reads more from the cache, same output
            stats["timings"] = {"index_cache": {
                "location": cache,
                "sources_read": sum(p.get("sources_cached", 0) for p in parts),
                "rejected": sum(p.get("cache_rejected", 0) for p in parts),
                "pruned": sum(p.get("cache_pruned", 0) for p in parts)}}
        return stats
