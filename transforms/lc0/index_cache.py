"""The index cache: each source's index kept between runs, so a rerun over a growing corpus indexes only what
is new or changed.

An entry holds one archive's SourceIndex (its chunk rows, dead letters and skipped members; loose `.gz`
games are indexed as cheaply as an entry is read, so they have none) under a key that proves the source
unchanged and the indexing the same:

- the source: its path and size, and on a local disk its mtime, ctime and inode (any rewrite changes the
  ctime), on an object store its checksum (S3 ETag, GCS checksum), asked of the store once per source;
- the indexing: count method, required record version, chunk size bound and this module's format.

Layout: `<location>/v1/<3 hex digits>/<hash of path>.<hash of key>.entry`, each entry written
atomically (temporary name, then rename), so concurrent runs sharing a cache at worst write the same
entry twice. An entry is checked before it is used: only a regular file is read (a FIFO would block the
run, a link to a device would be read without end, a directory cannot be), and no more of it is read than its
header records; the header names its key (it must be the key asked for), the rows' length, which must be no
more than the source's rows can take (max_rows_bytes: a bound from the source's size in the key), and their
SHA-256, computed over pieces of ROWS_PIECE_BYTES before the rows are kept; then the rows' schema and sources. A
damaged, foreign or odd entry is ignored with a warning, and the source indexed again and its entry rewritten
(in place of whatever held its name, an empty directory included). Nothing in an entry is trusted unchecked.

Growth is bounded by two rules: writing a source's entry removes that source's other entries (a changed
source leaves one), and a run removes entries not used for `max_age_days` (a local entry's time is
refreshed whenever a run uses it; an object store's entry expires that long after it was written and is
rebuilt once), so vanished sources leave the cache within that time. A write that failed (a full disk) removes
its temporary file, and a run also removes temporary files older than TEMP_MAX_AGE_SECONDS: those of a
process killed mid-write.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import logging
import os
import posixpath
import stat
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc

from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.common.filesystem import is_local, normalize, write_bytes_atomically
from shardmill.transforms.lc0.index import INDEX_SCHEMA, SourceIndex

_LOG = logging.getLogger(__name__)

FORMAT = "shardmill-index-cache-2"  # 2: the header records the rows' length
MAGIC = FORMAT.encode() + b"\n"
MAX_HEADER_BYTES = 64 << 20
ENTRY_SUFFIX = ".entry"
TEMP_MARK = ".tmp-"  # in the name of an entry being written: `.<entry name>.tmp-<pid>-<thread>`
# A temporary file this old is a leftover (a write takes milliseconds): a killed process's, or a full disk's.
TEMP_MAX_AGE_SECONDS = 3600
BUCKET_CHARS = 3  # 4,096 directories: a few entries each at 10^4 sources, a few hundred at 10^6
DEFAULT_MAX_AGE_DAYS = 30
# What bounds an entry's rows (max_rows_bytes). Every chunk row stands for a gzip member of its source, and the
# smallest gzip member takes 20 bytes (a 10-byte header, a 2-byte empty deflate block, an 8-byte trailer; a tar
# member takes 1,024): a source of S bytes has at most S // 20 + 1 rows.
MIN_SOURCE_BYTES_PER_ROW = 20
# A row's fixed-width columns, its strings' offsets and validity bits take 57 bytes in the rows' Arrow stream;
# its strings are the source's path and name (the key's) and its member's name (bytes of the source itself).
ROW_FIXED_BYTES = 64
ROWS_FIXED_BYTES = 64 << 10  # the stream's schema and batch messages, and the buffers' padding
ROWS_PIECE_BYTES = 1 << 20  # the rows are read and hashed this much at a time, not whole


def default_location() -> str:
    """Where a local run keeps its index cache unless the config says: the user's cache directory."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shardmill", "index")


def cache_location(index_config, local_run: bool) -> str | None:
    """The index cache of an lc0 IndexConfig (see its `cache` field): a location, or None for no cache."""
    if index_config.cache == "none":
        return None
    if index_config.cache:
        return normalize(index_config.cache)
    return default_location() if local_run else None


