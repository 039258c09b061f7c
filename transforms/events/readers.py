"""Reading one event partition: Parquet, CSV/TSV, JSON lines, with bad rows as dead letters.

`read_events(part, options)` reads one partition (a whole file, or a range
of a large one) into an Arrow table with every input column, plus the
boolean target mask, and returns malformed rows as dead letters naming the
file and where in it: `line N` for text formats (the file's physical line,
1-based, header included, quoted newlines counted), `row N` for Parquet (the
0-based row of the file). A file that can't be read at all, has no label
column, or whose label column is not a scalar, is one dead letter; the run
continues.

CSV/TSV columns come from the header row, or from `column_names` for
headerless files; types are inferred unless declared. When inference meets a
value it can't convert later in the file, the file is re-read with every
undeclared column as a string (so no row is dropped for it).
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import math
import re
import urllib.parse
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.events.formats import EventReadOptions, compression_of, delimiter, format_of
from shardmill.transforms.events.inflate import InflatedStream
from shardmill.transforms.events.labels import is_label_type, target_mask
from shardmill.transforms.events.partitions import EventRange
from shardmill.transforms.events import record_ends
from shardmill.transforms.events.record_ends import OverLongRecord, record_blocks


@dataclasses.dataclass
class EventPartition:
    path: str
    table: pa.Table  # every input column, rows in file order (bad rows left out)
    is_target: pa.Array  # bool per row of table
    dead_letters: list[DeadLetter]
    name: str = ""  # EventRange.name
    # A compressed log longer than one block, as scan_events leaves it: rows per block (table is then empty,
    # is_target covers every row) and the file's columns (event_blocks reads the rows block by block).
    block_rows: tuple[int, ...] = ()
    schema: pa.Schema | None = None
    first_row: int = 0  # a block's first row in its file
    # A partition read whole and then left out for what it holds (its dead letter's reason, e.g. duplicate_columns):
    # its records were read, so the run counts them read, and lost.
    left_out: str = ""
    left_out_records: int = 0

    def target_mask(self):
        """is_target as a numpy bool array."""
        return self.is_target.to_numpy(zero_copy_only=False).astype(bool)


# ---- partition names ----------------------------------------------------------


# ---- splitting text at record boundaries -----------------------------------------


# ---- reading ------------------------------------------------------------------


class _TextLines:
    """Maps a parsed text's records to the file's physical lines, computed only when an error needs them.

    text is what the parser saw: header bytes (put back before a later range,
    header_lines physical lines) and then the range, whose first line is the
    file's first_line.
    """

    def __init__(self, text: bytes, fmt: str, first_line: int, header_lines: int):
        self._text = text
        self._fmt = fmt
        self._first_line = first_line
        self._header_lines = header_lines
        self._starts: list[int] | None = None

    def file_line(self, text_line: int) -> int:
        if text_line <= self._header_lines:
            return text_line
        return self._first_line + text_line - self._header_lines - 1

    def record_starts(self) -> list[int]:
        """Text line of each record the parser counts (empty lines are not records)."""
        if self._starts is None:
            if self._fmt == "jsonl":
                # Only "\n" ends a line (str.splitlines would also cut at U+2028 and others, which a JSON
                # string may hold raw).
                self._starts = [n for n, line in enumerate(self._text.split(b"\n"), start=1) if line.strip()]
            else:
                csv.field_size_limit(2**31 - 1)  # Python's csv stops at 128 KiB fields; Arrow reads any
                decoded = self._text.decode("utf-8", errors="replace")
                reader = csv.reader(io.StringIO(decoded, newline=""), delimiter=delimiter(self._fmt), quotechar='"',
                                    doublequote=True, strict=False)
                starts, consumed = [], 0
                for row in reader:
                    if row:
                        starts.append(consumed + 1)
                    consumed = reader.line_num
                self._starts = starts
        return self._starts

    def line_of_record(self, number: int) -> int:
        """File line of the parser's 1-based record number (Arrow's InvalidRow.number)."""
        starts = self.record_starts()
        return self.file_line(starts[number - 1]) if 0 < number <= len(starts) else -1

    def lines_of_rows(self, rows: list[int], skipped: set[int], header: bool) -> list[int]:
        """File lines of table rows (0-based), given the record numbers the parser skipped."""
        starts = self.record_starts()
        kept = [n for n in range(2 if header else 1, len(starts) + 1) if n not in skipped]
        return [self.file_line(starts[kept[r] - 1]) if r < len(kept) else -1 for r in rows]


def _read_csv(path: str, text: bytes, fmt: str, options: EventReadOptions, lines: _TextLines,
              dead: list[DeadLetter], columns: list[str] | None, as_text: tuple[str, ...] = ()):
    """(table, location of table rows) for CSV/TSV text; as_text: columns read as strings whatever they hold."""
    skipped: dict[int, str] = {}

    def on_invalid(row):
        skipped[row.number] = f"{row.actual_columns} fields, expected {row.expected_columns}"
        return "skip"

    header = not options.column_names
    # Single-threaded parsing is what lets Arrow report the record number of a bad row; one block for the whole
    # text, so no field is too long for a block (Arrow's "straddling object").
    read = pacsv.ReadOptions(column_names=list(options.column_names) or None, use_threads=False,
                             block_size=min(max(len(text) + 1, 1 << 20), 2**31 - 1))
    parse = pacsv.ParseOptions(delimiter=delimiter(fmt), invalid_row_handler=on_invalid,
                               newlines_in_values=True)
    declared = {**options.declared_types(), **{name: pa.string() for name in as_text}}
    convert = pacsv.ConvertOptions(column_types=declared, include_columns=columns)
    try:
        table = pacsv.read_csv(io.BytesIO(text), read_options=read, parse_options=parse, convert_options=convert)
    except pa.ArrowInvalid as err:
        if "CSV conversion error" not in str(err):
            raise
        skipped.clear()  # re-read: the handler runs again
        names = pacsv.open_csv(io.BytesIO(text), read_options=read, parse_options=pacsv.ParseOptions(
            delimiter=parse.delimiter, invalid_row_handler=lambda row: "skip")).schema.names
        convert = pacsv.ConvertOptions(column_types={n: declared.get(n, pa.string()) for n in names},
                                       include_columns=columns)
        table = pacsv.read_csv(io.BytesIO(text), read_options=read, parse_options=parse, convert_options=convert)
    for number, detail in sorted(skipped.items()):
        line = lines.line_of_record(number)
        dead.append(DeadLetter(path, "read", "malformed_row", f"line {line}: {detail}", member=f"line {line}"))
    locate = lambda rows: [f"line {n}" for n in lines.lines_of_rows(rows, set(skipped), header)]  # noqa: E731
    return _valid_utf8(table, set(declared), locate, path, dead), locate


def _valid_utf8(table: pa.Table, declared: set[str], locate, path: str, dead: list[DeadLetter]) -> pa.Table:
    """Text columns Arrow read as binary for invalid UTF-8 bytes: those rows are dead letters at their lines,
    and the column stays a string column (declared binary columns are left as they are)."""
    bad = set()
    suspects = [(i, field.name) for i, field in enumerate(table.schema)
                if pa.types.is_binary(field.type) and field.name not in declared]
    for i, name in suspects:
        for row, value in enumerate(table.column(i).to_pylist()):
            if value is not None:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError as err:
                    if row not in bad:
                        bad.add(row)
                        where = locate([row])[0]
                        dead.append(DeadLetter(path, "read", "malformed_row",
                                               f"{where}: {name}: invalid UTF-8 ({err.reason} at byte {err.start})",
                                               member=where))
    if not suspects:
        return table
    if bad:
        keep = pa.array([row not in bad for row in range(table.num_rows)])
        table = table.filter(keep)
    # The good rows of every binary column decode; a column that now parses as numbers stays text (as read).
    binary = {i for i, _ in suspects}
    return table.cast(pa.schema([f.with_type(pa.string()) if i in binary else f for i, f in enumerate(table.schema)]))


_LONG_INTEGER = re.compile(rb"-?\d{19,}")


def _beyond_int64(text: bytes) -> bool:
    """Whether the text holds an integer literal int64 can't hold (digits inside strings count too: a false
    alarm only costs the slower row-by-row read)."""
    return any(not -2**63 <= int(m) < 2**63 for m in _LONG_INTEGER.findall(text))


def _read_jsonl(path: str, text: bytes, lines: _TextLines, dead: list[DeadLetter]):
    """(table, location of table rows) for JSON lines."""
    if not _beyond_int64(text):  # Arrow's reader would make such integers doubles, silently
        try:
            table = pajson.read_json(io.BytesIO(text))
            table.validate(full=True)  # Arrow's JSON reader takes invalid UTF-8 into string columns
            return table, lambda rows: [f"line {lines.file_line(lines.record_starts()[r])}" for r in rows]
        except pa.ArrowInvalid:
            pass  # find the bad lines one by one
    values, row_lines = [], []
    for number, raw in enumerate(text.split(b"\n"), start=1):  # only "\n" ends a line (not U+2028 and kin)
        if not raw.strip():
            continue
        where = f"line {lines.file_line(number)}"
        try:
            value = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
            reason = "nested too deeply" if isinstance(err, RecursionError) else str(err)
            dead.append(DeadLetter(path, "read", "malformed_row", f"{where}: {reason}", member=where))
            continue
        if not isinstance(value, dict):
            dead.append(DeadLetter(path, "read", "malformed_row", f"{where}: not a JSON object", member=where))
            continue
        values.append(value)
        row_lines.append(where)
    table, kept = _table_of_rows(values, row_lines, path, dead)
    return table, lambda rows: [kept[r] for r in rows]


def _table_of_rows(values: list[dict], row_lines: list[str], path: str, dead: list[DeadLetter]):
    """(table, location of its rows) of parsed JSON objects; a row Arrow can't hold beside the others (another
    type than its column's, an integer beyond int64) is a dead letter at its line instead of losing the file."""
    try:
        return pa.Table.from_pylist(values), row_lines
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        pass
    names = list(dict.fromkeys(name for value in values for name in value))
    fields = []
    for name in names:
        # Each column takes the type most of its values have; the rows that disagree are dead letters.
        types = collections.Counter()
        for value in values:
            if value.get(name) is not None:
                try:
                    types[pa.array([value[name]]).type] += 1
                except (pa.ArrowException, ValueError, TypeError, OverflowError):
                    pass
        fields.append(pa.field(name, types.most_common(1)[0][0] if types else pa.null()))
    schema = pa.schema(fields)
    kept, kept_lines = [], []
    for value, where in zip(values, row_lines):
        try:
            pa.Table.from_pylist([value], schema=schema)
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as err:
            dead.append(DeadLetter(path, "read", "malformed_row", f"{where}: {_row_error(value, schema, err)}",
                                   member=where))
            continue
        kept.append(value)
        kept_lines.append(where)
    return pa.Table.from_pylist(kept, schema=schema), kept_lines


