"""Event-log sources for label sampling: Parquet, CSV/TSV, JSON lines.

`read_events(path, ...)` reads one partition (a whole file) into an Arrow
table with every input column, plus the boolean target mask, and returns
malformed rows as dead letters naming the file and line (CSV/JSON, 1-based,
header included) or row (Parquet). A file that can't be read at all, or has
no label column, is one dead letter; the run continues.

CSV columns are type-inferred; when inference meets a value it can't convert
later in the file, the file is re-read with every column as a string (so no
row is dropped for it).
"""

from __future__ import annotations

import dataclasses
import io
import json
import posixpath

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from shardmill.transforms.chunk_index import DeadLetter

FORMATS = ("parquet", "csv", "tsv", "jsonl")


@dataclasses.dataclass(frozen=True)
class EventRange:
    """A partition: a whole event file, or a contiguous range of a large one.

    Parquet ranges are runs of row groups; text ranges are byte ranges that
    start and end on line boundaries (first_line: the file's 1-based line
    number of the range's first line).
    """

    path: str
    index: int = 0
    count: int = 1
    first_group: int = 0
    end_group: int = -1
    start: int = 0
    end: int = -1
    first_line: int = 1

    @property
    def name(self) -> str:
        base = posixpath.basename(self.path)
        return base if self.count == 1 else f"{base}#{self.index}"


@dataclasses.dataclass
class EventPartition:
    path: str
    table: pa.Table  # every input column, rows in file order (bad rows left out)
    is_target: pa.Array  # bool per row of table
    dead_letters: list[DeadLetter]
    name: str = ""  # the partition's name: file basename, "#i" appended for ranges of a split file

    def target_mask(self):
        """is_target as a numpy bool array."""
        return self.is_target.to_numpy(zero_copy_only=False).astype(bool)


def format_of(path: str) -> str:
    name = path.lower()
    for suffix, fmt in ((".parquet", "parquet"), (".csv", "csv"), (".tsv", "tsv"), (".jsonl", "jsonl"),
                        (".json", "jsonl"), (".ndjson", "jsonl")):
        if name.endswith(suffix):
            return fmt
    raise ValueError(f"{path}: unknown event file type (expected .parquet, .csv, .tsv, .jsonl)")


def _read_csv(path, data: bytes, delimiter: str, header: bool, dead: list[DeadLetter],
              columns: list[str] | None = None, line_offset: int = 0) -> pa.Table:
    def on_invalid(row):
        line = row.number + line_offset if row.number is not None and row.number >= 0 else -1
        dead.append(DeadLetter(path, "read", "malformed_row",
                               f"line {line}: {row.actual_columns} fields, expected {row.expected_columns}",
                               member=f"line {line}"))
        return "skip"

    # Single-threaded parsing is what lets Arrow report the line number of a bad row.
    read = pacsv.ReadOptions(autogenerate_column_names=not header, use_threads=False)
    parse = pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_invalid)
    only = pacsv.ConvertOptions(include_columns=columns) if columns else None
    try:
        return pacsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse, convert_options=only)
    except pa.ArrowInvalid as err:
        if "CSV conversion error" not in str(err):
            raise
    del dead[:]  # re-read: the handler runs again
    first = pacsv.open_csv(io.BytesIO(data), read_options=read, parse_options=pacsv.ParseOptions(
        delimiter=delimiter, invalid_row_handler=lambda row: "skip"))
    names = first.schema.names
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, include_columns=columns)
    return pacsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse, convert_options=convert)


def _read_jsonl(path, data: bytes, dead: list[DeadLetter], line_offset: int = 0) -> pa.Table:
    try:
        return pajson.read_json(io.BytesIO(data))
    except pa.ArrowInvalid:
        pass  # find the bad lines one by one
    rows = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1 + line_offset):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as err:
            dead.append(DeadLetter(path, "read", "malformed_row", f"line {number}: {err}", member=f"line {number}"))
            continue
        if not isinstance(value, dict):
            dead.append(DeadLetter(path, "read", "malformed_row", f"line {number}: not a JSON object",
                                   member=f"line {number}"))
            continue
        rows.append(value)
    return pa.Table.from_pylist(rows)


