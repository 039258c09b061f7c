"""Grain adapters (JAX): a shardmill output directory as a Grain IterDataset, and as a RandomAccessDataSource.

Requires grain (not a shardmill dependency: `pip install grain`).

- `ShardIterDataset`: the native reader's stream (its shuffle, sharding and
  speed) as a `grain.IterDataset`; its iterator's `get_state()` /
  `set_state()` checkpoint the stream exactly (Grain's checkpointing and
  Orbax save those dicts). On several hosts, host h of H reads
  `shard_options=ShardOptions(h, H)` (jax.process_index(), jax.process_count()).
- `ShardDataSource`: record i of the output (shards in manifest order, rows
  in file order) for Grain's `MapDataset.source(...)` / `IndexSampler`,
  whose own shuffle and sharding then apply. Row groups are decoded whole
  through pyarrow and kept in a small cache (row_groups.py; random access over
  Parquet reads a row group per miss, so Grain's shuffled order is slow on
  large row groups: prefer ShardIterDataset for training, the source where
  Grain must own the order; records.py's RecordSource does the reading). Its `read_options` are ShardReader's: checksums,
  remote bounds and the local shard cache apply (threads and prefetch are the
  caller's). Thread-safe; picklable (the cache and open files are not pickled).
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from typing import Sequence

import grain

from shardmill.native_ext.converters import Converter
from shardmill.native_ext.options import OrderOptions, ReadOptions, ShardOptions, check_type, checked_reader_options
from shardmill.native_ext.reader import ShardReader
from shardmill.native_ext.records import RecordSource
from shardmill.native_ext.remote import RemoteOptions


class ShardIterDataset(grain.IterDataset):
    """ShardReader batches as a Grain IterDataset; the arguments are ShardReader's (a checkpoint is
    restored through the iterator's set_state())."""

    def __init__(self, path: str, batch_size: int = 256, columns: Sequence[str] | None = None, *,
                 num_epochs: int | None = 1, drop_remainder: bool = False,
                 order_options: OrderOptions = OrderOptions(), shard_options: ShardOptions = ShardOptions(),
                 read_options: ReadOptions = ReadOptions(), converter: Converter | None = None):
        super().__init__()
        self._args = (path, batch_size, None if columns is None else list(columns))
        self._reader_kwargs = {"num_epochs": num_epochs, "drop_remainder": drop_remainder, "converter": converter,
                               **checked_reader_options(order_options=order_options, shard_options=shard_options,
                                                        read_options=read_options)}

    def __iter__(self) -> "_ShardDatasetIterator":
        return _ShardDatasetIterator(self._args, self._reader_kwargs)

    def __str__(self) -> str:
        return f"ShardIterDataset({self._args[0]!r})"


class _ShardDatasetIterator(grain.DatasetIterator):
    def __init__(self, args, reader_kwargs):
        super().__init__()
        self._args, self._reader_kwargs = args, reader_kwargs
        self._reader: ShardReader | None = None
        self._restore: bytes | None = None
        self._lock = threading.Lock()

    def _open(self) -> ShardReader:
        if self._reader is None:
            # Grain's elements are numpy: numbers and booleans with nulls as masked arrays, strings and lists as
            # object arrays (arrow_columns.as_numpy).
            self._reader = ShardReader(*self._args, state=self._restore, arrow_columns_as="numpy",
                                       **self._reader_kwargs)
            self._restore = None
        return self._reader

    def __next__(self) -> dict:
        with self._lock:
            return next(self._open())

    def get_state(self) -> dict:
        """JSON-serialisable: the reader's checkpoint as text."""
        with self._lock:
            return {"reader_state": self._open().state().decode()}

    def set_state(self, state: dict) -> None:
        if not isinstance(state, dict) or not isinstance(state.get("reader_state"), str):
            raise ValueError("not a ShardIterDataset iterator state")
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self._restore = state["reader_state"].encode()
            self._open()  # a bad state is refused here, not at the next element

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None


class ShardDataSource(grain.sources.RandomAccessDataSource):
    """Record i of a shardmill output as a dict of numpy values (fixed-size binary as uint8 arrays, token
    samples as arrays of their dtype, numbers exactly in their own dtype, None for a null; columns None: the
    output's own, as ShardReader's).

    cached_row_groups: decoded row groups kept (least recently used goes first).
    read_options: ShardReader's ReadOptions: verify_checksums, remote and cache (a local copy of each shard read,
      shared with every reader of the host) apply; num_threads and prefetch_windows do not (records are read in
      the caller's threads, on demand).
    remote: deprecated, give read_options=ReadOptions(remote=...).
    """

    def __init__(self, path: str, columns: Sequence[str] | None = None, cached_row_groups: int = 8,
                 remote: RemoteOptions | None = None, *, read_options: ReadOptions = ReadOptions()):
        read = checked_reader_options(read_options=read_options)["read_options"]
        if remote is not None:
            warnings.warn("ShardDataSource(remote=...) is deprecated: give read_options=ReadOptions(remote=...)",
                          DeprecationWarning, stacklevel=2)
            if read.remote != RemoteOptions():
                raise ValueError("give remote bounds once: in read_options.remote (remote= is deprecated)")
            read = dataclasses.replace(read, remote=check_type("remote", remote, RemoteOptions))
        self._path = path
        self._records = RecordSource(path, columns, cached_row_groups, read_options=read)

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, record_key: int) -> dict:
        return self._records[record_key]

    def cache_stats(self) -> dict | None:
        """With read_options.cache: this process's shard cache counts (as ShardReader.cache_stats()); None
        without a cache."""
        return self._records.cache_stats()

    def __repr__(self) -> str:
        return f"ShardDataSource({self._path!r}, columns={self._records.columns})"