def _row_error(value: dict, schema: pa.Schema, err: Exception) -> str:
    """Which field of a JSON row does not fit its column, and why."""
    for field in schema:
        if value.get(field.name) is None:
            continue
        try:
            pa.array([value[field.name]], type=field.type)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            shown = json.dumps(value[field.name])
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            if isinstance(value[field.name], int) and not isinstance(value[field.name], bool):
                return f"{field.name} = {shown}: an integer beyond int64 (refused rather than rounded)"
            return f"{field.name} = {shown}: not {field.type}, the type of the column's other values"
    return str(err)


def _read_text(path: str, f, part: EventRange, fmt: str, options: EventReadOptions, dead: list[DeadLetter],
               columns: list[str] | None):
    header = b""
    if part.end < 0:
        text = f.read()
    else:
        if part.start > 0 and fmt != "jsonl" and not options.column_names:
            header = f.read(part.header_end)  # a later range: put the header back
        f.seek(part.start)
        text = header + f.read(part.end - part.start)
    return _parse_text(path, text, fmt, options, part.first_line, header, dead, columns)


def _parse_text(path: str, text: bytes, fmt: str, options: EventReadOptions, first_line: int, header: bytes,
                dead: list[DeadLetter], columns: list[str] | None, as_text: tuple[str, ...] = ()):
    """(table, location of its rows) of text whose first line after `header` (put back) is the file's first_line."""
    lines = _TextLines(text, fmt, first_line, header.count(b"\n"))
    if fmt == "jsonl":
        return _read_jsonl(path, text, lines, dead)
    return _read_csv(path, text, fmt, options, lines, dead, columns, as_text)


