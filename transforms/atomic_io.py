"""Atomic output through Beam's FileSystems (local, gs://, s3://).

A file is written under a temporary name beside its final path and renamed
into place, so a reader never sees a half-written file (ARCHITECTURE.md,
rule "writes are atomic").
"""

from __future__ import annotations

import io
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems


def _temp_name(path: str) -> str:
    directory, name = path.rsplit("/", 1) if "/" in path else ("", path)
    temp = f".{name}.tmp-{uuid.uuid4().hex[:12]}"
    return f"{directory}/{temp}" if directory else temp


def write_atomically(path: str, write) -> None:
    """Calls write(file) on a temporary file beside path, then renames it to path, replacing it.

    The rename replaces an existing file in one step (POSIX rename; on object
    stores a copy, which replaces the object atomically): deleting first would
    leave a moment, and after a crash a state, with no file at all.
    """
    temp = _temp_name(path)
    with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        write(f)
    FileSystems.rename([temp], [path])


def write_bytes_atomically(path: str, data: bytes) -> None:
    """Writes data to path: temporary name first, then a rename (replacing path)."""
    write_atomically(path, lambda f: f.write(data))


def write_parquet_atomically(path: str, table: pa.Table, **write_options) -> int:
    """Writes table as a Parquet file at path atomically; returns the file's size in bytes."""
    sink = io.BytesIO()
    pq.write_table(table, sink, **write_options)
    data = sink.getvalue()
    write_bytes_atomically(path, data)
    return len(data)
