"""The row groups of an output's shards read through pyarrow, for the two readers that take rows by their record
index: the Arrow-served columns of a ShardReader batch (arrow_columns.py) and the random-access record source
(records.py: Grain's ShardDataSource, MegatronDataset).

Records are numbered across the shards in manifest order, rows in file order
(the native reader's `record_index`). A row group is decoded whole (only the
columns asked for), kept in a small cache (least recently used goes first),
and read from a shard kept open; a shard of a dataset read through a local
shard cache (ReadOptions.cache) is opened at its verified cached copy.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardmill.native_ext.options import CacheOptions
from shardmill.native_ext.remote import RemoteOptions, filesystem_of

MAX_OPEN_SHARDS = 64  # per thread; the least recently used is closed first


class _OpenFiles(collections.OrderedDict):
    """One thread's open shards, by index (a class of its own so that RowGroups can hold it weakly: the files of
    a thread that has ended go with it)."""


class RowGroups:
    """Decoded row groups by record index, cached.

    shard_paths: as the native reader opens them (absolute local paths or URIs).
    row_groups: rows per row group, per shard (the manifest's).
    columns: the columns decoded.
    cached_row_groups: decoded row groups kept.
    decode: what is kept of a row group's table (default: the table).
    cached_path: shard index -> the local path of its cached copy, or None: shards are opened where they are.
    Thread-safe: row groups are decoded outside the lock (pyarrow releases the GIL), so threads decode different
    ones at once; each thread opens its own files (a ParquetFile is not shared across threads). Picklable: the
    cache and the open files are not pickled.
    """

    def __init__(self, shard_paths: Sequence[str], row_groups: Sequence[Sequence[int]], columns: Sequence[str],
                 cached_row_groups: int, remote: RemoteOptions = RemoteOptions(),
                 decode: Callable[[pa.Table], object] | None = None,
                 cached_path: Callable[[int], str] | None = None):
        self._paths = list(shard_paths)
        self.columns = list(columns)
        self._capacity = max(1, cached_row_groups)
        self._remote = remote
        self._decode = decode
        self._cached_path = cached_path
        self._groups = [(s, g) for s, counts in enumerate(row_groups) for g in range(len(counts))]
        sizes = [n for counts in row_groups for n in counts]
        self.starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])  # record index of each group's row 0
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[int, object] = collections.OrderedDict()
        self._local = threading.local()
        # Every live thread's open files, for close(): id -> files.
        self._open: weakref.WeakValueDictionary[int, _OpenFiles] = weakref.WeakValueDictionary()

    def __getstate__(self):
        state = self.__dict__.copy()
        for name in ("_lock", "_cache", "_local", "_open"):
            del state[name]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def num_rows(self) -> int:
        return int(self.starts[-1])

    def group_of(self, records: np.ndarray) -> np.ndarray:
        """The row group of each record index."""
        return np.searchsorted(self.starts, records, side="right") - 1

    def _after_fork(self) -> None:
        """A process forked from one that used this (a DataLoader worker) starts afresh: the lock may have been
        held by another thread at the fork, and the open files and their readers are the parent's."""
        if self._pid != os.getpid():
            self._init_runtime()

    def _file(self, shard: int) -> pq.ParquetFile:
        files = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = _OpenFiles()
            with self._lock:
                self._open[id(files)] = files
        if shard in files:
            files.move_to_end(shard)
            return files[shard]
        location = self._cached_path(shard) if self._cached_path is not None else self._paths[shard]
        filesystem, path = filesystem_of(location, self._remote)
        parquet = pq.ParquetFile(filesystem.open_input_file(path))
        files[shard] = parquet
        while len(files) > MAX_OPEN_SHARDS:
            files.popitem(last=False)[1].close()
        return parquet

    def fetch(self, groups: Sequence[int]) -> list:
        """The decoded row groups `groups` (each decoded once while it stays cached); the least recently used
        others beyond the cache's size are dropped, never one of these."""
        self._after_fork()
        out = {}
        with self._lock:
            for group in groups:
                if group in self._cache:
                    self._cache.move_to_end(group)
                    out[group] = self._cache[group]
        for group in groups:
            if group not in out:
                shard, index = self._groups[group]
                table = self._file(shard).read_row_group(index, columns=self.columns)
                out[group] = table if self._decode is None else self._decode(table)
        with self._lock:
            for group in groups:
                self._cache[group] = out[group]
                self._cache.move_to_end(group)
            keep = set(groups)
            for group in list(self._cache):
                if len(self._cache) <= self._capacity:
                    break
                if group not in keep:
                    del self._cache[group]
        return [out[group] for group in groups]

    def cached(self) -> list[tuple[int, object]]:
        """(row group, decoded) of every cached row group, least recently used first."""
        self._after_fork()
        with self._lock:
            return list(self._cache.items())

    def close(self) -> None:
        self._after_fork()
        with self._lock:
            for files in list(self._open.values()):
                for parquet in files.values():
                    parquet.close()
                files.clear()
            self._cache.clear()


class LocalCopies:
    """Where a reader without a native ShardReader (Grain's source) opens a shard of a dataset read through a
    local shard cache: its verified cached copy, shared with every reader of the host (CacheOptions).

    The shards of the last `held` opens are held (kept from eviction); the others may be evicted. Picklable:
    each process makes its own cache client on first use."""

    def __init__(self, shards: list[tuple[str, list[int], str, int]], cache: CacheOptions, remote: RemoteOptions,
                 held: int):
        self._shards = shards  # (location, row-group rows, sha256, bytes) per shard
        self._cache, self._remote, self._held = cache, remote, max(1, held)
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._native = None
        self._recent: collections.OrderedDict[int, None] = collections.OrderedDict()

    def __getstate__(self):
        state = self.__dict__.copy()
        for name in ("_lock", "_native", "_recent"):
            del state[name]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    def _client(self):
        if self._native is None:
            from shardmill.native_ext._native import ReaderOptions, ShardCache

            options = ReaderOptions()
            for location, row_groups, sha256, size in self._shards:
                options.add_shard(location, row_groups, sha256, size)
            options.remote = self._remote.as_native()
            options.cache = self._cache.as_native()
            self._native = ShardCache(options)
        return self._native

    def _after_fork(self) -> None:
        """A forked process (a DataLoader worker) makes its own lock and cache client, as a pickled copy does."""
        if self._pid != os.getpid():
            self._init_runtime()

    def __call__(self, shard: int) -> str:
        self._after_fork()
        with self._lock:
            native = self._client()
            self._recent[shard] = None
            self._recent.move_to_end(shard)
            while len(self._recent) > self._held:
                self._recent.popitem(last=False)
            held = list(self._recent)
        path = native.acquire(shard)
        native.plan(held)
        return path

    def stats(self) -> dict:
        """The cache's counts in this process (as ShardReader.cache_stats())."""
        self._after_fork()
        with self._lock:
            return self._client().stats()

    def close(self) -> None:
        with self._lock:
            if self._native is not None:
                self._native.stop()
                self._native = None