def prune_stats(cache: "IndexCache") -> dict:
    """Prunes the cache (IndexCache.prune) and says so as source stats: where the cache is, entries removed."""
    return {"index_cache": cache.location, "cache_pruned": cache.prune()}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class RejectedEntry(ValueError):
    """An entry that cannot be used: what is wrong with it."""


class EntryNameTaken(OSError):
    """An entry's name held by what the cache must not remove (a directory holding files)."""


def max_rows_bytes(key: dict) -> int:
    """The most bytes the rows of the key's source can take in an entry: its most rows (one per gzip member)
    each with its fixed bytes and the key's path and name, plus the member names (at most the source's size)."""
    size = key["stamp"][0]  # the source's size, in every stamp (source_stamp)
    path = key["path"]
    per_row = ROW_FIXED_BYTES + len(path.encode()) + len(posixpath.basename(path).encode())
    return ROWS_FIXED_BYTES + (size // MIN_SOURCE_BYTES_PER_ROW + 1) * per_row + size


@dataclasses.dataclass(frozen=True)
class IndexCache:
    """One cache location (a local directory or an object-store prefix) for one way of indexing."""

    location: str
    method: str
    expected_version: int
    max_chunk_bytes: int
    max_age_days: int = DEFAULT_MAX_AGE_DAYS

    @staticmethod
    def worth_caching(path: str) -> bool:
        """Archives: indexing one reads a header per member. A loose `.gz` game is indexed from its header and
        trailer, which costs what reading its entry back does (measured: 0.29 ms either way), and writing
        the entry three times that."""
        return path.lower().endswith(".tar")

    def source_stamp(self, path: str, size: int):
        """What proves the source unchanged (see the module doc); None when it cannot be had (not cached)."""
        try:
            if is_local(path):
                info = os.stat(path)
                return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]
            from apache_beam.io.filesystems import FileSystems

            return [size, str(FileSystems.checksum(path))]
        except Exception:  # noqa: BLE001 - a source the store won't describe is indexed, not cached
            return None

    def key(self, path: str, stamp) -> dict:
        return {"format": FORMAT, "path": path, "stamp": stamp, "method": self.method,
                "expected_version": self.expected_version, "max_chunk_bytes": self.max_chunk_bytes}

    def entry_path(self, key: dict) -> str:
        source = _digest(key["path"])
        return posixpath.join(self.location, "v1", source[:BUCKET_CHARS],
                              f"{source}.{_digest(json.dumps(key, sort_keys=True))}{ENTRY_SUFFIX}")

    def lookup(self, key: dict) -> SourceIndex | None:
        """The source's cached index; None when it has no entry; RejectedEntry (naming the entry and what is
        wrong with it) when its entry cannot be used."""
        path = self.entry_path(key)
        try:
            index = _read(path, key)
        except RejectedEntry as err:
            raise RejectedEntry(f"{path}: {err}") from None
        except MemoryError:  # rows within their bound, but more than this process has left: indexed instead
            raise RejectedEntry(f"{path}: its rows do not fit in the memory left") from None
        if index is None:
            return None
        if is_local(path):
            try:
                os.utime(path)  # used: kept for another max_age_days
            except OSError:
                pass
        return index

    def store(self, key: dict, index: SourceIndex) -> None:
        """Writes the source's entry, then removes the source's other entries (it changed)."""
        path = self.entry_path(key)
        try:
            _write(path, encode_entry(key, index))
        except EntryNameTaken as err:  # this source's problem only: the other sources' entries are still stored
            _LOG.warning("index cache: cannot store an entry: %s", err)
            return
        directory, name = posixpath.split(path)
        source = name.split(".", 1)[0]
        for other in _list(directory):
            base = other.rsplit("/", 1)[-1]
            if base != name and base.startswith(source + ".") and base.endswith(ENTRY_SUFFIX):
                _delete(other)

    def prune(self, now: float | None = None) -> int:
        """Removes entries not used (local) or written (object store) for max_age_days, and temporary files
        left by failed writes older than TEMP_MAX_AGE_SECONDS; how many entries (leftovers are not entries)."""
        now = time.time() if now is None else now
        cutoff = now - self.max_age_days * 86400
        removed = 0
        for path, updated in _list_tree(posixpath.join(self.location, "v1")):
            name = posixpath.basename(path)
            if name.startswith(".") and TEMP_MARK in name:
                if updated < now - TEMP_MAX_AGE_SECONDS:
                    _delete(path)
            elif updated < cutoff and name.endswith(ENTRY_SUFFIX):
                removed += _delete(path)
        return removed


