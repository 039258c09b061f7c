"""PyTorch adapter: a shardmill output directory as an IterableDataset of tensor batches.

Rank and DataLoader-worker aware: reader shard = rank * num_workers + worker,
of world_size * num_workers, so every worker of every rank reads a disjoint,
equal slice of each epoch's global order. Readers are created inside
__iter__, i.e. in the worker process after the fork, so no decoding thread
is ever forked. Requires torch (not a shardmill dependency).

Epochs advance the way training loops expect: each pass over the loader
(`for batch in loader`) serves the next `num_epochs` epochs of the order
(pass p: epochs p·n … p·n + n − 1), with or without workers, persistent or
not; `set_epoch(e)` makes the next pass start at epoch e (what
DistributedSampler users call before every pass), so `for e in range(E):
dataset.set_epoch(e); for batch in loader: …` serves epoch e's order in
pass e. The pass counters live in a small shared-memory array created with
the dataset, which the DataLoader's worker processes share.

len(dataset) (and so len(loader)) is the number of batches one pass serves
on this rank, across the DataLoader's workers: it needs `loader_workers`,
the DataLoader's num_workers, since the dataset cannot see the loader (a
loader with another worker count is then refused when iterated), and a
bounded pass (num_epochs). A pass resumed from a checkpoint serves fewer.

Checkpoints: with num_workers=0, `dataset.state_dict()` / `load_state_dict()`
resume exactly. With workers, use torchdata's `StatefulDataLoader`: it calls
state_dict() in each worker and hands each worker its own state back, and
the stream continues exactly (same worker count). A `state_dict()` in the
main process while workers are mid-pass raises instead of returning a state
that would restart the pass.

    loader = torch.utils.data.DataLoader(
        ShardIterableDataset("out/run1", batch_size=512, order_options=OrderOptions(seed=0)),
        batch_size=None, num_workers=4)
"""

from __future__ import annotations

import ctypes
import multiprocessing
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import torch
import torch.distributed
import torch.utils.data

from shardmill.native_ext.converters import Converter
from shardmill.native_ext.dataset import load_manifest
from shardmill.native_ext.options import OrderOptions, ReadOptions, ShardOptions, checked_reader_options
from shardmill.native_ext.reader import ShardReader

MAX_WORKERS = 256  # DataLoader workers per dataset whose passes are counted
_SLOTS = 1 + MAX_WORKERS  # slot 0: the main process (no workers); 1 + w: worker w


def _checked_epoch(epoch) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")
    return epoch


def _tensors(batch: dict, planes: str | None) -> dict:
    """A batch's arrays as torch tensors (bfloat16 planes, which numpy holds as their uint16 bits, as bfloat16)."""
    out = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray) and v.dtype != object:
            out[k] = torch.from_numpy(v)
        elif isinstance(v, (np.ndarray, pa.Array)):  # strings, lists, columns with nulls: Python lists
            out[k] = v.tolist() if isinstance(v, np.ndarray) else v.to_pylist()
        else:
            out[k] = v
    if planes == "bfloat16" and "planes" in out:
        out["planes"] = out["planes"].view(torch.bfloat16)
    return out