def _read_parquet(f, part: EventRange, columns: list[str] | None, label_column: str):
    parquet = pq.ParquetFile(f)
    if columns and label_column not in parquet.schema_arrow.names:
        columns = None  # let the missing-column check report it
    metadata = parquet.metadata
    end = metadata.num_row_groups if part.end_group < 0 else part.end_group
    first_row = sum(metadata.row_group(g).num_rows for g in range(part.first_group))
    table = parquet.read_row_groups(list(range(part.first_group, end)), columns=columns)
    return table, lambda rows: [f"row {first_row + r}" for r in rows]


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# Folder values typed only when they are plain literals: Python's int() and float() also take "1_000", " 7",
# non-ASCII digits, "nan" and "inf", which a folder name means as text.
_HIVE_INTEGER = re.compile(r"[+-]?[0-9]+")
_HIVE_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def hive_value(text: str) -> int | float | str | None:
    """A decoded folder value, typed: an int for a plain decimal integer int64 holds, a float for a plain
    decimal or scientific literal, else the text; None for Hive's null partition and for an empty value
    (Hive writes an empty partition value as its null partition)."""
    if text in ("", HIVE_NULL):
        return None
    if _HIVE_INTEGER.fullmatch(text):
        number = int(text)
        return number if -2**63 <= number < 2**63 else text  # beyond int64: its text, not a rounded double
    if _HIVE_DOUBLE.fullmatch(text):
        number = float(text)
        return number if math.isfinite(number) else text
    return text