def encode_entry(key: dict, index: SourceIndex) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, INDEX_SCHEMA) as writer:
        writer.write_table(index.table.cast(INDEX_SCHEMA))
    rows = sink.getvalue()
    header = {"key": key, "rows_bytes": len(rows), "rows_sha256": hashlib.sha256(rows).hexdigest(),
              "skipped_members": index.skipped_members, "dead_letters": [d.to_dict() for d in index.dead_letters]}
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + rows


def decode_entry(data: bytes, key: dict) -> SourceIndex:
    """The SourceIndex an entry holds, checked against the key asked for; RejectedEntry saying why not."""
    return read_entry(io.BytesIO(data), len(data), key)


def read_entry(stream, size: int | None, key: dict) -> SourceIndex:
    """The SourceIndex of an entry of `size` bytes (None: unknown; then the stream must end after the rows)
    read from the seekable `stream`, checked against the key asked for; RejectedEntry saying why not. Reads no
    more than the header, then only the rows' length it records, and only when that is no more than the
    source's rows can take and accounts for the entry's size exactly; keeps the rows only once their SHA-256,
    computed piece by piece, is the header's."""
    if stream.read(len(MAGIC)) != MAGIC:
        raise RejectedEntry("not an index cache entry of this version")
    line = stream.readline(MAX_HEADER_BYTES)
    if not line.endswith(b"\n"):
        raise RejectedEntry("no header")
    try:
        header = json.loads(line)
    except (ValueError, RecursionError):
        raise RejectedEntry("its header is not valid JSON") from None
    if not isinstance(header, dict) or header.get("key") != key:
        raise RejectedEntry("written for another source or another way of indexing")
    rows_bytes = header.get("rows_bytes")
    if isinstance(rows_bytes, bool) or not isinstance(rows_bytes, int) or rows_bytes < 0:
        raise RejectedEntry("its header lacks the rows' length")
    most = max_rows_bytes(key)
    if rows_bytes > most:
        raise RejectedEntry(f"its header records {rows_bytes:,} bytes of rows, more than the {most:,} a source of "
                            f"{key['stamp'][0]:,} bytes can have")
    recorded = len(MAGIC) + len(line) + rows_bytes
    if size is not None and size != recorded:
        raise RejectedEntry(f"{size:,} bytes where its header records {recorded:,}")
    rows = _verified_rows(stream, rows_bytes, header.get("rows_sha256"), recorded)
    if size is None and stream.read(1):
        raise RejectedEntry(f"more bytes than the {recorded:,} its header records")
    try:
        table = pa.ipc.open_stream(rows).read_all()
    except (pa.ArrowException, OSError) as err:
        raise RejectedEntry(f"its rows cannot be read ({err})") from None
    if not table.schema.equals(INDEX_SCHEMA):
        raise RejectedEntry("its rows have another schema")
    path = key["path"]
    if table.num_rows and not pc.all(pc.equal(table["source"], path)).as_py():
        raise RejectedEntry("its rows name another source")
    skipped = header.get("skipped_members")
    dead = header.get("dead_letters")
    if isinstance(skipped, bool) or not isinstance(skipped, int) or skipped < 0 or not isinstance(dead, list):
        raise RejectedEntry("its header lacks the source's counts")
    try:
        dead_letters = [DeadLetter(**d) for d in dead]
    except TypeError:
        raise RejectedEntry("its dead letters are malformed") from None
    if any(d.path != path for d in dead_letters):
        raise RejectedEntry("its dead letters name another source")
    return SourceIndex(table, dead_letters, skipped)