class ShardIterableDataset(torch.utils.data.IterableDataset):
    """Yields dicts of torch tensors (frames as uint8 (batch, width)), plus `epoch`; strings, lists and
    columns with nulls as Python lists.

    rank / world_size default to torch.distributed's when it is initialized,
    else 0 / 1; the dataset makes each worker's ShardOptions from them.
    num_epochs: epochs per pass over the loader (None: one unbounded pass).
    loader_workers: the DataLoader's num_workers, for len() (see the module doc).
    The other arguments are ShardReader's.
    """

    def __init__(self, path: str, batch_size: int = 256, columns: Sequence[str] | None = None, *,
                 rank: int | None = None, world_size: int | None = None, num_epochs: int | None = 1,
                 drop_remainder: bool = False, order_options: OrderOptions = OrderOptions(),
                 read_options: ReadOptions = ReadOptions(), converter: Converter | None = None,
                 loader_workers: int | None = None):
        super().__init__()
        if num_epochs is not None and num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1 or None, got {num_epochs}")
        if loader_workers is not None and (isinstance(loader_workers, bool) or not isinstance(loader_workers, int)
                                           or not 0 <= loader_workers <= MAX_WORKERS):
            raise ValueError(f"loader_workers must be an integer in 0..{MAX_WORKERS}, got {loader_workers!r}")
        self._loader_workers = loader_workers
        self._rows: int | None = None
        self._path = path
        self._batch_size = batch_size
        self._columns = None if columns is None else list(columns)
        self._rank = rank
        self._world_size = world_size
        self._num_epochs = num_epochs
        self._reader_options = {"drop_remainder": drop_remainder, "converter": converter,
                                **checked_reader_options(order_options=order_options, read_options=read_options)}
        self._reader: ShardReader | None = None
        self._pass_epoch = 0
        self._resume: dict | None = None
        # Per slot s: [s] the epoch its pass count starts from (set_epoch, a resume); [_SLOTS + s] passes it has
        # started since; [2 * _SLOTS + s] 1 while it is mid-pass. Each worker's count and start are its own: a
        # worker resuming mid-pass must not move the pass of a worker that has not started its own yet.
        self._shared = multiprocessing.RawArray(ctypes.c_int64, 3 * _SLOTS)

    def _rank_and_world(self) -> tuple[int, int]:
        rank, world = self._rank, self._world_size
        if rank is None or world is None:
            initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = torch.distributed.get_rank() if initialized else 0
            world = torch.distributed.get_world_size() if initialized else 1
        return rank, world

    def reader_shard(self) -> tuple[int, int]:
        """(shard_index, shard_count) of the reader this process's iterator uses."""
        rank, world = self._rank_and_world()
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if self._loader_workers is not None and (workers if info is not None else 0) != self._loader_workers:
            raise ValueError(f"the DataLoader has num_workers={workers if info is not None else 0}, the dataset "
                             f"was given loader_workers={self._loader_workers} (its len() counts on that)")
        return rank * workers + worker, world * workers

    def __len__(self) -> int:
        """Batches one pass serves on this rank, across the DataLoader's workers (see the module doc)."""
        if self._num_epochs is None:
            raise TypeError("len() of a ShardIterableDataset with num_epochs=None: the pass has no end")
        if self._loader_workers is None:
            raise TypeError("len() of a ShardIterableDataset needs loader_workers=<the DataLoader's num_workers>")
        if self._rows is None:
            self._rows = sum(s["rows"] for s in load_manifest(self._path)["shards"])
        _, world = self._rank_and_world()
        readers = max(1, self._loader_workers)
        rows = self._rows // (world * readers)  # the reader's rank slice: equal, the remainder left out
        size = self._batch_size
        batches = rows // size if self._reader_options["drop_remainder"] else -(-rows // size)
        return readers * batches * self._num_epochs

    def set_epoch(self, epoch: int) -> None:
        """The next pass starts at this epoch (then epoch + num_epochs, ...)."""
        self._start_passes_at(_checked_epoch(epoch), range(_SLOTS))

    def _start_passes_at(self, epoch: int, slots) -> None:
        for slot in slots:
            self._shared[slot] = epoch
            self._shared[_SLOTS + slot] = 0

    def _own_slots(self) -> range:
        """The slots a state restored here sets: in a DataLoader worker its own (each worker restores its own
        state), in the main process all (the workers a loader starts later follow on from it)."""
        slot = self._slot()
        return range(slot, slot + 1) if slot else range(_SLOTS)

    def _next_pass_epoch(self, slot: int) -> int:
        return self._shared[slot] + self._shared[_SLOTS + slot] * self._epochs_per_pass()

    @staticmethod
    def _slot() -> int:
        info = torch.utils.data.get_worker_info()
        if info is None:
            return 0
        if info.id >= MAX_WORKERS:
            raise ValueError(f"at most {MAX_WORKERS} DataLoader workers per dataset, got worker {info.id}")
        return 1 + info.id

    def _epochs_per_pass(self) -> int:
        return self._num_epochs if self._num_epochs is not None else 0

    def __iter__(self) -> Iterator[dict]:
        slot = self._slot()
        shard_index, shard_count = self.reader_shard()
        per_pass = self._epochs_per_pass()
        state = None
        if self._resume is not None:
            # The pass a checkpoint was taken in; the passes after it follow on from it.
            self._pass_epoch, state = self._resume["pass_epoch"], self._resume["reader_state"]
            self._start_passes_at(self._pass_epoch + per_pass, self._own_slots())
            self._resume = None
        else:
            self._pass_epoch = self._next_pass_epoch(slot)
            self._shared[_SLOTS + slot] += 1
        num_epochs = None if self._num_epochs is None else self._pass_epoch + self._num_epochs
        kwargs = {"state": state} if state is not None else {"start_epoch": self._pass_epoch}
        self._reader = ShardReader(self._path, self._batch_size, self._columns, num_epochs=num_epochs,
                                   shard_options=ShardOptions(shard_index, shard_count), **kwargs,
                                   **self._reader_options)
        self._shared[2 * _SLOTS + slot] = 1
        try:
            with self._reader as reader:
                for batch in reader:
                    yield _tensors(batch, getattr(self._reader_options["converter"], "planes", None))
        finally:
            self._shared[2 * _SLOTS + slot] = 0
            self._reader = None

    def state_dict(self) -> dict:
        """Where this process's stream is: mid-pass, the reader's checkpoint; between passes, the next pass.

        Raises RuntimeError in the main process while DataLoader workers hold
        the readers (their positions are not known here: use StatefulDataLoader)."""
        if self._reader is not None:
            return {"reader_state": self._reader.state(), "pass_epoch": self._pass_epoch}
        if torch.utils.data.get_worker_info() is None and any(
                self._shared[2 * _SLOTS + 1 + w] for w in range(MAX_WORKERS)):
            raise RuntimeError("ShardIterableDataset.state_dict(): DataLoader workers are mid-pass and hold the "
                               "readers, so this process does not know their positions; checkpoint with "
                               "torchdata's StatefulDataLoader (it collects each worker's state) or use "
                               "num_workers=0")
        if self._resume is not None:
            return dict(self._resume)
        # A worker that has served nothing yet: the pass it is in (or about to begin), not the one after it.
        return {"reader_state": None, "pass_epoch": self._next_pass_epoch(self._slot())}

    def load_state_dict(self, state: dict) -> None:
        """The next pass continues from `state` (a state_dict() of the same settings and worker count)."""
        if not isinstance(state, dict) or "pass_epoch" not in state or "reader_state" not in state:
            raise ValueError("not a ShardIterableDataset state_dict()")
        if state["reader_state"] is None:
            self._start_passes_at(_checked_epoch(int(state["pass_epoch"])), self._own_slots())
            self._resume = None
        else:
            self._resume = {"reader_state": state["reader_state"], "pass_epoch": int(state["pass_epoch"])}
