"""Event-log file formats: which files are event logs, and how each is parsed."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

TEXT_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".ndjson")
# Compressed text logs, by suffix: one partition each (a stream can't be split), inflated as a stream and parsed
# a block at a time (transforms/events/inflate.py, record_ends.record_blocks).
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".bz2": "bz2"}
EVENT_SUFFIXES = (".parquet", *TEXT_SUFFIXES, *(t + c for t in TEXT_SUFFIXES for c in COMPRESSIONS))


# How many plain bytes a compressed log's byte stands for where nothing measured it (gzip, zstd and bz2 shrink
# text logs about 5 to 10 times): its records per byte in the error budget, its rows' size in the shard count.
ASSUMED_INFLATION = 8


def delimiter(fmt: str) -> str:
    return "," if fmt == "csv" else "\t"


@dataclasses.dataclass(frozen=True)
class EventReadOptions:
    """What to read from event files, as plain values (they travel to workers)."""

    label_column: str
    target_values: tuple[str, ...] = ("1",)
    column_names: tuple[str, ...] = ()  # text files without a header row: their columns, in order
    column_types: tuple[tuple[str, str], ...] = ()  # (column, Arrow type name) declared for text files
    hive_partitioning: bool = False  # key=value folders of the partition's relative path as columns

    def declared_types(self) -> dict[str, pa.DataType]:
        return {name: arrow_type(alias) for name, alias in self.column_types}


def arrow_type(alias: str) -> pa.DataType:
    """An Arrow type from its name ("int64", "string", "double", "bool", "timestamp[ms]", ...)."""
    try:
        return pa.type_for_alias(alias)
    except ValueError:
        raise ValueError(f"unknown Arrow type {alias!r} (e.g. int64, double, string, bool, timestamp[ms])") from None


def compression_of(path: str) -> str | None:
    """Arrow's codec name of a compressed text log ("gzip", "zstd", "bz2"), None for a plain file."""
    name = path.lower()
    for suffix, codec in COMPRESSIONS.items():
        if name.endswith(suffix) and name[: -len(suffix)].endswith(TEXT_SUFFIXES):
            return codec
    return None


def format_of(path: str) -> str:
    name = path.lower()
    for suffix in COMPRESSIONS:
        if name.endswith(suffix) and name[: -len(suffix)].endswith(TEXT_SUFFIXES):
            name = name[: -len(suffix)]
    for suffix, fmt in ((".parquet", "parquet"), (".csv", "csv"), (".tsv", "tsv"), (".jsonl", "jsonl"),
                        (".json", "jsonl"), (".ndjson", "jsonl")):
        if name.endswith(suffix):
            return fmt
    raise ValueError(f"{path}: unknown event file type (expected .parquet, .csv, .tsv, .jsonl, the text ones "
                     "optionally .gz, .zst or .bz2)")
