"""Event-log sources for label sampling: Parquet, CSV/TSV, JSON lines.

`read_events(part, options)` reads one partition (a whole file, or a range
of a large one) into an Arrow table with every input column, plus the
boolean target mask, and returns malformed rows as dead letters naming the
file and where in it: `line N` for text formats (the file's physical line,
1-based, header included, quoted newlines counted), `row N` for Parquet (the
0-based row of the file). A file that can't be read at all, has no label
column, or whose label column is not a scalar, is one dead letter; the run
continues.

A partition is named by its file's path relative to the inputs' common root
directory ("2026-11-01/part-0.parquet"), "#i" appended for range i of a split
file: that name is `_partition` in the output and keys every random draw, so
files with one basename in different folders are different partitions.

CSV/TSV columns come from the header row, or from `column_names` for
headerless files; types are inferred unless declared. When inference meets a
value it can't convert later in the file, the file is re-read with every
undeclared column as a string (so no row is dropped for it).

Labels compare as strings with the configured target values: numbers by
their shortest form (1.0 is "1"); booleans match "true"/"1" when true and
"false"/"0" when false (any case).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import posixpath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from shardmill.transforms.chunk_index import DeadLetter
from shardmill.transforms.discovery import GLOB_CHARS

FORMATS = ("parquet", "csv", "tsv", "jsonl")
_NEWLINE, _CR, _QUOTE = 10, 13, 34


def _delimiter(fmt: str) -> str:
    return "," if fmt == "csv" else "\t"


@dataclasses.dataclass(frozen=True)
class EventReadOptions:
    """What to read from event files, as plain values (they travel to workers)."""

    label_column: str
    target_values: tuple[str, ...] = ("1",)
    column_names: tuple[str, ...] = ()  # text files without a header row: their columns, in order
    column_types: tuple[tuple[str, str], ...] = ()  # (column, Arrow type name) declared for text files

    def declared_types(self) -> dict[str, pa.DataType]:
        return {name: arrow_type(alias) for name, alias in self.column_types}


def arrow_type(alias: str) -> pa.DataType:
    """An Arrow type from its name ("int64", "string", "double", "bool", "timestamp[ms]", ...)."""
    try:
        return pa.type_for_alias(alias)
    except ValueError:
        raise ValueError(f"unknown Arrow type {alias!r} (e.g. int64, double, string, bool, timestamp[ms])") from None


@dataclasses.dataclass(frozen=True)
class EventRange:
    """A partition: a whole event file, or a contiguous range of a large one.

    Parquet ranges are runs of row groups; text ranges are byte ranges that
    start and end on record boundaries (first_line: the file's 1-based line
    number of the range's first line; header_end: bytes of the file's first
    record, put back before later ranges when it is the header).
    """

    path: str
    index: int = 0
    count: int = 1
    first_group: int = 0
    end_group: int = -1
    start: int = 0
    end: int = -1
    first_line: int = 1
    header_end: int = 0
    relative: str = ""  # the path relative to the inputs' root; "" for the basename
    not_split: str = ""  # why a file over the partition size is one partition anyway

    @property
    def name(self) -> str:
        base = self.relative or posixpath.basename(self.path)
        return base if self.count == 1 else f"{base}#{self.index}"


@dataclasses.dataclass
class EventPartition:
    path: str
    table: pa.Table  # every input column, rows in file order (bad rows left out)
    is_target: pa.Array  # bool per row of table
    dead_letters: list[DeadLetter]
    name: str = ""  # EventRange.name

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


# ---- partition names ----------------------------------------------------------


def input_root(item: str) -> str:
    """The directory an (absolute, normalised) input's files are named relative to.

    A directory is its own root; a glob's root is the directory before its
    first pattern component; a file's root is its directory.
    """
    head, sep, _ = item.partition("://")
    prefix = f"{head}://" if sep else ""
    parts = (item[len(prefix):] if sep else item).split("/")
    for i, part in enumerate(parts):
        if any(c in part for c in GLOB_CHARS):
            return prefix + "/".join(parts[:i]) or "/"
    if not sep:
        return item if os.path.isdir(item) else posixpath.dirname(item)
    return item.rstrip("/") if item.endswith("/") else posixpath.dirname(item)


def common_root(inputs: list[str]) -> str:
    """The deepest directory holding every input's root ("" when they share none, e.g. two buckets)."""
    roots = [input_root(item).rstrip("/") + "/" for item in inputs]
    if not roots:
        return ""
    common = roots[0]
    for root in roots[1:]:
        while not root.startswith(common):
            common = common[: common.rstrip("/").rfind("/") + 1]
            if not common or common.endswith("://"):
                return ""
    return common