def _verified_rows(stream, rows_bytes: int, sha256, recorded: int) -> bytes:
    """The rows that follow the header, once their SHA-256 is the header's: hashed in pieces of ROWS_PIECE_BYTES,
    so a damaged entry is refused holding one piece; rows of more than one piece are read again to be kept."""
    start = stream.tell()
    digest = hashlib.sha256()
    done = 0
    piece = b""
    while done < rows_bytes:
        piece = stream.read(min(rows_bytes - done, ROWS_PIECE_BYTES))
        if not piece:
            raise RejectedEntry(f"it ended after {recorded - rows_bytes + done:,} of {recorded:,} bytes")
        digest.update(piece)
        done += len(piece)
    if digest.hexdigest() != sha256:
        raise RejectedEntry("its rows are damaged (SHA-256 differs)")
    if len(piece) == rows_bytes:
        return piece
    end = stream.tell()
    stream.seek(start)
    rows = stream.read(rows_bytes)
    if hashlib.sha256(rows).hexdigest() != sha256:
        raise RejectedEntry("it changed while it was read")
    stream.seek(end)
    return rows


# Opening an entry never blocks (a FIFO's open waits for a writer) and never follows a link (the cache writes
# none: one to /dev/zero would be read without end).
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _read(path: str, key: dict) -> SourceIndex | None:
    """The index an entry holds (read_entry); None when there is no entry."""
    if is_local(path):
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise RejectedEntry("a symbolic link, which the cache never writes" if os.path.islink(path)
                                else f"cannot be opened ({err.strerror or err})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # before a file object: Python refuses one of a directory
                raise RejectedEntry(f"not a regular file ({_file_kind(info.st_mode)})")
            with os.fdopen(fd, "rb", closefd=False) as f:
                return read_entry(f, info.st_size, key)
        except OSError as err:  # a disk error: the entry is unusable, not the run
            raise RejectedEntry(f"cannot be read ({err.strerror or err})") from None
        finally:
            os.close(fd)
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.io.filesystem import CompressionTypes

    try:  # an object store holds only regular objects; read as a stream, so no more than read_entry reads
        stream = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception:  # noqa: BLE001 - each store says "missing" its own way: ask it
        if not FileSystems.exists(path):
            return None
        raise
    with stream:
        return read_entry(stream, None, key)


def _file_kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device")


def _write(path: str, data: bytes) -> None:
    """Writes the entry atomically: on a local disk directly (a tenth of the time through Beam's FileSystems,
    which a first run pays once per source)."""
    if not is_local(path):
        write_bytes_atomically(path, data)
        return
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, f".{name}{TEMP_MARK}{os.getpid()}-{threading.get_ident()}")
    try:
        with open(temp, "wb") as f:
            f.write(data)
        try:
            os.replace(temp, path)
        except IsADirectoryError:  # the entry's name is a directory, which the cache never makes
            _remove_empty_directory(path)
            os.replace(temp, path)
    except BaseException:
        _delete(temp)  # a full disk's partial file
        raise


def _remove_empty_directory(path: str) -> None:
    """Removes an empty directory in an entry's place; one holding files is left to whoever put them there:
    EntryNameTaken says so."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass  # another run removed it first
    except OSError as err:
        if err.errno != errno.ENOTEMPTY:
            raise
        raise EntryNameTaken(f"{path} is a directory holding files, which the cache never writes; remove it to "
                             "cache this source again") from None


def _list(directory: str) -> list[str]:
    if is_local(directory):
        try:
            return [os.path.join(directory, name) for name in os.listdir(directory)]
        except OSError:
            return []
    from apache_beam.io.filesystems import FileSystems

    try:
        return [m.path for r in FileSystems.match([directory.rstrip("/") + "/*"]) for m in r.metadata_list]
    except Exception:  # noqa: BLE001 - nothing listed
        return []


def _list_tree(top: str):
    """(path, last update in seconds) of every file below top."""
    if is_local(top):
        for root, _, files in os.walk(top):
            for name in files:
                path = os.path.join(root, name)
                try:
                    yield path, os.stat(path).st_mtime
                except OSError:
                    continue
        return
    from apache_beam.io.filesystems import FileSystems

    try:
        matched = FileSystems.match([top.rstrip("/") + "/**"])
    except Exception:  # noqa: BLE001 - nothing to prune
        return
    for result in matched:
        for meta in result.metadata_list:
            yield meta.path, meta.last_updated_in_seconds


def _delete(path: str) -> int:
    try:
        if is_local(path):
            os.remove(path)
        else:
            from apache_beam.io.filesystems import FileSystems

            FileSystems.delete([path])
        return 1
    except Exception:  # noqa: BLE001 - another run removed it first
        return 0
