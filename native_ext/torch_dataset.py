"""PyTorch adapter: a shardmill output directory as an IterableDataset of tensor batches.

Rank and DataLoader-worker aware: reader shard = rank * num_workers + worker,
of world_size * num_workers, so every worker of every rank reads a disjoint,
equal slice of each epoch's global order. Readers are created inside
__iter__, i.e. in the worker process after the fork, so no decoding thread
is ever forked. Requires torch (not a shardmill dependency).

    loader = torch.utils.data.DataLoader(
        ShardIterableDataset("out/run1", batch_size=512, seed=0, num_epochs=None),
        batch_size=None, num_workers=4)   # batches are already batched
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch
import torch.distributed
import torch.utils.data

from shardmill.native_ext.reader import ShardReader


class ShardIterableDataset(torch.utils.data.IterableDataset):
    """Yields dicts of torch tensors (frames as uint8 (batch, width)), plus `epoch`.

    rank / world_size default to torch.distributed's when it is initialized,
    else 0 / 1. Other keyword arguments go to ShardReader. With
    num_workers=0, state_dict()/load_state_dict() checkpoint the stream exactly.
    """

    def __init__(self, path: str, batch_size: int = 256, columns: Sequence[str] = ("frame",), *,
                 rank: int | None = None, world_size: int | None = None, **reader_kwargs):
        super().__init__()
        self._path = path
        self._batch_size = batch_size
        self._columns = list(columns)
        self._rank = rank
        self._world_size = world_size
        self._reader_kwargs = reader_kwargs
        self._reader: ShardReader | None = None
        self._resume_state: bytes | None = None

    def reader_shard(self) -> tuple[int, int]:
        """(shard_index, shard_count) of the reader this process's iterator uses."""
        rank, world = self._rank, self._world_size
        if rank is None or world is None:
            initialized = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = torch.distributed.get_rank() if initialized else 0
            world = torch.distributed.get_world_size() if initialized else 1
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return rank * workers + worker, world * workers

    def __iter__(self) -> Iterator[dict]:
        shard_index, shard_count = self.reader_shard()
        self._reader = ShardReader(self._path, self._batch_size, self._columns, shard_index=shard_index,
                                   shard_count=shard_count, state=self._resume_state, **self._reader_kwargs)
        self._resume_state = None
        with self._reader as reader:
            for batch in reader:
                yield {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}

    def state_dict(self) -> dict:
        """The reader's checkpoint (iteration in this process, i.e. num_workers=0)."""
        if self._reader is None:
            return {"reader_state": self._resume_state}
        return {"reader_state": self._reader.state()}

    def load_state_dict(self, state: dict) -> None:
        self._resume_state = state["reader_state"]
