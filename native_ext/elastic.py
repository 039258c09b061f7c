"""Elastic resume: states for a new number of ranks that continue what the old ranks left of their epoch, and
the epoch such a state resumes, batched across its pieces.

The rows of the epoch the ranks still had to serve are split into equal runs
in epoch order; a rank serves its run (an elastic epoch: one or more ranges of
epoch positions, each read as a slice by a native reader of its own), then
the following epochs in the new layout.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from shardmill.native_ext.checkpoint import (EPOCH, NUM_EPOCHS, PER_RANK_FIELDS, POSITION, RANGES, SHARD_COUNT,
                                             SHARD_INDEX, checked_ranges, dump_state, parse_state, parse_total)


def take_rows(ranges: list[tuple[int, int]], rows: int) -> list[tuple[int, int]]:
    """The first `rows` positions of `ranges`, as ranges."""
    out = []
    for lo, hi in ranges:
        if rows <= 0:
            break
        out.append((lo, min(hi, lo + rows)))
        rows -= out[-1][1] - lo
    return out


def skip_rows(ranges: list[tuple[int, int]], rows: int) -> list[tuple[int, int]]:
    """`ranges` without their first `rows` positions."""
    out = []
    for lo, hi in ranges:
        skip = min(rows, hi - lo)
        rows -= skip
        if lo + skip < hi:
            out.append((lo + skip, hi))
    return out


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Disjoint ranges sorted, touching ones joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        elif hi > lo:
            out.append((lo, hi))
    return out


def elastic_states(states: Sequence[bytes], shard_count: int) -> list[bytes]:
    """States for `shard_count` ranks that continue what the ranks of `states` left of their epoch.

    `states` are the state() of every rank of one run (all shard_index
    values of its shard_count, taken at the same epoch). The rows of that
    epoch the ranks still had to serve are split into `shard_count` equal
    runs in epoch order (fewer than shard_count rows are left over, as at
    the end of every epoch); rank j resumes with ShardReader(...,
    shard_options=ShardOptions(j, shard_count), state=result[j]): it serves
    its run, then the following epochs in the new layout. Nothing of the
    epoch is served twice; an elastic state can be resized again.
    """
    if isinstance(shard_count, bool) or not isinstance(shard_count, int) or shard_count < 1:
        raise ValueError(f"shard_count must be an integer >= 1, got {shard_count!r}")
    saved = [parse_state(state) for state in states]
    if not saved:
        raise ValueError("elastic_states needs the state of every rank, got none")
    shared = {k: v for k, v in saved[0].items() if k not in PER_RANK_FIELDS}
    for other in saved[1:]:
        differing = sorted(k for k in set(shared) | set(other)
                           if k not in PER_RANK_FIELDS and other.get(k) != shared.get(k))
        if differing:
            raise ValueError(f"the states were taken with different settings: {', '.join(differing)}")
    old_count = saved[0][SHARD_COUNT]
    indices = sorted(state[SHARD_INDEX] for state in saved)
    if indices != list(range(old_count)) or any(state[SHARD_COUNT] != old_count for state in saved):
        raise ValueError(f"need exactly one state per rank 0..{old_count - 1}, got ranks {indices}")
    epochs = {state[EPOCH] for state in saved}
    if len(epochs) != 1:
        raise ValueError(f"the ranks are at different epochs {sorted(epochs)}: resume from a checkpoint where "
                         "they are at the same one")
    epoch = epochs.pop()
    total = parse_total(shared)
    if shared.get(NUM_EPOCHS) and epoch >= shared[NUM_EPOCHS]:  # the stream had ended: it stays ended
        return [dump_state({**shared, SHARD_INDEX: rank, SHARD_COUNT: shard_count, EPOCH: epoch, POSITION: 0})
                for rank in range(shard_count)]
    remaining: list[tuple[int, int]] = []
    for state in saved:
        ranges = state.get(RANGES)
        if ranges is None:  # the rank's own slice of the epoch
            per_rank = total // old_count
            ranges = [(state[SHARD_INDEX] * per_rank, (state[SHARD_INDEX] + 1) * per_rank)]
        position = state.get(POSITION)
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"state field {POSITION} {position!r} is not a row count")
        remaining += skip_rows(checked_ranges(ranges, total), position)
    remaining = merged(remaining)
    per_rank = sum(hi - lo for lo, hi in remaining) // shard_count
    out = []
    for rank in range(shard_count):
        mine = take_rows(skip_rows(remaining, rank * per_rank), per_rank)
        out.append(dump_state({**shared, SHARD_INDEX: rank, SHARD_COUNT: shard_count, EPOCH: epoch, POSITION: 0,
                               RANGES: [list(r) for r in mine]}))
    return out


def _rows(batch: dict) -> int:
    return len(batch["record_index"])


class ElasticEpoch:
    """The epoch an elastic state resumes: the rows of `ranges` (epoch positions), `served` already; its pieces
    (one per range left) read one at a time, batches cut across them."""

    def __init__(self, epoch: int, ranges: list[tuple[int, int]], served: int,
                 open_piece: Callable[[int, tuple[int, int]], object]):
        """open_piece(epoch, (begin, end)): a started native reader of exactly that slice of that epoch."""
        self.epoch = epoch
        self.ranges = ranges
        self.total = sum(hi - lo for lo, hi in ranges)
        self.served = served
        self._pieces = [r for r in skip_rows(ranges, served) if r[1] > r[0]]
        self._open_piece = open_piece
        self._piece = None  # the native reader of the piece being read
        self._pending: dict | None = None  # rows of its last batch not yet served

    def next_batch(self, batch_size: int, drop_remainder: bool) -> dict | None:
        """The next batch of the epoch, or None once it is done (the rank's own stream then starts)."""
        left = self.total - self.served
        if left == 0 or (drop_remainder and left < batch_size):
            self.close()
            return None
        need = min(batch_size, left)
        parts = []
        while need > 0:
            if self._pending is None:
                if self._piece is None:
                    self._piece = self._open_piece(self.epoch, self._pieces.pop(0))
                self._pending = self._piece.next_batch()
                if self._pending is None:
                    self._piece.stop()
                    self._piece = None
                    continue
            rows = _rows(self._pending)
            take = min(need, rows)
            parts.append({k: v[:take] if isinstance(v, np.ndarray) else v for k, v in self._pending.items()})
            self._pending = ({k: v[take:] if isinstance(v, np.ndarray) else v for k, v in self._pending.items()}
                             if take < rows else None)
            need -= take
        self.served += sum(_rows(part) for part in parts)
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([part[k] for part in parts]) if isinstance(v, np.ndarray) else v
                for k, v in parts[0].items()}

    def close(self) -> None:
        if self._piece is not None:
            self._piece.stop()
            self._piece = None
