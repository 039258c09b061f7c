"""ShardReader: a shardmill output directory as a stream of numpy batches.

The C++ core (shard_reader.cc) decodes Parquet row groups on background
threads with the GIL released; the same threads copy each window's rows
into epoch order ahead of the consumer, and a batch's arrays are views of
those rows (no copy; only a batch that spans two windows is copied). The
dataset is checked as untrusted input first (dataset.py: the manifest, every
shard path and footer; local paths as users write them and Arrow URIs such
as gs:// and s3://, without importing Beam); this module keeps the
checkpoint state.

Order (per epoch, from (seed, epoch) only): a Feistel permutation of all row
groups, cut into windows of `window_row_groups` row groups whose rows are
permuted again. Rank `shard_index` of `shard_count` reads a contiguous
1/shard_count slice of that order: ranks are disjoint, of equal size, and
together drop fewer than shard_count rows per epoch.

Memory: at most about 2 x (prefetch_windows + 1) x window_row_groups row
groups of the selected columns (decoded, and arranged in epoch order), with
shardmill's default 4 MiB row groups and the defaults below ~200 MiB (about
half for rows of >= 256 B, which go from each decompressed page straight to
their place and keep no decoded row groups), plus
the windows of the batches you hold: a batch keeps its whole window of
arranged rows alive (tens of MB), so copy a batch (`np.array(a)`) you keep
beyond the next few steps. Window buffers freed by a reader stay mapped in a
process-wide cache of at most 512 MiB, so the next window and the next
reader (a PyTorch iterator per epoch makes one) reuse pages already faulted
in; `release_cached_memory()` unmaps them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Iterator, Sequence

import numpy as np

from shardmill.native_ext._native import NativeError, NativeReader, ReaderOptions
from shardmill.native_ext.dataset import OutputError, load_manifest, open_dataset  # noqa: F401  (re-exported)

STATE_VERSION = 2  # 2: Feistel halves fit odd bit widths (other orders than 1)
MAX_EPOCH = 1 << 40  # of an unbounded reader's state: far beyond any run, far from overflow


class ShardReader:
    """Iterates a shardmill output directory in batches of numpy arrays.

    Each batch is a dict: one array per selected column (fixed_size_binary
    columns as (batch, width) uint8, numeric columns as 1-D arrays), plus
    `record_index` (int64: the record's position in the dataset, stable
    across epochs and ranks), `record_seed` (uint64: keyed hash of (seed,
    record_index), for stateless reproducible augmentations; mix in `epoch`
    for per-epoch variation) and `epoch` (int). The arrays are writable
    views of the reader's window buffers (see Memory above).

    Args:
      path: output directory (local path or Arrow filesystem URI).
      batch_size: rows per batch; the last batch of an epoch may be smaller
        unless drop_remainder.
      columns: columns to read (default: frame).
      shard_index, shard_count: this data-parallel rank and the number of ranks.
      num_epochs: epochs to serve; None for unbounded.
      seed: seed of the order; every epoch is a different order.
      shuffle: False serves the shards in manifest order (still sharded).
      window_row_groups: row groups whose rows are shuffled together.
      num_threads: decoding threads.
      prefetch_windows: windows decoded ahead of the one being served.
      verify_checksums: check every shard's SHA-256 before starting (reads
        every byte). Parquet pages carry no checksums by default, so bytes
        corrupted inside compressed data can decode to wrong values silently.
      state: a value from state() to resume exactly where it was taken
        (validated: settings, dataset and ranges; ValueError otherwise).
      start_epoch: begin at the start of this epoch (its order is the one a
        reader started at 0 serves in that epoch); num_epochs still counts
        from epoch 0, so it must be larger. Not with `state`.

    Threads: a reader may be shared; next() and state() calls are serialised,
    so each caller gets whole, distinct batches. Columns are checked against
    every shard's footer at construction: a missing column or a type the
    reader does not serve (e.g. float16) is an OutputError naming both.
    """

    def __init__(
        self,
        path: str,
        batch_size: int = 256,
        columns: Sequence[str] = ("frame",),
        *,
        shard_index: int = 0,
        shard_count: int = 1,
        num_epochs: int | None = 1,
        seed: int = 0,
        shuffle: bool = True,
        window_row_groups: int = 8,
        drop_remainder: bool = False,
        num_threads: int = 2,
        prefetch_windows: int = 2,
        verify_checksums: bool = False,
        state: bytes | None = None,
        start_epoch: int = 0,
    ):
        if isinstance(columns, str):
            raise TypeError("columns must be a sequence of column names, not a string")
        dataset = open_dataset(path, verify_checksums, columns=list(columns))
        self._manifest = dataset.manifest
        self._settings = {
            "dataset": self._dataset_fingerprint(),
            "batch_size": int(batch_size),
            "columns": list(columns),
            "shard_index": int(shard_index),
            "shard_count": int(shard_count),
            "num_epochs": 0 if num_epochs is None else int(num_epochs),
            "seed": int(seed),
            "shuffle": bool(shuffle),
            "window_row_groups": int(window_row_groups),
            "drop_remainder": bool(drop_remainder),
        }
        if isinstance(start_epoch, bool) or not isinstance(start_epoch, int) or not 0 <= start_epoch <= MAX_EPOCH:
            raise ValueError(f"start_epoch must be an integer in 0..{MAX_EPOCH}, got {start_epoch!r}")
        if state is not None and start_epoch:
            raise ValueError("give either state or start_epoch: a state already says where to start")
        if num_epochs is not None and start_epoch >= num_epochs:
            raise ValueError(f"start_epoch {start_epoch} is not before num_epochs {num_epochs} (epochs count from 0)")
        start_position = 0
        if state is not None:
            start_epoch, start_position = self._resume_point(state)
        options = ReaderOptions()
        for shard_path, shard in zip(dataset.shard_paths, self._manifest["shards"]):
            options.add_shard(shard_path, list(shard["row_groups"]))
        for name in ("columns", "batch_size", "drop_remainder", "shard_index", "shard_count", "num_epochs", "seed",
                     "shuffle", "window_row_groups"):
            setattr(options, name, self._settings[name])
        options.num_threads = int(num_threads)
        options.prefetch_windows = int(prefetch_windows)
        options.start_epoch, options.start_position = start_epoch, start_position
        try:
            self._native = NativeReader(options)
            self._native.start()
        except NativeError as err:
            raise OutputError(str(err)) from None
        # One consumer at a time: concurrent next() calls are serialised, so threads sharing a
        # reader each get whole, distinct batches (no row twice, none lost).
        self._lock = threading.Lock()

    def _dataset_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for shard in self._manifest["shards"]:
            digest.update(f"{shard['path']}:{shard['rows']}:{shard['sha256']};".encode())
        return digest.hexdigest()[:16]

    def _resume_point(self, state: bytes | None) -> tuple[int, int]:
        if state is None:
            return 0, 0
        try:
            saved = json.loads(state)
        except ValueError:
            raise ValueError("state is not a ShardReader state") from None
        if saved.get("v") != STATE_VERSION:
            raise ValueError(f"state version {saved.get('v')!r}, expected {STATE_VERSION}")
        differing = [k for k, v in self._settings.items() if saved.get(k) != v]
        if differing:
            raise ValueError(f"state was taken with other settings: {', '.join(differing)}")
        epoch, position = saved.get("epoch"), saved.get("position")
        total_rows = sum(s["rows"] for s in self._manifest["shards"])
        last_epoch = self._settings["num_epochs"] or MAX_EPOCH
        for name, value, hi in (("epoch", epoch, last_epoch), ("position", position, total_rows)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
                raise ValueError(f"state field {name} {value!r} is outside 0..{hi}")
        return epoch, position

    def state(self) -> bytes:
        """A small serialisable checkpoint: a reader built with it continues exactly here."""
        with self._lock:
            epoch, position = self._native.epoch, self._native.position
        return json.dumps({"v": STATE_VERSION, **self._settings, "epoch": epoch, "position": position},
                          separators=(",", ":")).encode()

    @property
    def rows_per_epoch(self) -> int:
        """Rows this rank serves per epoch (before drop_remainder)."""
        return self._native.rows_per_epoch

    @property
    def manifest(self) -> dict:
        return self._manifest

    def __iter__(self) -> Iterator[dict]:
        return self

    def __next__(self) -> dict:
        try:
            with self._lock:
                batch = self._native.next_batch()
        except NativeError as err:
            raise OutputError(str(err)) from None
        if batch is None:
            raise StopIteration
        return batch

    def close(self) -> None:
        """Stops the decoding threads (idempotent)."""
        self._native.stop()

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        native = getattr(self, "_native", None)
        if native is not None:
            native.stop()


def frames_as(batch: dict, dtype: np.dtype, column: str = "frame") -> np.ndarray:
    """Views a fixed_size_binary column's (batch, width) bytes as records of a structured dtype."""
    return batch[column].view(dtype).reshape(len(batch[column]))
