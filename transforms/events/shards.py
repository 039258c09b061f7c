"""An event shard: its rows conformed to the output schema and sorted by order key."""

from __future__ import annotations

import collections
import math

import pyarrow as pa
import pyarrow.compute as pc

from shardmill.transforms.common.dead_letter import count_reasons
from shardmill.transforms.common.discovery import skipped_files_accounting
from shardmill.transforms.events.formats import ASSUMED_INFLATION, compression_of
from shardmill.transforms.events.partition_sampling import IDENTITY_COLUMNS
from shardmill.transforms.events.schema import conform
from shardmill.transforms.events.report import label_sampling_stats
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


def records_lost(dead_letters: list[dict], read: list[dict]) -> tuple[int, int]:
    """(records the dead letters stand for, how many of them are estimates); read: the partitions' stats.

    A bad row is one record, and so is an over-long record skipped, or data
    after a compressed file's last member. A file lost whole counts the
    records it held where they were read (`records`), and its bytes whose
    records are unknown (`bytes`) at the run's records per byte of files of
    the same compression (plain, gzip, zstd, bz2; a compressed file's bytes
    hold several times a plain file's records), each file at least one: so a
    file unreadable from its first byte is all estimate, and a file lost
    part-way counts the records read from it before the failure plus its
    unread bytes' estimate, or plus one when nothing was left unread. With
    no file of that compression read, the run's records per plain byte
    stand in (compressed bytes counted ASSUMED_INFLATION times); with no
    records read at all, a file is one record."""
    measured: dict[str | None, tuple[int, int]] = {}
    for s in read:
        if s.get("bytes"):
            codec = compression_of(s["partition"])
            records, size = measured.get(codec, (0, 0))
            measured[codec] = (records + s["records"], size + s["bytes"])
    plain_records = sum(r for r, _ in measured.values())
    plain_bytes = sum(b * (ASSUMED_INFLATION if codec else 1) for codec, (_, b) in measured.items())

    def per_byte(codec: str | None) -> float:
        if codec in measured:
            return measured[codec][0] / measured[codec][1]
        return plain_records / plain_bytes * (ASSUMED_INFLATION if codec else 1) if plain_bytes else 0.0

    lost = estimated = 0
    for d in dead_letters:
        records, size = d.get("records", 1), d.get("bytes", 0)
        n = max(records, 0)
        if records < 0 or size > 0:
            guess = max(1, math.ceil(size * per_byte(compression_of(d["path"]))))
            estimated += guess
            n += guess
        lost += n
    return lost, estimated


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
        read = [p["partition"] for p in parts if "partition" in p]
        # Partitions read and not written: left out for their schema, or whole by their read (the reason a
        # partition's stats carry, e.g. duplicate_columns). Their records are read, and lost.
        left_out = {d["member"]: d["reason"] for d in dead_letters if d["reason"] == "schema_conflict"}
        left_out.update({s["partition"]: s["left_out"] for s in read if "left_out" in s})
        stats = [s for s in read if s["partition"] not in left_out]
        records = sum(s["records"] for s in read)
        lost, estimated = records_lost(dead_letters, read)
        read_and_lost = (sum(d.get("records", 1) for d in dead_letters if d["reason"] == "schema_conflict")
                         + sum(s["records"] for s in read if "left_out" in s))
        return {
            "label_sampling": label_sampling_stats(stats, self._ratio, self._mode),
            "accounting": {
                "partitions": len(read),
                "partitions_left_out": len(left_out),
                "partitions_left_out_by_reason": dict(sorted(collections.Counter(left_out.values()).items())),
                "files_not_split": sorted(s["partition"] for s in read if "not_split" in s),
                "files_not_split_why": {s["partition"]: s["not_split"] for s in read if "not_split" in s},
                **skipped_files_accounting(parts),
                "records_read": records,
                "records_written": sum(s["rows"] for s in shards),
                "errors_by_reason": count_reasons(dead_letters),
                "records_lost": lost,
                "records_lost_estimated": estimated,
                # A partition left out was read (its records are in records_read and records_lost); any other loss
                # is input the run never got as rows.
                "error_fraction": (lost / (records + lost - read_and_lost) if records + lost - read_and_lost
                                   else 0.0),
            },
        }
