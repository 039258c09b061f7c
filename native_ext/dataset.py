"""An output directory as untrusted input: where it is, its manifest checked, its shards resolved.

A dataset may come from anyone, so nothing in it is believed before it is
checked: the manifest's types, ranges and sums; every shard path (relative,
normalised, inside the directory — on a local disk also after following
links — and a regular file, so a FIFO is never opened); and every shard's
row and row-group counts against its own Parquet footer. Only then does the
native reader see a number from it. One resolver gives the path that is
checksummed and the path that is read. Every failure is an OutputError
naming the file and the field.

Paths are taken as users write them: relative, `./x`, `x/`, `~/x`, and URIs
(`file://`, `gs://`, `s3://`, anything pyarrow.fs knows).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import posixpath
import re
import stat

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from shardmill.core.errors import OutputError
from shardmill.core.output_contract import (MANIFEST_NAME, MANIFEST_NAMES, READABLE_FORMAT_VERSIONS,
                                            generation_manifest_path)
from shardmill.native_ext.remote import RemoteOptions, child_uri, filesystem_of

MAX_SHARDS = 1_000_000
MAX_ROW_GROUPS_PER_SHARD = 1_000_000
MAX_ROWS = 1 << 48  # far beyond any dataset; keeps every count exact in int64 arithmetic
MAX_MANIFEST_BYTES = 1 << 30
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
REMOTE_CHECK_THREADS = 16  # shards of a remote dataset checked at once (each check waits on round trips)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A checked output directory: its manifest and, per shard, the path the native reader opens."""

    location: str  # as the native reader takes it: an absolute local path or a URI
    manifest: dict
    shard_paths: list[str]
    columns: list[str]  # the columns to read: as asked, or the output's defaults (default_columns)
    typed: dict[str, np.dtype]  # fixed-size binary columns served as arrays of a dtype (typed_columns)
    native: list[str]  # columns the native core arranges (servable, no nulls in any shard), in schema order


DEFAULT_COLUMNS = "default"  # open_dataset(columns=DEFAULT_COLUMNS): the output's default_columns


def default_columns(manifest: dict, schema: pa.Schema) -> list[str]:
    """The columns a reader serves when none are named: lc0 its records (`frame`), every other kind every
    column of its shards (tokens: the samples, their sample and epoch numbers, and a blend's corpus columns)."""
    if manifest.get("record_format", "lc0") == "lc0":
        return ["frame"]
    return list(schema.names)


# Token dtypes a Megatron .bin holds (and the widened dtypes of blends and padded samples).
_TOKEN_DTYPES = ("uint8", "int8", "int16", "uint16", "int32", "uint32", "int64")


def typed_columns(manifest: dict, schema: pa.Schema) -> dict[str, np.dtype]:
    """Fixed-size binary columns that hold arrays of a dtype (token samples), as served: name -> dtype.

    From the manifest's record description, checked against the shard schema (OutputError otherwise)."""
    if manifest.get("record_format") != "megatron_gpt_samples":
        return {}
    record = manifest.get("record")
    dtype = record.get("dtype") if isinstance(record, dict) else None
    if dtype not in _TOKEN_DTYPES:
        raise OutputError(f"manifest: record.dtype {dtype!r} is not a token dtype ({', '.join(_TOKEN_DTYPES)})")
    dtype = np.dtype(dtype)
    if "tokens" in schema.names:
        type_ = schema.field("tokens").type
        if not pa.types.is_fixed_size_binary(type_) or type_.byte_width % dtype.itemsize:
            raise OutputError(f"manifest: column 'tokens' is {type_}, not whole {dtype} tokens")
    return {"tokens": dtype}


