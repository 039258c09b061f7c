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
PLANE_ENCODINGS = ("float32", "float16", "bfloat16", "uint8", "packed")
POLICY_SIZE = 1858


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
      lc0_tensors: "loader" or "chunkparser": each batch also carries the
        lc0 training tensors of its `frame` records, converted on the
        reader's decode threads ahead of the consumer, in the batch's order:
        `planes` (batch, 112, 8, 8), `policy` (batch, 1858: float32, a view of
        the records' own probabilities, rows strided by the record size) and either
        `values` (batch, 6, 4) (loader) or `wdl`, `best_wdl` (batch, 3) and
        `plies_left` (batch,) (chunkparser). See the README's "lc0 training
        tensors" for both conventions. A record a convention can't convert
        makes its batch an OutputError naming its shard and row (the next
        call serves the next batch). Memory: each window in flight keeps its
        tensors too (float16 planes: 14.3 kB a position).
      planes: the planes' encoding: "float32", "float16", "bfloat16" (its
        bits as uint16), "uint8" (1 where nonzero) or "packed" (batch, 112, 8
        bytes, numpy packbits order); the last two come with `planes_scale`
        (batch, 112), each plane's value: planes = bits x scale, exactly.

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
        lc0_tensors: str | None = None,
        planes: str = "float32",
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
        if lc0_tensors not in (None, "loader", "chunkparser"):
            raise ValueError(f"lc0_tensors must be None, 'loader' or 'chunkparser', got {lc0_tensors!r}")
        if planes not in PLANE_ENCODINGS:
            raise ValueError(f"planes must be one of {', '.join(PLANE_ENCODINGS)}, got {planes!r}")
        if lc0_tensors and "frame" not in columns:
            raise ValueError("lc0_tensors converts the 'frame' column: select it")
        self._lc0 = (lc0_tensors, planes) if lc0_tensors else None
        self._total_rows = sum(s["rows"] for s in self._manifest["shards"])
        self._shard_paths = dataset.shard_paths
        self._threads = (int(num_threads), int(prefetch_windows))
        start_position, ranges = 0, None
        if state is not None:
            start_epoch, start_position, ranges = self._resume_point(state)
        # An elastic state's epoch is served from its ranges; this rank's own slices follow from the next epoch.
        self._elastic = _ElasticEpoch(start_epoch, ranges, start_position) if ranges is not None else None
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

    def _options(self, start_epoch: int, start_position: int, piece: tuple[int, int] | None = None) -> ReaderOptions:
        options = ReaderOptions()
        for shard_path, shard in zip(self._shard_paths, self._manifest["shards"]):
            options.add_shard(shard_path, list(shard["row_groups"]))
        for name in ("columns", "batch_size", "drop_remainder", "shard_index", "shard_count", "num_epochs", "seed",
                     "shuffle", "window_row_groups"):
            setattr(options, name, self._settings[name])
        options.num_threads, options.prefetch_windows = self._threads
        options.start_epoch, options.start_position = start_epoch, start_position
        if self._lc0 is not None:
            options.lc0_convention, options.lc0_planes = self._lc0
        if piece is not None:  # one piece of an elastic epoch: exactly that epoch, that slice, batched by us
            options.slice_begin, options.slice_end = piece
            options.num_epochs, options.drop_remainder = start_epoch + 1, False
        return options

    def _dataset_fingerprint(self) -> str:
        digest = hashlib.sha256()
        for shard in self._manifest["shards"]:
            digest.update(f"{shard['path']}:{shard['rows']}:{shard['sha256']};".encode())
        return digest.hexdigest()[:16]

    def _resume_point(self, state: bytes) -> tuple[int, int, list[tuple[int, int]] | None]:
        saved = _parse_state(state)
        differing = [k for k, v in self._settings.items() if saved.get(k) != v]
        if differing:
            raise ValueError(f"state was taken with other settings: {', '.join(differing)}")
        epoch, position = saved.get("epoch"), saved.get("position")
        last_epoch = self._settings["num_epochs"] or MAX_EPOCH
        ranges = _checked_ranges(saved.get("ranges"), self._total_rows) if "ranges" in saved else None
        last_position = self._total_rows if ranges is None else sum(hi - lo for lo, hi in ranges)
        for name, value, hi in (("epoch", epoch, last_epoch), ("position", position, last_position)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
                raise ValueError(f"state field {name} {value!r} is outside 0..{hi}")
        if ranges is not None and epoch >= last_epoch:
            raise ValueError(f"state field epoch {epoch} is not before num_epochs {last_epoch}")
        return epoch, position, ranges

    @staticmethod
    def elastic_states(states: Sequence[bytes], shard_count: int) -> list[bytes]:
        """States for `shard_count` ranks that continue what the ranks of `states` left of their epoch.

        `states` are the state() of every rank of one run (all shard_index
        values of its shard_count, taken at the same epoch). The rows of that
        epoch the ranks still had to serve are split into `shard_count` equal
        runs in epoch order (fewer than shard_count rows are left over, as at
        the end of every epoch); rank j resumes with ShardReader(...,
        shard_index=j, shard_count=shard_count, state=result[j]): it serves
        its run, then the following epochs in the new layout. Nothing of the
        epoch is served twice; an elastic state can be resized again.
        """
        if isinstance(shard_count, bool) or not isinstance(shard_count, int) or shard_count < 1:
            raise ValueError(f"shard_count must be an integer >= 1, got {shard_count!r}")
        saved = [_parse_state(state) for state in states]
        if not saved:
            raise ValueError("elastic_states needs the state of every rank, got none")
        shared = {k: v for k, v in saved[0].items() if k not in _PER_RANK_FIELDS}
        for other in saved[1:]:
            differing = sorted(k for k in set(shared) | set(other)
                               if k not in _PER_RANK_FIELDS and other.get(k) != shared.get(k))
            if differing:
                raise ValueError(f"the states were taken with different settings: {', '.join(differing)}")
        old_count = saved[0]["shard_count"]
        indices = sorted(state["shard_index"] for state in saved)
        if indices != list(range(old_count)) or any(state["shard_count"] != old_count for state in saved):
            raise ValueError(f"need exactly one state per rank 0..{old_count - 1}, got ranks {indices}")
        epochs = {state["epoch"] for state in saved}
        if len(epochs) != 1:
            raise ValueError(f"the ranks are at different epochs {sorted(epochs)}: resume from a checkpoint where "
                             "they are at the same one")
        epoch = epochs.pop()
        total = _parse_total(shared)
        if shared.get("num_epochs") and epoch >= shared["num_epochs"]:  # the stream had ended: it stays ended
            return [json.dumps({**shared, "shard_index": rank, "shard_count": shard_count, "epoch": epoch,
                                "position": 0}, separators=(",", ":")).encode() for rank in range(shard_count)]
        remaining: list[tuple[int, int]] = []
        for state in saved:
            ranges = state.get("ranges")
            if ranges is None:  # the rank's own slice of the epoch
                per_rank = total // old_count
                ranges = [(state["shard_index"] * per_rank, (state["shard_index"] + 1) * per_rank)]
            position = state.get("position")
            if isinstance(position, bool) or not isinstance(position, int) or position < 0:
                raise ValueError(f"state field position {position!r} is not a row count")
            remaining += _skip_rows(_checked_ranges(ranges, total), position)
        remaining = _merged(remaining)
        per_rank = sum(hi - lo for lo, hi in remaining) // shard_count
        out = []
        for rank in range(shard_count):
            mine = _take_rows(_skip_rows(remaining, rank * per_rank), per_rank)
            out.append(json.dumps({**shared, "shard_index": rank, "shard_count": shard_count, "epoch": epoch,
                                   "position": 0, "ranges": [list(r) for r in mine]},
                                  separators=(",", ":")).encode())
        return out

    def state(self) -> bytes:
        """A small serialisable checkpoint: a reader built with it continues exactly here."""
        with self._lock:
            if self._elastic is not None:
                epoch, position = self._elastic.epoch, self._elastic.served
                extra = {"ranges": [list(r) for r in self._elastic.ranges]}
            else:
                epoch, position, extra = self._native.epoch, self._native.position, {}
        return json.dumps({"v": STATE_VERSION, **self._settings, "rows": self._total_rows, "epoch": epoch,
                           "position": position, **extra}, separators=(",", ":")).encode()

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
                batch = self._next_elastic() if self._elastic is not None else None
                if batch is None:
                    batch = self._native.next_batch()
        except NativeError as err:
            raise OutputError(str(err)) from None
        if batch is None:
            raise StopIteration
        if self._lc0 is not None:
            self._add_policy(batch)
        return batch

    def _add_policy(self, batch: dict) -> None:
        frames = batch["frame"]
        # The policy is the records' own 1858 float32 probabilities (after the version, and the input format
        # from V5 on): served in place, a strided view, instead of copying 7.4 kB a position.
        start = 8 if len(frames) == 0 or int(frames[0, :4].view("<u4")[0]) >= 5 else 4
        batch["policy"] = frames[:, start : start + 4 * POLICY_SIZE].view("<f4")

    def _next_elastic(self) -> dict | None:
        """The next batch of an elastic epoch (pieces read one at a time, batches cut across them),
        or None once it is done (the rank's own stream then starts)."""
        elastic = self._elastic
        left = elastic.total - elastic.served
        if left == 0 or (self._settings["drop_remainder"] and left < self._settings["batch_size"]):
            elastic.close()
            self._elastic = None
            self._native.start()
            return None
        need = min(self._settings["batch_size"], left)
        parts = []
        while need > 0:
            if elastic.pending is None:
                if elastic.piece is None:
                    elastic.piece = NativeReader(self._options(elastic.epoch, 0, elastic.next_piece()))
                    elastic.piece.start()
                elastic.pending = elastic.piece.next_batch()
                if elastic.pending is None:
                    elastic.piece.stop()
                    elastic.piece = None
                    continue
            rows = len(elastic.pending["record_index"])
            take = min(need, rows)
            parts.append({k: v[:take] if isinstance(v, np.ndarray) else v for k, v in elastic.pending.items()})
            elastic.pending = ({k: v[take:] if isinstance(v, np.ndarray) else v for k, v in elastic.pending.items()}
                               if take < rows else None)
            need -= take
        elastic.served += sum(len(part["record_index"]) for part in parts)
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([part[k] for part in parts]) if isinstance(v, np.ndarray) else v
                for k, v in parts[0].items()}

    def close(self) -> None:
        """Stops the decoding threads (idempotent)."""
        if self._elastic is not None:
            self._elastic.close()
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


