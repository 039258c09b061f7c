"""Event partitions: a whole event file, or a record-aligned range of a large one, and its name.

A partition is named by its file's path relative to the inputs' common root
directory ("2026-11-01/part-0.parquet"), "#i" appended for range i of a split
file: that name is `_partition` in the output and keys every random draw, so
files with one basename in different folders are different partitions.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardmill.transforms.common.discovery import GLOB_CHARS
from shardmill.transforms.events.formats import compression_of, format_of
from shardmill.transforms.events.record_ends import SCAN_BLOCK_BYTES, RecordEndScanner


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
    size: int = -1  # bytes of the file (or of its share for a range), -1 unknown; estimates what a loss costs

    @property
    def name(self) -> str:
        base = self.relative or posixpath.basename(self.path)
        return base if self.count == 1 else f"{base}#{self.index}"


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
    if item.endswith("/"):
        return item.rstrip("/")
    from apache_beam.io.filesystems import FileSystems

    # An object store has no directories: a name that is no object is a prefix, its own root (like a local
    # directory), so `s3://b/logs` names its files as `logs/` on disk does.
    return posixpath.dirname(item) if FileSystems.exists(item) else item


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


def _text_ranges(path: str, f, size: int, fmt: str, max_bytes: int, relative: str) -> list[EventRange]:
    """Record-aligned byte ranges of about max_bytes, the file scanned once in blocks."""
    scanner = RecordEndScanner(fmt)
    cuts, first_lines, nominal, header_end = [0], [1], max_bytes, -1
    while block := f.read(SCAN_BLOCK_BYTES):
        ends, newlines = scanner.feed(block)
        if scanner.why:
            return [EventRange(path, relative=relative, not_split=scanner.why, size=size)]
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
                       relative=relative, size=b - a)
            for i, (a, b, line) in enumerate(zip(cuts[:-1], cuts[1:], first_lines))]


def split_file(path: str, size: int, max_bytes: int, opener=None, root: str = "") -> list[EventRange]:
    """The partitions of one event file: the whole file, or ranges of about max_bytes.

    root: the inputs' common root (common_root), which partition names are relative to.
    """
    from shardmill.transforms.common.filesystem import default_opener

    relative = relative_name(path, root) if root else ""
    whole = [EventRange(path, relative=relative, size=size)]
    codec = compression_of(path)
    if codec:
        return [EventRange(path, relative=relative, size=size,
                           not_split=f"{codec}-compressed: a compressed stream is read whole")]
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
            groups = max(1, metadata.num_row_groups)
            return [EventRange(path, i, len(cuts) - 1, first_group=a, end_group=b, relative=relative,
                               size=size * (b - a) // groups)
                    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]
    except (OSError, ValueError, pa.ArrowException):
        return whole  # reading it whole reports what is wrong