def locate(path: str, remote: RemoteOptions = RemoteOptions()) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, base path on it, location for the native reader) of a directory path or URI."""
    if not isinstance(path, (str, os.PathLike)):
        raise OutputError(f"dataset path must be a string, got {type(path).__name__}")
    path = os.fspath(path)
    if "://" in path and not path.startswith("file://"):
        try:
            fs, base = filesystem_of(path, remote)
        except (ValueError, TypeError, OSError, pa.ArrowException) as err:
            raise OutputError(f"{path!r}: not a dataset location ({err})") from None
        return fs, base.rstrip("/"), path.rstrip("/")
    if path.startswith("file://"):
        path = path[len("file://"):]
    base = os.path.abspath(os.path.expanduser(path))
    return pafs.LocalFileSystem(), base, base


def _fail(where: str, what: str) -> OutputError:
    return OutputError(f"{where}: {what}")


def _integer(value, where: str, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"{field} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _fail(where, f"{field} {value} is outside {lo}..{hi}")
    return value


def _read_manifest(fs: pafs.FileSystem, base: str, shown: str, names=MANIFEST_NAMES) -> tuple[dict, str]:
    for name in names:
        manifest_path = posixpath.join(base, name)
        try:
            info = fs.get_file_info(manifest_path)
            if info.type == pafs.FileType.NotFound:
                continue
            if info.type != pafs.FileType.File:
                raise _fail(manifest_path, "not a regular file")
            if info.size is not None and info.size > MAX_MANIFEST_BYTES:
                raise _fail(manifest_path, f"{info.size} bytes, more than a manifest can be")
            with fs.open_input_stream(manifest_path) as f:
                data = f.read()
        except (OSError, pa.ArrowException) as err:
            raise _fail(manifest_path, f"cannot be read ({err})") from None
        try:
            manifest = json.loads(data)
        except (ValueError, RecursionError) as err:
            raise _fail(manifest_path, f"not valid JSON ({str(err)[:200]})") from None
        if not isinstance(manifest, dict):
            raise _fail(manifest_path, f"must be a JSON object, got {type(manifest).__name__}")
        return manifest, manifest_path
    if names != MANIFEST_NAMES:
        raise OutputError(f"{shown}: its manifest {names[0]} is missing")
    raise OutputError(f"{shown!r} has no {MANIFEST_NAME}: not a finished shardmill output")


def _check_shard_entry(shard, index: int, manifest_path: str) -> None:
    where = f"{manifest_path}: shards[{index}]"
    if not isinstance(shard, dict):
        raise _fail(where, f"must be an object, got {type(shard).__name__}")
    for field in ("path", "rows", "row_groups", "bytes", "sha256"):
        if field not in shard:
            raise _fail(where, f"has no {field!r}")
    rows = _integer(shard["rows"], where, "rows", 0, MAX_ROWS)
    groups = shard["row_groups"]
    if not isinstance(groups, list) or len(groups) > MAX_ROW_GROUPS_PER_SHARD:
        raise _fail(where, f"row_groups must be a list of at most {MAX_ROW_GROUPS_PER_SHARD} counts")
    for g, count in enumerate(groups):
        _integer(count, where, f"row_groups[{g}]", 0, MAX_ROWS)
    if sum(groups) != rows:
        raise _fail(where, f"row_groups add up to {sum(groups)}, rows says {rows}")
    _integer(shard["bytes"], where, "bytes", 0, 1 << 60)
    if not isinstance(shard["sha256"], str) or not SHA256_RE.match(shard["sha256"]):
        raise _fail(where, "sha256 must be 64 lowercase hex digits")


def check_manifest(manifest: dict, manifest_path: str) -> None:
    """Types, ranges and sums of everything the reader uses; OutputError naming the field."""
    version = manifest.get("format_version")
    if isinstance(version, bool) or version not in READABLE_FORMAT_VERSIONS:
        raise _fail(manifest_path, f"format_version {version!r}, this reader reads "
                                   f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}")
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not 1 <= len(shards) <= MAX_SHARDS:
        raise _fail(manifest_path, f"shards must be a list of 1..{MAX_SHARDS} entries")
    if "num_shards" in manifest and manifest["num_shards"] != len(shards):
        raise _fail(manifest_path, f"num_shards {manifest['num_shards']!r} but {len(shards)} shards are listed")
    for i, shard in enumerate(shards):
        _check_shard_entry(shard, i, manifest_path)
    if sum(s["rows"] for s in shards) > MAX_ROWS:
        raise _fail(manifest_path, "rows add up to more than a dataset can hold")
    paths = [s["path"] for s in shards]
    if len(set(map(str, paths))) != len(paths):
        raise _fail(manifest_path, "two shards have the same path")


def _resolve_shard(fs: pafs.FileSystem, base: str, location: str, relative, where: str) -> tuple[str, str]:
    """(path on fs, path or URI for the native reader) of a shard; OutputError unless it is inside the dataset."""
    if not isinstance(relative, str) or not relative:
        raise _fail(where, "path must be a non-empty string")
    parts = relative.split("/")
    if (relative.startswith("/") or "\\" in relative or "://" in relative or "\0" in relative
            or any(part in ("", ".", "..") for part in parts)):
        raise _fail(where, f"path {relative!r} must be relative and normalised, inside the dataset directory")
    on_fs = posixpath.join(base, relative)
    if isinstance(fs, pafs.LocalFileSystem):
        real_base, real = os.path.realpath(base), os.path.realpath(on_fs)
        if os.path.commonpath([real_base, real]) != real_base:
            raise _fail(where, f"path {relative!r} leads outside the dataset directory (through a link)")
        try:
            mode = os.stat(real).st_mode
        except OSError:
            raise _fail(where, f"shard {on_fs} is missing") from None
        if not stat.S_ISREG(mode):
            raise _fail(where, f"shard {on_fs} is not a regular file")
        return on_fs, on_fs
    return on_fs, child_uri(location, relative)


def servable(type_: pa.DataType) -> bool:
    """Column types the native core arranges: fixed_size_binary and fixed-width integers and floats (without
    nulls; every other column is served through Arrow, arrow_columns.py)."""
    return (pa.types.is_fixed_size_binary(type_) or pa.types.is_integer(type_)
            or pa.types.is_float32(type_) or pa.types.is_float64(type_))


def _check_footer(fs: pafs.FileSystem, path: str, shard: dict, where: str) -> tuple[pa.Schema, set[str]]:
    """Checks a shard's footer against the manifest; returns its schema and the top-level columns that may
    hold nulls (a null count above 0, or none recorded, in any row group)."""
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            metadata, schema = parquet.metadata, parquet.schema_arrow
            counts = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
            nullable = set()
            for g in range(metadata.num_row_groups):
                group = metadata.row_group(g)
                for c in range(group.num_columns):
                    chunk = group.column(c)
                    stats = chunk.statistics
                    if stats is None or not stats.has_null_count or stats.null_count > 0:
                        nullable.add(chunk.path_in_schema.split(".")[0])
    except (OSError, pa.ArrowException, ValueError) as err:
        raise _fail(where, f"shard {path} has no readable Parquet footer ({err})") from None
    if counts != shard["row_groups"]:
        raise _fail(where, f"shard {path} has {len(counts)} row groups, the manifest says "
                           f"{len(shard['row_groups'])} (footer: {sum(counts)} rows, manifest: {shard['rows']}; "
                           "the row-group sizes differ)")
    return schema, nullable


def _check_columns(path: str, schema: pa.Schema, columns: list[str], first_schema: pa.Schema | None) -> None:
    """Each column to read is in the shard, and typed as in the first shard."""
    for name in columns:
        if name not in schema.names:
            raise OutputError(f"shard {path} has no column {name!r} (columns: {', '.join(schema.names)})")
        if schema.get_all_field_indices(name) != [schema.get_field_index(name)]:
            raise OutputError(f"shard {path}: column {name!r} appears more than once")
        type_ = schema.field(name).type
        if first_schema is not None and first_schema.field(name).type != type_:
            raise OutputError(f"shard {path}: column {name!r} is {type_}, but {first_schema.field(name).type} "
                              "in the first shard")


def newest_generation(path: str, remote: RemoteOptions = RemoteOptions()) -> int:
    """The generation of the output a directory holds now (its manifest's `generation`; 0 before numbering)."""
    fs, base, location = locate(path, remote)
    manifest, manifest_path = _read_manifest(fs, base, os.fspath(path))
    generation = manifest.get("generation", 0)
    return _integer(generation, manifest_path, "generation", 0, 999_999)


def open_dataset(path: str, verify_checksums: bool = False, columns=None,
                 remote: RemoteOptions = RemoteOptions(), generation: int | None = None) -> Dataset:
    """The checked dataset at path (see the module doc); OutputError naming the file and field.

    verify_checksums also reads every byte of every shard for its SHA-256.
    columns: names to be read; each must exist once in every shard, with one
    type (checked from the footers, before any read).
    DEFAULT_COLUMNS: the output's default_columns, checked the same way.
    A function of the checked manifest: the names it returns (a reader of one kind of output refuses another
    there, OutputError, before any shard is read).
    None: no columns are checked.
    remote: bounds on the calls that reach a remote dataset.
    generation: that generation of the output (the newest, or an older one the output keeps: its manifest in
      `.gNNNNNN/manifest.json`); None: the newest.
    """
    first_schema, nullable = None, set()
    fs, base, location = locate(path, remote)
    manifest, manifest_path = _read_manifest(fs, base, os.fspath(path))
    if generation is not None and manifest.get("generation", 0) != generation:
        where = f"{os.fspath(path)!r} generation {generation}"
        _integer(generation, where, "generation", 1, 999_999)
        if generation not in manifest.get("retained_generations", []):
            raise OutputError(f"{where} is no longer kept (the output holds generation "
                              f"{manifest.get('generation', 0)}; output.keep_generations keeps older ones)")
        manifest, manifest_path = _read_manifest(fs, base, where, (generation_manifest_path(generation),))
        if manifest.get("generation") != generation:
            raise _fail(manifest_path, f"generation {manifest.get('generation')!r}, expected {generation}")
    check_manifest(manifest, manifest_path)
    if callable(columns):
        columns = columns(manifest)
    columns = columns if columns in (None, DEFAULT_COLUMNS) else list(columns)

    def check_shard(numbered: tuple[int, dict]) -> tuple[str, str, pa.Schema, set[str]]:
        i, shard = numbered
        where = f"{manifest_path}: shards[{i}]"
        on_fs, for_reader = _resolve_shard(fs, base, location, shard["path"], where)
        try:
            info = fs.get_file_info(on_fs)
        except (OSError, pa.ArrowException) as err:
            raise _fail(where, f"shard {on_fs} cannot be read ({err})") from None
        if info.type != pafs.FileType.File:
            raise OutputError(f"shard {on_fs} is missing")
        if info.size != shard["bytes"]:
            raise OutputError(f"shard {on_fs} has {info.size} bytes, the manifest says {shard['bytes']}")
        if verify_checksums:
            digest = hashlib.sha256()
            try:
                with fs.open_input_stream(on_fs) as f:
                    while block := f.read(8 << 20):
                        digest.update(block)
            except (OSError, pa.ArrowException) as err:
                raise _fail(where, f"shard {on_fs} cannot be read ({err})") from None
            if digest.hexdigest() != shard["sha256"]:
                raise OutputError(f"shard {on_fs}: SHA-256 differs from the manifest's")
        return (on_fs, for_reader, *_check_footer(fs, on_fs, shard, where))

    # On a remote store each shard costs round trips (its size, its footer): checked concurrently, or a
    # dataset of 10,000 shards takes minutes to open. Results and the first failure in manifest order.
    numbered = list(enumerate(manifest["shards"]))
    remote_shards = not isinstance(fs, pafs.LocalFileSystem) and len(numbered) > 1
    pool = concurrent.futures.ThreadPoolExecutor(REMOTE_CHECK_THREADS) if remote_shards else None
    checked = pool.map(check_shard, numbered) if pool is not None else map(check_shard, numbered)
    shard_paths = []
    try:
        for on_fs, for_reader, schema, shard_nullable in checked:
            nullable |= shard_nullable
            if columns == DEFAULT_COLUMNS:
                columns = default_columns(manifest, schema)
            _check_columns(on_fs, schema, columns or [], first_schema)
            first_schema = first_schema or schema
            shard_paths.append(for_reader)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    # Event logs hold nulls as data; lc0 and token outputs never write one, so a null there is damage, which
    # the native core reports (naming shard and column) instead of serving it.
    if manifest.get("record_format", "lc0") != "events":
        nullable = set()
    native = [f.name for f in first_schema if servable(f.type) and f.name not in nullable] if first_schema else []
    return Dataset(location, manifest, shard_paths, columns or [], typed_columns(manifest, first_schema), native)


def load_manifest(path: str, verify_checksums: bool = False, remote: RemoteOptions = RemoteOptions()) -> dict:
    """The manifest of an output directory, after checking it and every shard against it."""
    return open_dataset(path, verify_checksums, remote=remote).manifest