# State fields that differ between the ranks of one run.
_PER_RANK_FIELDS = ("shard_index", "shard_count", "epoch", "position", "ranges")


class _ElasticEpoch:
    """The epoch an elastic state resumes: the rows of `ranges` (epoch positions), `served` already."""

    def __init__(self, epoch: int, ranges: list[tuple[int, int]], served: int):
        self.epoch = epoch
        self.ranges = ranges
        self.total = sum(hi - lo for lo, hi in ranges)
        self.served = served
        self._pieces = [r for r in _skip_rows(ranges, served) if r[1] > r[0]]
        self.piece = None  # the NativeReader of the piece being read
        self.pending: dict | None = None  # rows of its last batch not yet served

    def next_piece(self) -> tuple[int, int]:
        return self._pieces.pop(0)

    def close(self) -> None:
        if self.piece is not None:
            self.piece.stop()
            self.piece = None


def _parse_state(state: bytes) -> dict:
    try:
        saved = json.loads(state)
    except (ValueError, TypeError):
        raise ValueError("state is not a ShardReader state") from None
    if not isinstance(saved, dict) or saved.get("v") != STATE_VERSION:
        version = saved.get("v") if isinstance(saved, dict) else None
        raise ValueError(f"state version {version!r}, expected {STATE_VERSION}")
    return saved