def hive_values(relative: str) -> list[tuple[str, object]]:
    """The `key=value` folders of a relative path, outermost first, each value typed by hive_value."""
    values = []
    for folder in relative.split("/")[:-1]:
        key, sep, raw = folder.partition("=")
        if sep and key:
            values.append((urllib.parse.unquote(key), hive_value(urllib.parse.unquote(raw))))
    return values


def with_hive_columns(table: pa.Table, relative: str) -> pa.Table:
    """The table with a constant column per `key=value` folder of its partition (its own columns win).

    A null value is a column of Arrow's null type, which unifies with the key's type in other folders."""
    for key, value in hive_values(relative):
        if key in table.column_names:
            continue
        type_ = (pa.null() if value is None else pa.int64() if isinstance(value, int)
                 else pa.float64() if isinstance(value, float) else pa.string())
        table = table.append_column(key, pa.array([value] * table.num_rows, type=type_))
    return table


def column_names(path: str, options: EventReadOptions, opener=None) -> list[str]:
    """A file's column names from its head only (Parquet footer, CSV/TSV header, first JSON object).

    Raises what reading it raises (OSError, ValueError, ArrowException)."""
    from shardmill.transforms.common.filesystem import default_opener

    fmt = format_of(path)
    if fmt != "parquet" and options.column_names:
        return list(options.column_names)
    with (opener or default_opener)(path) as f:
        if fmt == "parquet":
            return pq.ParquetFile(f).schema_arrow.names
        codec = compression_of(path)
        stream = pa.CompressedInputStream(f, codec) if codec else pa.PythonFile(f, mode="r")
        if fmt == "jsonl":
            head = b""
            while b"\n" not in head.lstrip() and (block := stream.read(1 << 16)) and len(head) < (64 << 20):
                head += block
            first = next((line for line in head.split(b"\n") if line.strip()), b"{}")
            value = json.loads(first)
            return list(value) if isinstance(value, dict) else []
        read = pacsv.ReadOptions(use_threads=False, block_size=1 << 20)
        parse = pacsv.ParseOptions(delimiter=delimiter(fmt), newlines_in_values=True,
                                   invalid_row_handler=lambda row: "skip")
        return pacsv.open_csv(stream, read_options=read, parse_options=parse).schema.names


class _FileLost(Exception):
    """The whole file is one dead letter: (reason, detail, the records it held where the reader knows them)."""

    def __init__(self, reason: str, detail: str, records: int = -1):
        super().__init__(detail)
        self.reason, self.detail, self.records = reason, detail, records