def split_file(path: str, size: int, max_bytes: int, opener=None) -> list[EventRange]:
    """The partitions of one event file: the whole file, or ranges of about max_bytes."""
    from shardmill.transforms.chunk_index import default_opener

    if size <= max_bytes:
        return [EventRange(path)]
    try:
        fmt = format_of(path)
        with (opener or default_opener)(path) as f:
            if fmt == "parquet":
                metadata = pq.ParquetFile(f).metadata
                cuts, acc = [0], 0
                for g in range(metadata.num_row_groups):
                    acc += metadata.row_group(g).total_byte_size
                    if acc >= max_bytes and g + 1 < metadata.num_row_groups:
                        cuts.append(g + 1)
                        acc = 0
                cuts.append(metadata.num_row_groups)
                return [EventRange(path, i, len(cuts) - 1, first_group=a, end_group=b)
                        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
            data = f.read()
    except (OSError, ValueError, pa.ArrowException):
        return [EventRange(path)]  # reading it whole reports what is wrong
    cuts = [0]
    for nominal in range(max_bytes, len(data), max_bytes):
        newline = data.find(b"\n", max(nominal, cuts[-1]))
        if newline < 0 or newline + 1 >= len(data):
            break
        if newline + 1 > cuts[-1]:
            cuts.append(newline + 1)
    cuts.append(len(data))
    return [EventRange(path, i, len(cuts) - 1, start=a, end=b, first_line=1 + data.count(b"\n", 0, a))
            for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]


def read_events(path: str | EventRange, label_column: str, target_values: list[str], opener=None,
                labels_only: bool = False) -> EventPartition:
    """One partition (a file, or an EventRange of one); never raises for bad data (it becomes dead letters).

    labels_only: materialise only the label column (Parquet reads just that
    column; CSV still tokenizes every line; JSON lines parses everything).
    """
    from shardmill.transforms.chunk_index import default_opener

    part = path if isinstance(path, EventRange) else EventRange(path)
    path = part.path
    dead: list[DeadLetter] = []
    empty = EventPartition(path, pa.table({}), pa.array([], pa.bool_()), dead, part.name)
    try:
        fmt = format_of(path)
        with (opener or default_opener)(path) as f:
            data = f.read()
        columns = [label_column] if labels_only else None
        if fmt == "parquet":
            if columns and label_column not in pq.read_schema(io.BytesIO(data)).names:
                columns = None  # let the missing-column check below report it
            parquet = pq.ParquetFile(io.BytesIO(data))
            end = parquet.metadata.num_row_groups if part.end_group < 0 else part.end_group
            table = parquet.read_row_groups(list(range(part.first_group, end)), columns=columns)
        else:
            text = data if part.end < 0 else data[part.start : part.end]
            if fmt == "jsonl":
                table = _read_jsonl(path, text, dead, line_offset=part.first_line - 1)
            else:
                line_offset = 0
                if part.start > 0:  # a later range: put the header back, count lines from its first
                    text = data[: data.index(b"\n") + 1] + text
                    line_offset = part.first_line - 2
                table = _read_csv(path, text, "," if fmt == "csv" else "\t", header=True, dead=dead,
                                  columns=columns, line_offset=line_offset)
    except (OSError, ValueError, pa.ArrowException) as err:
        dead.append(DeadLetter(path, "read", "unreadable", str(err)))
        return empty
    if label_column not in table.column_names:
        dead.append(DeadLetter(path, "read", "missing_label_column",
                               f"no column {label_column!r} (columns: {', '.join(table.column_names)})"))
        return empty
    labels = table[label_column]
    missing = pc.is_null(labels)
    if pc.any(missing).as_py():
        for row in pc.indices_nonzero(missing).to_pylist():
            dead.append(DeadLetter(path, "read", "malformed_row", f"row {row}: {label_column} is null",
                                   member=f"row {row}"))
        table = table.filter(pc.invert(missing))
        labels = table[label_column]
    is_target = pc.is_in(pc.cast(labels, pa.string()), value_set=pa.array([str(v) for v in target_values]))
    if isinstance(is_target, pa.ChunkedArray):
        is_target = is_target.combine_chunks()
    return EventPartition(path, table, is_target, dead, part.name)