def relative_name(path: str, root: str) -> str:
    """path below root (root as common_root returns it), or the whole path when it is not below."""
    return path[len(root):] if root and path.startswith(root) else path


# ---- splitting text at record boundaries -----------------------------------------


SCAN_BLOCK_BYTES = 64 << 20  # a large text file is scanned for record ends this much at a time


class RecordEndScanner:
    """Finds the newlines that end records, block by block (memory: one block, not the file).

    JSON lines: every newline (a JSON value holds no raw newline). CSV/TSV: a
    newline ends a record when an even number of quotes precede it, which is
    Arrow's parse only if every quote opens a field (after a delimiter, a
    line end, the file's start, or a closing quote: a doubled quote) or
    closes one (before a delimiter, a line end, the file's end, or a quote);
    a file with a quote anywhere else can't be split (`why` says where).
    """

    def __init__(self, fmt: str):
        self._quoted = fmt in ("csv", "tsv")
        self._fences = np.array([ord(_delimiter(fmt)), _NEWLINE, _CR, _QUOTE], np.uint8)
        self.offset = 0  # bytes scanned
        self.lines = 0  # newlines scanned
        self.why = ""
        self._parity = 0  # quotes scanned, mod 2
        self._last_byte = _NEWLINE  # the byte before the block (the file's start counts as a line end)
        self._close_at_end = -1  # a closing quote ending the last block, whose next byte is still to see

    def feed(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(absolute offsets just past the record-ending newlines of this block, all its newlines' offsets)."""
        buf = np.frombuffer(data, np.uint8)
        newlines = np.flatnonzero(buf == _NEWLINE)
        ends = newlines
        if self._quoted and not self.why:
            if self._close_at_end >= 0 and len(buf) and buf[0] not in self._fences:
                self._fail(self._close_at_end, 1 + self.lines)  # the quote ended the previous block
            self._close_at_end = -1
            quotes = np.flatnonzero(buf == _QUOTE)
            if len(quotes) and not self.why:
                opening = quotes[self._parity :: 2]
                closing = quotes[1 - self._parity :: 2]
                before = np.where(opening > 0, buf[np.maximum(opening - 1, 0)], self._last_byte)
                after_last = closing + 1 == len(buf)
                after = buf[np.minimum(closing + 1, len(buf) - 1)]
                bad = np.concatenate([opening[~np.isin(before, self._fences)],
                                      closing[~after_last & ~np.isin(after, self._fences)]])
                if len(bad):
                    at = int(bad.min())
                    self._fail(self.offset + at, 1 + self.lines + int(np.searchsorted(newlines, at)))
                elif len(closing) and after_last[-1]:
                    self._close_at_end = self.offset + int(closing[-1])
            if not self.why:
                outside = (self._parity + np.searchsorted(quotes, newlines)) % 2 == 0
                ends = newlines[outside]
                self._parity = (self._parity + len(quotes)) % 2
        if len(buf):
            self._last_byte = int(buf[-1])
        absolute_newlines = newlines + self.offset
        result = (ends + 1 + self.offset) if not self.why else np.zeros(0, np.int64)
        self.offset += len(buf)
        self.lines += len(newlines)
        return result, absolute_newlines

    def _fail(self, at: int, line: int) -> None:
        self.why = f"line {line}: a quote inside an unquoted field (byte {at})"


def _text_ranges(path: str, f, size: int, fmt: str, max_bytes: int, relative: str) -> list[EventRange]:
    """Record-aligned byte ranges of about max_bytes, the file scanned once in blocks."""
    scanner = RecordEndScanner(fmt)
    cuts, first_lines, nominal, header_end = [0], [1], max_bytes, -1
    while block := f.read(SCAN_BLOCK_BYTES):
        ends, newlines = scanner.feed(block)
        if scanner.why:
            return [EventRange(path, relative=relative, not_split=scanner.why)]
        if header_end < 0 and len(ends):
            header_end = int(ends[0])
        while True:  # the first record end at or after each nominal cut, never the file's end
            at = int(np.searchsorted(ends, max(nominal, cuts[-1] + 1)))
            if at >= len(ends) or ends[at] >= size:
                break
            cuts.append(int(ends[at]))
            # The range starts after every newline before its first byte.
            first_lines.append(1 + scanner.lines - len(newlines) + int(np.searchsorted(newlines, ends[at])))
            nominal += max_bytes
            while nominal <= cuts[-1]:
                nominal += max_bytes
    cuts.append(size)
    header_end = header_end if header_end >= 0 else size
    return [EventRange(path, i, len(cuts) - 1, start=a, end=b, first_line=line, header_end=header_end,
                       relative=relative)
            for i, (a, b, line) in enumerate(zip(cuts[:-1], cuts[1:], first_lines))]


def split_file(path: str, size: int, max_bytes: int, opener=None, root: str = "") -> list[EventRange]:
    """The partitions of one event file: the whole file, or ranges of about max_bytes.

    root: the inputs' common root (common_root), which partition names are relative to.
    """
    from shardmill.transforms.chunk_index import default_opener

    relative = relative_name(path, root) if root else ""
    whole = [EventRange(path, relative=relative)]
    if size <= max_bytes:
        return whole
    try:
        fmt = format_of(path)
        with (opener or default_opener)(path) as f:
            if fmt != "parquet":
                return _text_ranges(path, f, size, fmt, max_bytes, relative)
            metadata = pq.ParquetFile(f).metadata
            cuts, acc = [0], 0
            for g in range(metadata.num_row_groups):
                acc += metadata.row_group(g).total_byte_size
                if acc >= max_bytes and g + 1 < metadata.num_row_groups:
                    cuts.append(g + 1)
                    acc = 0
            cuts.append(metadata.num_row_groups)
            return [EventRange(path, i, len(cuts) - 1, first_group=a, end_group=b, relative=relative)
                    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
    except (OSError, ValueError, pa.ArrowException):
        return whole  # reading it whole reports what is wrong


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
                decoded = self._text.decode("utf-8", errors="replace")
                reader = csv.reader(io.StringIO(decoded, newline=""), delimiter=_delimiter(self._fmt), quotechar='"',
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
              dead: list[DeadLetter], columns: list[str] | None):
    """(table, location of table rows) for CSV/TSV text."""
    skipped: dict[int, str] = {}

    def on_invalid(row):
        skipped[row.number] = f"{row.actual_columns} fields, expected {row.expected_columns}"
        return "skip"

    header = not options.column_names
    # Single-threaded parsing is what lets Arrow report the record number of a bad row.
    read = pacsv.ReadOptions(column_names=list(options.column_names) or None, use_threads=False)
    parse = pacsv.ParseOptions(delimiter=_delimiter(fmt), invalid_row_handler=on_invalid,
                               newlines_in_values=True)
    declared = options.declared_types()
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
    return table, lambda rows: [f"line {n}" for n in lines.lines_of_rows(rows, set(skipped), header)]


def _read_jsonl(path: str, text: bytes, lines: _TextLines, dead: list[DeadLetter]):
    """(table, location of table rows) for JSON lines."""
    try:
        table = pajson.read_json(io.BytesIO(text))
        return table, lambda rows: [f"line {lines.file_line(lines.record_starts()[r])}" for r in rows]
    except pa.ArrowInvalid:
        pass  # find the bad lines one by one
    values, row_lines = [], []
    for number, raw in enumerate(text.split(b"\n"), start=1):  # only "\n" ends a line (not U+2028 and kin)
        if not raw.strip():
            continue
        line = raw.decode("utf-8", errors="replace")
        where = f"line {lines.file_line(number)}"
        try:
            value = json.loads(line)
        except ValueError as err:
            dead.append(DeadLetter(path, "read", "malformed_row", f"{where}: {err}", member=where))
            continue
        if not isinstance(value, dict):
            dead.append(DeadLetter(path, "read", "malformed_row", f"{where}: not a JSON object", member=where))
            continue
        values.append(value)
        row_lines.append(where)
    return pa.Table.from_pylist(values), lambda rows: [row_lines[r] for r in rows]


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
    lines = _TextLines(text, fmt, part.first_line, header.count(b"\n"))
    if fmt == "jsonl":
        return _read_jsonl(path, text, lines, dead)
    return _read_csv(path, text, fmt, options, lines, dead, columns)


def _read_parquet(f, part: EventRange, columns: list[str] | None, label_column: str):
    parquet = pq.ParquetFile(f)
    if columns and label_column not in parquet.schema_arrow.names:
        columns = None  # let the missing-column check report it
    metadata = parquet.metadata
    end = metadata.num_row_groups if part.end_group < 0 else part.end_group
    first_row = sum(metadata.row_group(g).num_rows for g in range(part.first_group))
    table = parquet.read_row_groups(list(range(part.first_group, end)), columns=columns)
    return table, lambda rows: [f"row {first_row + r}" for r in rows]


def is_label_type(t: pa.DataType) -> bool:
    """Labels are scalars that compare as strings: integers, floats, booleans, strings (dictionary-encoded too)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))


def target_mask(labels, target_values) -> pa.Array:
    """Which labels are targets (see the module doc for how types compare)."""
    if pa.types.is_dictionary(labels.type):
        labels = labels.cast(labels.type.value_type)
    if pa.types.is_boolean(labels.type):
        wanted = {str(v).lower() for v in target_values}
        true_is, false_is = bool(wanted & {"true", "1"}), bool(wanted & {"false", "0"})
        mask = labels if true_is else pc.invert(labels)
        mask = mask if true_is != false_is else pa.array([true_is] * len(labels), pa.bool_())
    else:
        mask = pc.is_in(pc.cast(labels, pa.string()), value_set=pa.array([str(v) for v in target_values]))
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def read_events(part: str | EventRange, options: EventReadOptions, opener=None,
                labels_only: bool = False) -> EventPartition:
    """One partition (a file, or an EventRange of one); never raises for bad data (it becomes dead letters).

    labels_only: materialise only the label column (Parquet reads just that
    column; CSV still tokenizes every line; JSON lines parses everything).
    """
    from shardmill.transforms.chunk_index import default_opener

    part = part if isinstance(part, EventRange) else EventRange(part)
    path = part.path
    dead: list[DeadLetter] = []
    label = options.label_column
    empty = EventPartition(path, pa.table({}), pa.array([], pa.bool_()), dead, part.name)
    columns = [label] if labels_only else None
    try:
        fmt = format_of(path)
        with (opener or default_opener)(path) as f:
            if fmt == "parquet":
                table, locate = _read_parquet(f, part, columns, label)
            else:
                table, locate = _read_text(path, f, part, fmt, options, dead, columns)
    except (OSError, ValueError, pa.ArrowException) as err:
        dead.append(DeadLetter(path, "read", "unreadable", str(err)))
        return empty
    if label not in table.column_names:
        dead.append(DeadLetter(path, "read", "missing_label_column",
                               f"no column {label!r} (columns: {', '.join(table.column_names)})"))
        return empty
    labels = table[label]
    if not is_label_type(labels.type):
        dead.append(DeadLetter(path, "read", "unsupported_label_type",
                               f"column {label!r} is {labels.type}: labels must be strings, integers, floats "
                               "or booleans"))
        return empty
    missing = pc.is_null(labels)
    if pc.any(missing).as_py():
        rows = pc.indices_nonzero(missing).to_pylist()
        for where in locate(rows):
            dead.append(DeadLetter(path, "read", "malformed_row", f"{where}: {label} is null", member=where))
        table = table.filter(pc.invert(missing))
        labels = table[label]
    return EventPartition(path, table, target_mask(labels, options.target_values), dead, part.name)
