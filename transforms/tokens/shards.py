"""A token shard: a contiguous range of Megatron's sample order, kept in that order."""

from __future__ import annotations

import pyarrow as pa

from shardmill.transforms.output.shard_format import ShardFormat


class TokenShardFormat(ShardFormat):
    job_kind = "tokens"

    def __init__(self, stats: dict, index_build_seconds: float):
        self._stats = stats
        self._index_build_seconds = index_build_seconds

    def table(self, batches, record):
        # One batch per shard: a contiguous range of Megatron's sample order, kept in that order.
        return pa.Table.from_batches(batches)

    def row_bytes(self, table, record):
        return record["row_bytes"]

    def finish_stats(self, parts, shards, dead_letters):
        stats = self._stats
        directories = [p["megatron_cache_directory"] for p in parts if "megatron_cache_directory" in p]
        if directories:  # the graph names it: only it knows the generation
            stats = {**stats, "megatron_cache": {**stats["megatron_cache"], "directory": directories[0]}}
        return {"token_dataset": stats,
                "accounting": {"records_written": sum(s["rows"] for s in shards),
                               "errors_by_reason": {}, "error_fraction": 0.0},
                "timings": {"index_build_seconds": round(self._index_build_seconds, 3)}}