def _labelled(path: str, table: pa.Table, locate, part: EventRange, options: EventReadOptions,
              dead: list[DeadLetter]) -> tuple[pa.Table, pa.Array]:
    """(rows with a label, their target mask); rows with a null label are dead letters; _FileLost when the
    label column is missing or not a scalar, or a column name repeats."""
    label = options.label_column
    names = table.column_names
    duplicates = sorted(name for name, n in collections.Counter(names).items() if n > 1)
    if duplicates:
        raise _FileLost("duplicate_columns", f"column name(s) {', '.join(map(repr, duplicates))} appear more than "
                        f"once (columns: {', '.join(names)})", table.num_rows)
    if label not in table.column_names:
        raise _FileLost("missing_label_column", f"no column {label!r} (columns: {', '.join(table.column_names)})",
                        table.num_rows)
    if options.hive_partitioning:
        table = with_hive_columns(table, part.relative)
    labels = table[label]
    if not is_label_type(labels.type):
        raise _FileLost("unsupported_label_type", f"column {label!r} is {labels.type}: labels must be strings, "
                        "integers, floats or booleans", table.num_rows)
    missing = pc.is_null(labels)
    if pc.any(missing).as_py():
        rows = pc.indices_nonzero(missing).to_pylist()
        for where in locate(rows):
            dead.append(DeadLetter(path, "read", "malformed_row", f"{where}: {label} is null", member=where))
        table = table.filter(pc.invert(missing))
        labels = table[label]
    return table, target_mask(labels, options.target_values)


def _lost_file(path: str, err: Exception, size: int, records_read: int = 0, unread_bytes: int = 0) -> DeadLetter:
    """The dead letter of a file left out whole; shards.records_lost prices it from `records` and `bytes`.

    A file whose reading failed: nothing read from it, its records are
    unknown (its bytes estimate them); lost part-way, the records read
    before the failure count, plus its unread bytes estimated, or one record
    (the one the failure cut) when none are left. A file refused for what it
    holds (_FileLost) counts the records read."""
    if isinstance(err, _FileLost) and err.records >= 0:
        records = records_read + err.records
        detail = err.detail + (f" (the file is left out: {records:,} records read)" if records_read else "")
        return DeadLetter(path, "read", err.reason, detail, records=records, bytes=unread_bytes)
    reason, detail = (err.reason, err.detail) if isinstance(err, _FileLost) else ("unreadable", str(err) or
                                                                                 type(err).__name__)
    if not records_read:
        return DeadLetter(path, "read", reason, detail, records=-1, bytes=max(size, 0))
    detail += f" (the file is left out: {records_read:,} records read before this)"
    return DeadLetter(path, "read", reason, detail, records=records_read + (0 if unread_bytes else 1),
                      bytes=unread_bytes)


def read_events(part: str | EventRange, options: EventReadOptions, opener=None,
                labels_only: bool = False) -> EventPartition:
    """One partition (a file, or an EventRange of one); never raises for bad data (it becomes dead letters).

    labels_only: materialise only the label column (Parquet reads just that
    column; CSV still tokenizes every line; JSON lines parses everything).
    A compressed log is read block by block (scan_events) and its blocks'
    rows gathered here; labels_only then gives only the target mask.
    """
    part = part if isinstance(part, EventRange) else EventRange(part)
    scan = scan_events(part, options, opener, labels_only)
    if not scan.block_rows or labels_only:
        return scan
    tables = [block.table for block in event_blocks(part, options, scan, opener)]
    return dataclasses.replace(scan, table=pa.concat_tables(tables), block_rows=())


def scan_events(part: str | EventRange, options: EventReadOptions, opener=None,
                labels_only: bool = False) -> EventPartition:
    """read_events' first pass: a plain file or range whole; a compressed log block by block, keeping only its
    target mask (1 byte a row), its columns' types and its dead letters, unless it was one block (then it is
    read whole, as a plain file)."""
    from shardmill.transforms.common.filesystem import default_opener

    part = part if isinstance(part, EventRange) else EventRange(part)
    path = part.path
    dead: list[DeadLetter] = []
    empty = EventPartition(path, pa.table({}), pa.array([], pa.bool_()), dead, part.name)
    columns = [options.label_column] if labels_only else None
    try:
        fmt = format_of(path)
        if compression_of(path):
            return _scan_compressed(part, fmt, options, opener or default_opener, columns)
        with (opener or default_opener)(path) as f:
            if fmt == "parquet":
                table, locate = _read_parquet(f, part, columns, options.label_column)
            else:
                table, locate = _read_text(path, f, part, fmt, options, dead, columns)
        table, is_target = _labelled(path, table, locate, part, options, dead)
    except Exception as err:  # noqa: BLE001  (untrusted input: whatever a reader raises is this file's dead letter)
        return _left_out(empty, _lost_file(path, err, part.size), err)
    return EventPartition(path, table, is_target, dead, part.name)


