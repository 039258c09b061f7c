"""ShardReader: a shardmill output directory as a stream of numpy batches.

The C++ core (shard_reader.cc) decodes Parquet row groups on background
threads with the GIL released; the same threads copy each window's rows
into epoch order ahead of the consumer, and a batch's arrays are views of
those rows (no copy; only a batch that spans two windows is copied). The
dataset is checked as untrusted input first (dataset.py: the manifest, every
shard path and footer; local paths as users write them and Arrow URIs such
as gs:// and s3://, without importing Beam). This module is the facade: the
state's fields are checkpoint.py's, elastic resume is elastic.py's,
following generations generations.py's, the Arrow-served columns
arrow_columns.py's.

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

import dataclasses
import logging
import threading
from typing import Iterator, Sequence

from shardmill.core.errors import NativeError, OutputError
from shardmill.native_ext._native import NativeReader, ReaderOptions
from shardmill.native_ext.arrow_columns import ARROW_FORMATS, ArrowColumns
from shardmill.native_ext.checkpoint import (MAX_EPOCH, NATIVE_SETTINGS, ReaderSettings, dataset_fingerprint,
                                             encode_state, resume_point, state_generation)
from shardmill.native_ext.converters import CONVERTERS, Converter
from shardmill.native_ext.dataset import DEFAULT_COLUMNS, open_dataset
from shardmill.native_ext.elastic import ElasticEpoch, elastic_states
from shardmill.native_ext.generations import deleted_generation, newer_generation
from shardmill.native_ext.options import OrderOptions, ReadOptions, ShardOptions, check_type, checked_reader_options
from shardmill.native_ext.row_groups import RowGroups

_LOG = logging.getLogger(__name__)


class ShardReader:
    """Iterates a shardmill output directory in batches of numpy arrays.

    Each batch is a dict: one array per selected column (fixed_size_binary
    columns as (batch, width) uint8, token samples as (batch, seq_length +
    extra) arrays of their dtype, numeric columns as 1-D arrays; strings,
    binary, lists, dictionaries and columns with nulls as Arrow arrays,
    numpy arrays with arrow_columns_as="numpy" (numbers and booleans as masked
    arrays of their own dtype, strings and lists as objects), or offsets +
    values with "offsets"), plus
    `record_index` (int64: the record's position in the dataset, stable
    across epochs and ranks), `record_seed` (uint64: keyed hash of (seed,
    record_index), for stateless reproducible augmentations; mix in `epoch`
    for per-epoch variation) and `epoch` (int). The arrays are writable
    views of the reader's window buffers (see Memory above).

    Args:
      path: output directory (local path or Arrow filesystem URI).
      batch_size: rows per batch; the last batch of an epoch may be smaller
        unless drop_remainder.
      columns: columns to read. None: the output's own (lc0: frame; tokens:
        tokens, sample, epoch and a blend's corpus, corpus_position; labels:
        every column).
      num_epochs: epochs to serve; None for unbounded.
      drop_remainder: drop the short last batch of each epoch.
      order_options: the order of every epoch (OrderOptions: seed, shuffle,
        window_row_groups).
      shard_options: this data-parallel rank and the number of ranks
        (ShardOptions).
      read_options: threads, prefetch, checksums, remote bounds and a local
        shard cache (ReadOptions).
      converter: training tensors added to each batch (converters.Lc0Tensors,
        converted on the decode threads; converters.MegatronSamples); None:
        the columns only.
      state: a value from state() to resume exactly where it was taken
        (validated: settings, dataset and ranges; ValueError otherwise).
      start_epoch: begin at the start of this epoch (its order is the one a
        reader started at 0 serves in that epoch); num_epochs still counts
        from epoch 0, so it must be larger. Not with `state`.
      arrow_columns_as: "arrow" (pyarrow arrays, nulls kept), "numpy"
        (every value exact: numbers and booleans as masked arrays of their own
        dtype, masked at nulls; strings and lists as object arrays, None for
        nulls) or "offsets" (strings, binary and lists as OffsetsValues:
        offsets, values, valid; the rest as with "numpy") for the columns the
        native core does not arrange (arrow_columns.py).
      follow_generations: at each epoch boundary, serve the newest generation
        the output has committed since (a job rerun into the same output): the
        next epoch is that generation's, in its own order; an epoch already
        begun ends on the generation it began on (keep it readable with the
        job's output.keep_generations >= 2). state() names the generation,
        so a resume continues on it exactly, then follows.

    Threads: a reader may be shared; next() and state() calls are serialised,
    so each caller gets whole, distinct batches. Columns are checked against
    every shard's footer at construction: a missing column, or one typed
    differently in two shards, is an OutputError naming both.
    """

    def __init__(
        self,
        path: str,
        batch_size: int = 256,
        columns: Sequence[str] | None = None,
        *,
        num_epochs: int | None = 1,
        drop_remainder: bool = False,
        order_options: OrderOptions = OrderOptions(),
        shard_options: ShardOptions = ShardOptions(),
        read_options: ReadOptions = ReadOptions(),
        converter: Converter | None = None,
        state: bytes | None = None,
        start_epoch: int = 0,
        arrow_columns_as: str = "arrow",
        follow_generations: bool = False,
    ):
        if isinstance(columns, str):
            raise TypeError("columns must be a sequence of column names, not a string")
        if arrow_columns_as not in ARROW_FORMATS:
            raise ValueError(f"arrow_columns_as must be one of {', '.join(ARROW_FORMATS)}, got {arrow_columns_as!r}")
        options = checked_reader_options(order_options=order_options, shard_options=shard_options,
                                         read_options=read_options)
        order, shard, read = options["order_options"], options["shard_options"], options["read_options"]
        if not isinstance(follow_generations, bool):
            raise TypeError(f"follow_generations must be True or False, got {follow_generations!r}")
        self._path, self._read, self._order = path, read, order
        self._arrow_format, self._converter_spec = arrow_columns_as, converter
        self._follow = follow_generations
        self._arrow = None
        # A state names the generation it was taken on: resumed there (the newest, or one the output keeps).
        generation = state_generation(state) if state is not None else None
        dataset = open_dataset(path, read.verify_checksums, columns=DEFAULT_COLUMNS if columns is None else list(columns),
                               remote=read.remote, generation=generation)
        self._bind(dataset)
        self._settings = ReaderSettings(
            dataset=dataset_fingerprint(self._manifest), batch_size=int(batch_size), columns=list(dataset.columns),
            shard_index=shard.shard_index, shard_count=shard.shard_count,
            num_epochs=0 if num_epochs is None else int(num_epochs), seed=order.seed, shuffle=order.shuffle,
            window_row_groups=order.window_row_groups, drop_remainder=bool(drop_remainder))
        if isinstance(start_epoch, bool) or not isinstance(start_epoch, int) or not 0 <= start_epoch <= MAX_EPOCH:
            raise ValueError(f"start_epoch must be an integer in 0..{MAX_EPOCH}, got {start_epoch!r}")
        if state is not None and start_epoch:
            raise ValueError("give either state or start_epoch: a state already says where to start")
        if num_epochs is not None and start_epoch >= num_epochs:
            raise ValueError(f"start_epoch {start_epoch} is not before num_epochs {num_epochs} (epochs count from 0)")
        start_position, ranges = 0, None
        if state is not None:
            start_epoch, start_position, ranges = resume_point(state, self._settings, self._total_rows)
        # An elastic state's epoch is served from its ranges; this rank's own slices follow from the next epoch.
        self._elastic = (ElasticEpoch(start_epoch, ranges, start_position, self._open_piece)
                         if ranges is not None else None)
        if self._elastic is not None:
            start_epoch, start_position = start_epoch + 1, 0
        try:
            self._native = NativeReader(self._options(start_epoch, start_position))
            if self._elastic is None:
                self._native.start()
        except NativeError as err:
            raise OutputError(str(err)) from None
        # One consumer at a time: concurrent next() calls are serialised, so threads sharing a
        # reader each get whole, distinct batches (no row twice, none lost).
        self._lock = threading.Lock()

    def _bind(self, dataset) -> None:
        """Takes a dataset's manifest, columns and shards: at construction, and when following a generation."""
        columns = dataset.columns
        converter = None
        if self._converter_spec is not None:
            converter = check_type("converter", self._converter_spec, CONVERTERS).bind(dataset.manifest)
            missing = [c for c in converter.required_columns if c not in columns]
            if missing:
                raise ValueError(f"the converter reads column(s) {', '.join(missing)}: select them")
        self._converter = converter
        self._typed = dataset.typed
        self._manifest = dataset.manifest
        self._generation = int(dataset.manifest.get("generation", 0))
        # The native core arranges fixed-width columns without nulls; the others come through Arrow for the rows
        # of each native batch. A batch of Arrow-served columns only is ordered through a native carrier column.
        self._native_columns = [c for c in columns if c in dataset.native]
        self._carrier = None
        if not self._native_columns:
            if not dataset.native:
                raise OutputError(f"{self._path}: no fixed-width column without nulls to order its rows by "
                                  f"(columns: {', '.join(f['name'] for f in self._manifest.get('schema', []))})")
            self._carrier = dataset.native[0]
            self._native_columns = [self._carrier]
        arrow = [c for c in columns if c not in dataset.native]
        if self._arrow is not None:
            self._arrow.close()
        self._arrow = None
        if arrow:  # the row groups of about two windows cached: a batch's rows come from those of one window
            row_groups = RowGroups(dataset.shard_paths, [s["row_groups"] for s in self._manifest["shards"]], arrow,
                                   2 * self._order.window_row_groups, self._read.remote,
                                   cached_path=self._cached_path if self._read.cache is not None else None)
            self._arrow = ArrowColumns(row_groups, self._arrow_format)
        self._total_rows = sum(s["rows"] for s in self._manifest["shards"])
        self._shard_paths = dataset.shard_paths

    def _follow_newest(self) -> None:
        """Between two epochs: a newer committed generation of the output is served from the next epoch on."""
        native, settings = self._native, self._settings
        rows, position = native.rows_per_epoch, native.position
        remainder_dropped = settings.drop_remainder and rows - position < settings.batch_size
        if 0 < position < rows and not remainder_dropped:
            return  # inside an epoch
        newest = newer_generation(self._path, self._read.remote, self._generation)
        if newest is None:
            return
        epoch = native.epoch + (1 if position > 0 else 0)
        if settings.num_epochs and epoch >= settings.num_epochs:
            return  # the stream ends here
        dataset = open_dataset(self._path, self._read.verify_checksums, columns=settings.columns,
                               remote=self._read.remote, generation=newest)
        native.stop()
        self._bind(dataset)
        self._settings = dataclasses.replace(settings, dataset=dataset_fingerprint(self._manifest))
        try:
            self._native = NativeReader(self._options(epoch, 0))
            self._native.start()
        except NativeError as err:
            raise OutputError(str(err)) from None
        _LOG.info("following %s: generation %d from epoch %d", self._path, self._generation, epoch)

    @property
    def generation(self) -> int:
        """The generation of the output being served."""
        return self._generation

    def _options(self, start_epoch: int, start_position: int, piece: tuple[int, int] | None = None) -> ReaderOptions:
        options = ReaderOptions()
        for shard_path, shard in zip(self._shard_paths, self._manifest["shards"]):
            options.add_shard(shard_path, list(shard["row_groups"]), shard["sha256"], shard["bytes"])
        for name in NATIVE_SETTINGS:
            setattr(options, name, getattr(self._settings, name))
        options.columns = self._native_columns
        options.num_threads, options.prefetch_windows = self._read.num_threads, self._read.prefetch_windows
        options.remote = self._read.remote.as_native()
        if self._read.cache is not None:
            options.cache = self._read.cache.as_native()
        options.start_epoch, options.start_position = start_epoch, start_position
        if self._converter is not None:
            self._converter.configure(options)
        if piece is not None:  # one piece of an elastic epoch: exactly that epoch, that slice, batched by us
            options.slice_begin, options.slice_end = piece
            options.num_epochs, options.drop_remainder = start_epoch + 1, False
        return options

    def _open_piece(self, epoch: int, piece: tuple[int, int]) -> NativeReader:
        """A started native reader of one piece of an elastic epoch."""
        native = NativeReader(self._options(epoch, 0, piece))
        native.start()
        return native

    @staticmethod
    def elastic_states(states: Sequence[bytes], shard_count: int) -> list[bytes]:
        """States for `shard_count` ranks that continue what the ranks of `states` left of their epoch.

        See elastic.elastic_states; rank j resumes with ShardReader(...,
        shard_options=ShardOptions(j, shard_count), state=result[j]).
        """
        return elastic_states(states, shard_count)

    def state(self) -> bytes:
        """A small serialisable checkpoint: a reader built with it continues exactly here."""
        with self._lock:
            if self._elastic is not None:
                epoch, position, ranges = self._elastic.epoch, self._elastic.served, self._elastic.ranges
            else:
                epoch, position, ranges = self._native.epoch, self._native.position, None
        return encode_state(self._settings, self._total_rows, self._generation, epoch, position, ranges)

    @property
    def rows_per_epoch(self) -> int:
        """Rows this rank serves per epoch (before drop_remainder)."""
        return self._native.rows_per_epoch

    @property
    def manifest(self) -> dict:
        return self._manifest

    def cache_stats(self) -> dict | None:
        """With ReadOptions.cache: this reader's shard cache counts (downloads, downloaded_bytes, verified:
        copies found cached and checked, corrupt: copies that failed the check and were fetched again,
        evicted, uncached: shards the directory could not take); None without a cache."""
        return self._native.cache_stats()

    def _cached_path(self, shard: int) -> str:
        """Where the Arrow-served columns open a shard: its cached copy."""
        try:
            return self._native.cached_path(shard)
        except NativeError as err:
            raise OutputError(str(err)) from None

    def __iter__(self) -> Iterator[dict]:
        return self

    def __next__(self) -> dict:
        try:
            with self._lock:
                batch = None
                if self._elastic is not None:
                    batch = self._elastic.next_batch(self._settings.batch_size, self._settings.drop_remainder)
                    if batch is None:  # the elastic epoch is done: this rank's own stream follows
                        self._elastic = None
                        self._native.start()
                if batch is None:
                    if self._follow:
                        self._follow_newest()
                    batch = self._native.next_batch()
        except NativeError as err:
            raise self._deleted_generation() or OutputError(str(err)) from None
        if batch is None:
            raise StopIteration
        for name, dtype in self._typed.items():
            if name in batch:  # token samples: (batch, row bytes) uint8 viewed as (batch, tokens) of their dtype
                batch[name] = batch[name].view(dtype)
        if self._arrow is not None:
            try:
                self._arrow.add(batch)
            except OSError as err:
                deleted = self._deleted_generation()
                if deleted is None:
                    raise
                raise deleted from err
        if self._carrier is not None:
            del batch[self._carrier]
        if self._converter is not None:
            self._converter.finish(batch)
        return batch

    def _deleted_generation(self) -> OutputError | None:
        return deleted_generation(self._path, self._shard_paths, self._manifest, self._read.remote)

    def close(self) -> None:
        """Stops the decoding threads (idempotent)."""
        if self._elastic is not None:
            self._elastic.close()
        if self._arrow is not None:
            self._arrow.close()
        self._native.stop()

    def __enter__(self) -> "ShardReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        native = getattr(self, "_native", None)
        if native is not None:
            native.stop()
        elastic = getattr(self, "_elastic", None)
        if elastic is not None:
            elastic.close()

