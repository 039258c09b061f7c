"""An event shard: its rows conformed to the output schema and sorted by order key."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from shardmill.transforms.common.dead_letter import count_reasons
from shardmill.transforms.common.discovery import skipped_files
from shardmill.transforms.events.partition_sampling import IDENTITY_COLUMNS
from shardmill.transforms.events.schema import conform
from shardmill.transforms.events.summary import label_sampling_stats
from shardmill.transforms.output.shard_format import ShardFormat


def event_shard_table(batches: list[pa.RecordBatch], identity_columns: list[str]) -> pa.Table:
    """An event shard's rows sorted by order key (ties by identity), order key dropped.

    Partitions may infer different column types (CSV); they are unified permissively.
    """
    tables = [pa.Table.from_batches([b]) for b in batches]
    table = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    if table.num_rows == 0:
        return table.drop_columns(["order_key"]) if "order_key" in table.column_names else table
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in ["order_key", *identity_columns]])
    return table.take(order).drop_columns(["order_key"])


class EventShardFormat(ShardFormat):
    job_kind = "labels"

    def __init__(self, ratio: float, mode: str):
        self._ratio = ratio
        self._mode = mode

    def table(self, batches, record):
        event_schema = record["event_schema"]
        conformed = []
        for batch in batches:
            table = pa.Table.from_batches([batch])
            if event_schema.rejected:
                table = table.filter(pc.invert(pc.is_in(table["_partition"],
                                                        pa.array(sorted(event_schema.rejected)))))
            conformed.append(conform(table, event_schema.schema))
        if not any(t.num_rows for t in conformed):
            empty = conform(pa.table({"_partition": pa.array([], pa.string()), "_row": pa.array([], pa.int64())}),
                            event_schema.schema)
            return empty.select([*event_schema.schema.names, *IDENTITY_COLUMNS])
        return event_shard_table([b for t in conformed if t.num_rows for b in t.to_batches()], IDENTITY_COLUMNS)

    def manifest_record(self, record):
        return {k: v for k, v in record.items() if k != "event_schema"}

    def finish_stats(self, parts, shards, dead_letters):
        rejected = {d["member"] for d in dead_letters if d["reason"] == "schema_conflict"}
        read = [p["partition"] for p in parts if "partition" in p]
        stats = [s for s in read if s["partition"] not in rejected]
        records = sum(s["records"] for s in read)
        return {
            "label_sampling": label_sampling_stats(stats, self._ratio, self._mode),
            "accounting": {
                "partitions": len(read),
                "partitions_left_out": len(rejected),
                "files_not_split": sorted(s["partition"] for s in read if "not_split" in s),
                "files_not_split_why": {s["partition"]: s["not_split"] for s in read if "not_split" in s},
                "files_skipped": skipped_files(parts),
                "records_read": records,
                "records_written": sum(s["rows"] for s in shards),
                "errors_by_reason": count_reasons(dead_letters),
                "error_fraction": len(dead_letters) / (records + len(dead_letters)) if records or dead_letters else 0.0,
            },
        }