def _parse_total(saved: dict) -> int:
    total = saved.get("rows")
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError("state has no row count (taken before elastic resume existed?)")
    return total


def _checked_ranges(ranges, total: int) -> list[tuple[int, int]]:
    """Sorted, disjoint [lo, hi) ranges of epoch positions within [0, total)."""
    if not isinstance(ranges, list) or len(ranges) > 1_000_000:
        raise ValueError("state field ranges is not a list of [begin, end] pairs")
    out, last = [], 0
    for item in ranges:
        if (not isinstance(item, (list, tuple)) or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in item)):
            raise ValueError(f"state field ranges holds {item!r}, not a [begin, end] pair of integers")
        lo, hi = item
        if not last <= lo <= hi <= total:
            raise ValueError(f"state field ranges: [{lo}, {hi}) is out of order or outside 0..{total}")
        out.append((lo, hi))
        last = hi
    return out


def _take_rows(ranges: list[tuple[int, int]], rows: int) -> list[tuple[int, int]]:
    """The first `rows` positions of `ranges`, as ranges."""
    out = []
    for lo, hi in ranges:
        if rows <= 0:
            break
        out.append((lo, min(hi, lo + rows)))
        rows -= out[-1][1] - lo
    return out


def _skip_rows(ranges: list[tuple[int, int]], rows: int) -> list[tuple[int, int]]:
    """`ranges` without their first `rows` positions."""
    out = []
    for lo, hi in ranges:
        skip = min(rows, hi - lo)
        rows -= skip
        if lo + skip < hi:
            out.append((lo + skip, hi))
    return out


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint ranges sorted, touching ones joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        elif hi > lo:
            out.append((lo, hi))
    return out


def frames_as(batch: dict, dtype: np.dtype, column: str = "frame") -> np.ndarray:
    """Views a fixed_size_binary column's (batch, width) bytes as records of a structured dtype."""
    return batch[column].view(dtype).reshape(len(batch[column]))
