"""The reader's options, grouped as Grain and PyTorch users know them, each checking itself when made.

    ShardReader(path, batch_size=512, columns=["frame"],
                order_options=OrderOptions(seed=7),
                shard_options=ShardOptions(shard_index=rank, shard_count=world_size),
                read_options=ReadOptions(num_threads=4))

OrderOptions fixes every epoch's order (with the epoch and the dataset's
row-group counts, nothing else); ShardOptions is this data-parallel rank
(Grain's ShardOptions; torch's rank and world size); ReadOptions is how the
rows are read (threads, prefetch, checksums), which changes nothing in what
is served. The PyTorch and Grain adapters take the same objects (checked once,
checked_reader_options); CacheOptions (in ReadOptions) keeps a remote
dataset's shards on local disk.
"""

from __future__ import annotations

import dataclasses
import os

from shardmill.native_ext.remote import RemoteOptions

MAX_THREADS = 1024
MAX_WINDOWS = 1 << 20


def _check_int(owner: str, name: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{owner}.{name} must be an integer in {low}..{high}, got {value!r}")


def _check_bool(owner: str, name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{owner}.{name} must be True or False, got {value!r}")


@dataclasses.dataclass(frozen=True)
class OrderOptions:
    """The order of each epoch: row groups permuted by a keyed permutation, windows of
    `window_row_groups` row groups whose rows are permuted again.

    seed: every epoch is a different order of the same seed.
    shuffle: False serves the shards in manifest order (still sharded).
    window_row_groups: row groups whose rows are shuffled together (more:
      finer shuffle, more memory).
    """

    seed: int = 0
    shuffle: bool = True
    window_row_groups: int = 8

    def __post_init__(self):
        _check_int("OrderOptions", "seed", self.seed, 0, (1 << 64) - 1)
        _check_bool("OrderOptions", "shuffle", self.shuffle)
        _check_int("OrderOptions", "window_row_groups", self.window_row_groups, 1, MAX_WINDOWS)


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """This rank's share of every epoch: rank shard_index of shard_count reads a contiguous
    1/shard_count slice of the epoch's order (disjoint, equal sizes)."""

    shard_index: int = 0
    shard_count: int = 1

    def __post_init__(self):
        _check_int("ShardOptions", "shard_count", self.shard_count, 1, 1 << 30)
        _check_int("ShardOptions", "shard_index", self.shard_index, 0, self.shard_count - 1)


@dataclasses.dataclass(frozen=True)
class CacheOptions:
    """A local copy of a remote dataset's shards, shared by every reader process of the host.

    directory: where the copies live, named by their SHA-256 (`<sha256>.parquet`): a copy is used only
      once its bytes hash to the manifest's digest, and an unchanged shard of a new output is not
      fetched again. Readers of one host (ranks, loader workers, later runs) share it: one download per
      shard, through a lock file per shard.
    max_bytes: the copies fetched ahead stay within this; least recently used copies no reader holds
      are removed first. A shard needed now is fetched even when every copy is held (the current and
      next windows of the readers): size it for at least those.
    ahead_windows: windows past the decoded ones whose shards are fetched ahead, in the reader's order.
    fetch_threads: concurrent downloads ahead.
    A directory that cannot take a shard (disk full) serves it from the store instead (counted in
    ShardReader.cache_stats()["uncached"]).
    """

    directory: str
    max_bytes: int
    ahead_windows: int = 4
    fetch_threads: int = 2

    def __post_init__(self):
        if not isinstance(self.directory, (str, os.PathLike)) or not os.fspath(self.directory):
            raise ValueError(f"CacheOptions.directory must be a local directory path, got {self.directory!r}")
        if "://" in os.fspath(self.directory):
            raise ValueError(f"CacheOptions.directory must be on local disk, got {self.directory!r}")
        _check_int("CacheOptions", "max_bytes", self.max_bytes, 1, 1 << 62)
        _check_int("CacheOptions", "ahead_windows", self.ahead_windows, 0, MAX_WINDOWS)
        _check_int("CacheOptions", "fetch_threads", self.fetch_threads, 1, 64)

    def as_native(self) -> tuple[str, int, int, int]:
        return os.path.abspath(os.fspath(self.directory)), self.max_bytes, self.ahead_windows, self.fetch_threads


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How rows are read; none of it changes which rows are served, or in which order.

    num_threads: decoding threads.
    prefetch_windows: windows decoded ahead of the one being served.
    verify_checksums: check every shard's SHA-256 before starting (reads
      every byte). Parquet pages carry no checksums by default, so bytes
      corrupted inside compressed data can decode to wrong values silently.
    remote: bounds on every call that reaches a remote (s3://, gs://)
      dataset: connect and request timeouts, attempts (remote.py).
    cache: shards read from a local copy fetched ahead (CacheOptions); None:
      read where they are.
    """

    num_threads: int = 2
    prefetch_windows: int = 2
    verify_checksums: bool = False
    remote: RemoteOptions = RemoteOptions()
    cache: CacheOptions | None = None

    def __post_init__(self):
        _check_int("ReadOptions", "num_threads", self.num_threads, 1, MAX_THREADS)
        _check_int("ReadOptions", "prefetch_windows", self.prefetch_windows, 0, 64)
        _check_bool("ReadOptions", "verify_checksums", self.verify_checksums)
        check_type("ReadOptions.remote", self.remote, RemoteOptions)
        if self.cache is not None:
            check_type("ReadOptions.cache", self.cache, CacheOptions)


# ShardReader's option arguments and their classes: the adapters take and hand on the same objects.
READER_OPTION_CLASSES = {"order_options": OrderOptions, "shard_options": ShardOptions, "read_options": ReadOptions}


def checked_reader_options(**options) -> dict:
    """The option arguments given (order_options, shard_options, read_options), each checked to be an object of
    its class (TypeError naming the argument): the keyword arguments to hand on to ShardReader."""
    return {name: check_type(name, value, READER_OPTION_CLASSES[name]) for name, value in options.items()}


def check_type(name: str, value, cls: type | tuple[type, ...]):
    """The value when it is a cls (or one of them); TypeError naming the argument otherwise (a dict or a
    bool is not options)."""
    if not isinstance(value, cls):
        names = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
        raise TypeError(f"{name} must be a {names}, got {type(value).__name__}")
    return value
