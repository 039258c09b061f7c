"""Stage 2, index: one source file into a table with one row per chunk (the Beam transforms are in graph.py).

A source is a loose `.gz` file (one chunk) or an uncompressed `.tar` archive
(one chunk per `.gz` member; directories, links, `LICENSE` and other non-`.gz`
members are skipped and counted). A chunk's identity is (sort_key, chunk):
the source's basename and the ordinal of the chunk among the source's `.gz`
members, bad ones included, so identities never shift when a member goes bad.

Plain Python + pyarrow; files are opened through an `opener` callable so the
Beam transform can pass Beam's FileSystems (gs://, s3://) and tests can pass
`open`.
"""

from __future__ import annotations

import dataclasses
import posixpath
import tarfile
from typing import BinaryIO

import pyarrow as pa

from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.common.filesystem import Opener, default_opener
from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES, ChunkError, ChunkSpan, count_records
from shardmill.transforms.lc0.record_format import COMPRESSED_ARCHIVE_SUFFIXES, SOURCE_SUFFIXES

# One row per chunk. Every later stage plans from these columns alone.
INDEX_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),  # full path of the source file
        pa.field("sort_key", pa.string(), nullable=False),  # source basename; newest sorts last
        pa.field("chunk", pa.int32(), nullable=False),  # ordinal among the source's .gz members
        pa.field("member", pa.string(), nullable=False),  # tar member name ("" for a loose .gz)
        pa.field("offset", pa.int64(), nullable=False),  # byte offset of the gzip data in source
        pa.field("length", pa.int64(), nullable=False),  # compressed bytes
        pa.field("num_records", pa.int64(), nullable=False),
        pa.field("record_size", pa.int32(), nullable=False),
        pa.field("version", pa.int32(), nullable=False),  # lc0 record version
        pa.field("verified", pa.bool_(), nullable=False),  # count from full inflation (CRC checked)
        pa.field("format", pa.string(), nullable=False),  # record format, "lc0"
    ]
)


@dataclasses.dataclass
class SourceIndex:
    """The index of one source: chunk rows, dead letters, skipped members."""

    table: pa.Table
    dead_letters: list[DeadLetter]
    skipped_members: int = 0


class _Rows:
    """Column lists of INDEX_SCHEMA being filled for one source."""

    def __init__(self, path: str):
        self.path = path
        self.sort_key = posixpath.basename(path)
        self.columns: dict[str, list] = {name: [] for name in INDEX_SCHEMA.names}

    def add(self, chunk: int, member: str, span: ChunkSpan, count) -> None:
        row = {
            "source": self.path,
            "sort_key": self.sort_key,
            "chunk": chunk,
            "member": member,
            "offset": span.offset,
            "length": span.length,
            "num_records": count.num_records,
            "record_size": count.record_size,
            "version": count.version,
            "verified": count.verified,
            "format": "lc0",
        }
        for name, value in row.items():
            self.columns[name].append(value)

    def table(self) -> pa.Table:
        return pa.Table.from_pydict(self.columns, schema=INDEX_SCHEMA)


def _index_chunk(rows, dead, chunk, member, span, method, expected_version, max_bytes):
    try:
        count = count_records(span, method, expected_version, max_bytes)
    except ChunkError as err:
        dead.append(DeadLetter(rows.path, "index", err.reason, err.detail, member, chunk))
        return
    except OSError as err:
        dead.append(DeadLetter(rows.path, "index", "unreadable", str(err), member, chunk))
        return
    rows.add(chunk, member, span, count)


def _is_chunk_member(info: tarfile.TarInfo) -> bool:
    name = posixpath.basename(info.name)
    return info.isfile() and name != "LICENSE" and name.endswith(".gz")


def _check_archive_end(fileobj: BinaryIO, tar: tarfile.TarFile, path: str) -> DeadLetter | None:
    """tarfile stops quietly at a bad header after the first; find out whether it did.

    A clean archive ends at a zero block (or exactly at end of file).
    """
    fileobj.seek(tar.offset)
    block = fileobj.read(tarfile.BLOCKSIZE)
    if block == b"" or block == tarfile.NUL * tarfile.BLOCKSIZE:
        return None
    if len(block) < tarfile.BLOCKSIZE:
        detail = f"archive ends inside a tar header at byte {tar.offset}"
    else:
        detail = f"invalid tar header at byte {tar.offset}; later members are unreadable"
    return DeadLetter(path, "index", "bad_archive", detail)


def _index_tar(path, fileobj, method, expected_version, max_bytes) -> SourceIndex:
    rows, dead = _Rows(path), []
    skipped = 0
    try:
        tar = tarfile.open(fileobj=fileobj, mode="r:")
    except tarfile.TarError as err:
        dead.append(DeadLetter(path, "index", "bad_archive", f"not a readable tar archive ({err})"))
        return SourceIndex(rows.table(), dead)
    chunk = 0
    try:
        while True:
            info = tar.next()
            if info is None:
                break
            if not _is_chunk_member(info):
                skipped += 1
                continue
            span = ChunkSpan(fileobj, info.offset_data, info.size)
            _index_chunk(rows, dead, chunk, info.name, span, method, expected_version, max_bytes)
            chunk += 1
        end_error = _check_archive_end(fileobj, tar, path)
        if end_error:
            dead.append(end_error)
    except (tarfile.TarError, EOFError) as err:
        dead.append(DeadLetter(path, "index", "bad_archive", f"after member {chunk - 1}: {err}"))
    return SourceIndex(rows.table(), dead, skipped)


def index_source(
    path: str,
    size: int,
    method: str = "scan",
    expected_version: int = 0,
    opener: Opener = default_opener,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> SourceIndex:
    """Indexes one source file. Never raises for bad data: it becomes dead letters."""
    rows = _Rows(path)
    lowered = path.lower()  # suffixes match whatever their case, as discovery matches them
    if lowered.endswith(COMPRESSED_ARCHIVE_SUFFIXES):
        detail = (f"{posixpath.basename(path)!r} is a gzip-compressed tar archive, whose members can only be "
                  "reached by inflating everything before them; decompress it to a .tar (gunzip) first")
        return SourceIndex(rows.table(), [DeadLetter(path, "index", "compressed_archive", detail)])
    if not lowered.endswith(SOURCE_SUFFIXES):
        detail = f"{posixpath.basename(path)!r} is neither a .gz chunk nor a .tar archive"
        return SourceIndex(rows.table(), [DeadLetter(path, "index", "unsupported_file", detail)])
    try:
        with opener(path) as fileobj:
            if lowered.endswith(".tar"):
                return _index_tar(path, fileobj, method, expected_version, max_chunk_bytes)
            dead: list[DeadLetter] = []
            _index_chunk(rows, dead, 0, "", ChunkSpan(fileobj, 0, size), method, expected_version, max_chunk_bytes)
            return SourceIndex(rows.table(), dead)
    except OSError as err:
        return SourceIndex(rows.table(), [DeadLetter(path, "index", "unreadable", str(err))])