def _left_out(empty: EventPartition, dead: DeadLetter, err: Exception) -> EventPartition:
    """A partition that is one dead letter; left_out when it was read and refused for what it holds (a failed read
    is not: what it held is unknown, or was cut off)."""
    if isinstance(err, _FileLost) and err.records >= 0:
        return dataclasses.replace(empty, dead_letters=[dead], left_out=dead.reason, left_out_records=dead.records)
    return dataclasses.replace(empty, dead_letters=[dead])


# ---- compressed logs, block by block ----------------------------------------------------


def _compressed_blocks(part: EventRange, fmt: str, options: EventReadOptions, opener, columns: list[str] | None,
                       dead: list[DeadLetter], streams: list, as_text=None):
    """(table, locate) per block of whole records of a compressed log, in order (its InflatedStream appended
    to streams).

    Over-long records are dead letters; a block's text gets the header back
    (CSV/TSV with a header row). as_text(block schema) names columns to read
    again as text. Raises InflateError, or what parsing raises.
    """
    path = part.path
    with opener(path) as f:
        stream = InflatedStream(f, compression_of(path), "." + path.rsplit(".", 1)[-1])
        streams.append(stream)
        header = None
        headed = fmt != "jsonl" and not options.column_names
        for block in record_blocks(stream.chunks(), fmt):
            if isinstance(block, OverLongRecord):
                where, limit = f"line {block.first_line}", f"{record_ends.MAX_RECORD_BYTES >> 20} MiB"
                if block.first_line == 1 and headed:
                    raise _FileLost("unreadable", f"its header row is longer than {limit}")
                dead.append(DeadLetter(path, "read", "over_long_record",
                                       f"{where}: a record of {block.length:,} bytes or more, longer than the "
                                       f"{limit} a record may hold (skipped; the rest of the file is read)",
                                       member=where))
                continue
            put_back = b""
            if headed:
                if header is None:
                    header = block.text[: block.header_end] if 0 <= block.header_end <= len(block.text) else b""
                elif block.start > 0:
                    put_back = header
            text = put_back + block.text
            table, locate = _parse_text(path, text, fmt, options, block.first_line, put_back, dead, columns)
            again = as_text(table.schema) if as_text else ()
            if again:
                table, locate = _parse_text(path, text, fmt, options, block.first_line, put_back, [], columns,
                                            again)
            yield table, locate


def _scan_compressed(part: EventRange, fmt: str, options: EventReadOptions, opener,
                     columns: list[str] | None) -> EventPartition:
    path = part.path
    dead: list[DeadLetter] = []
    label = options.label_column
    masks, block_rows, schemas = [], [], []
    unlabelled = []  # (first line, last line, records) of JSON-lines blocks without the label
    first = None  # the first block's (table, is_target), kept while it is the only one
    streams: list[InflatedStream] = []
    try:
        for table, locate in _compressed_blocks(part, fmt, options, opener, columns, dead, streams):
            schemas.append(table.schema)
            if fmt == "jsonl" and label not in table.column_names and table.num_rows:
                # JSON keys can appear late in a file: these records lack the label (null, as if read whole).
                unlabelled.append((locate([0])[0], locate([table.num_rows - 1])[0], table.num_rows))
                table, is_target = table.slice(0, 0), pa.array([], pa.bool_())
            else:
                table, is_target = _labelled(path, table, locate, part, options, dead)
            block_rows.append(table.num_rows)
            masks.append(is_target)
            first = (table, is_target) if len(block_rows) == 1 else None
    except Exception as err:  # noqa: BLE001  (untrusted input: the file is one dead letter)
        unread = max(0, part.size - streams[0].consumed) if streams and part.size >= 0 else 0
        # Every record met counts: rows read, rows already dead letters (each one record), rows without label.
        read = sum(block_rows) + len(dead) + sum(n for _, _, n in unlabelled)
        empty = EventPartition(path, pa.table({}), pa.array([], pa.bool_()), [], part.name)
        return _left_out(empty, _lost_file(path, err, part.size, read, unread), err)
    if unlabelled:
        if not any(label in schema.names for schema in schemas):
            lost = _FileLost("missing_label_column", f"no column {label!r} in any record "
                             f"(columns: {', '.join(schemas[0].names)})", sum(n for _, _, n in unlabelled))
            empty = EventPartition(path, pa.table({}), pa.array([], pa.bool_()), [], part.name)
            return _left_out(empty, _lost_file(path, lost, part.size), lost)
        dead.extend(DeadLetter(path, "read", "malformed_row", f"{a} to {b}: no {label!r} in these {n:,} records",
                               member=a, records=n) for a, b, n in unlabelled)
    if streams and streams[0].trailing:
        dead.append(DeadLetter(path, "read", "trailing_data", streams[0].trailing))
    if len(block_rows) <= 1:
        table, is_target = first if first else (pa.table({}), pa.array([], pa.bool_()))
        return EventPartition(path, table, is_target, dead, part.name)
    is_target = pa.chunked_array(masks, pa.bool_()).combine_chunks()
    schema = None
    if not columns:  # the file's columns as its rows are written: the blocks' types, then its hive columns
        schema = _file_schema(schemas)
        if options.hive_partitioning:
            schema = with_hive_columns(schema.empty_table(), part.relative).schema
    return EventPartition(path, pa.table({}), is_target, dead, part.name, block_rows=tuple(block_rows),
                          schema=schema)


def _file_schema(schemas: list[pa.Schema]) -> pa.Schema:
    """One type per column over a file's blocks, as if read whole: Arrow's permissive promotion (null to any
    type, integers to doubles, struct fields merged), text where the blocks' types have none."""
    if all(schema == schemas[0] for schema in schemas):
        return schemas[0]
    types: dict[str, list[pa.DataType]] = {}
    for schema in schemas:
        for field in schema:
            seen = types.setdefault(field.name, [])
            if field.type not in seen:
                seen.append(field.type)
    fields = []
    for name, seen in types.items():
        try:
            unified = pa.unify_schemas([pa.schema([(name, t)]) for t in seen], promote_options="permissive")[0].type
        except pa.ArrowException:
            unified = pa.string()
        fields.append(pa.field(name, unified))
    return pa.schema(fields)


def event_blocks(part: EventRange, options: EventReadOptions, scan: EventPartition,
                 opener=None) -> Iterator[EventPartition]:
    """The second pass over a compressed log scan_events read in blocks: each block's rows with the file's
    column types (first_row: its first row's index in the file). Raises if the file reads differently now."""
    from shardmill.transforms.common.filesystem import default_opener

    fmt = format_of(part.path)
    schema = scan.schema

    def as_text(block_schema):
        # CSV text is read again as text where the file's type is text and this block inferred another: the
        # values as written ("007", "" rather than null), as a whole read gives. The label keeps its block's
        # parse: its mask was taken from it.
        if fmt == "jsonl":
            return ()
        return tuple(f.name for f in block_schema if f.name != options.label_column
                     and pa.types.is_string(schema.field(f.name).type) and f.type != pa.string())

    first_row = 0
    blocks = _compressed_blocks(part, fmt, options, opener or default_opener, None, [], [], as_text)
    for index, (table, locate) in enumerate(blocks):
        if fmt == "jsonl" and options.label_column not in table.column_names:
            continue  # rows without the label: dead letters of the first pass
        dead: list[DeadLetter] = []
        table, is_target = _labelled(part.path, table, locate, part, options, dead)
        table = _with_types(table, schema)
        if index >= len(scan.block_rows) or table.num_rows != scan.block_rows[index]:
            raise ValueError(f"{part.path}: block {index} reads {table.num_rows} rows now, "
                             f"{scan.block_rows[index] if index < len(scan.block_rows) else 0} before")
        yield EventPartition(part.path, table, is_target, [], part.name, first_row=first_row)
        first_row += table.num_rows


def _with_types(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A block's columns in the file's order and types (a column it lacks: nulls)."""
    if table.schema == schema:
        return table
    index = {name: i for i, name in enumerate(table.column_names)}
    columns = []
    for field in schema:
        i = index.get(field.name)
        if i is None:
            columns.append(pa.nulls(table.num_rows, field.type))
        elif table.schema.field(i).type == field.type:
            columns.append(table.column(i))
        elif pa.types.is_string(field.type) and not pa.types.is_nested(table.schema.field(i).type):
            columns.append(pc.cast(table.column(i), field.type))
        else:
            # Widening only (null, integers to doubles, struct fields added): unchecked, so a large integer rounds
            # to its nearest double as the parser would have read it.
            columns.append(table.column(i).cast(field.type, safe=False))
    return pa.Table.from_arrays(columns, schema=schema)
