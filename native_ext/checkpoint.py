"""Reader checkpoints: the state a ShardReader resumes from, and states for a new number of ranks.

A state is a small JSON document: the reader's settings (so a state is never
applied to another order or dataset), the dataset's row count, and where the
rank is (epoch, position). An elastic state (elastic_states) also holds the
ranges of epoch positions a rank serves in the epoch it resumes; from the
next epoch on it follows the new layout.
"""

from __future__ import annotations

import json
from typing import Sequence

STATE_VERSION = 2  # 2: Feistel halves fit odd bit widths (other orders than 1)
MAX_EPOCH = 1 << 40  # of an unbounded reader's state: far beyond any run, far from overflow


# State fields that differ between the ranks of one run.
_PER_RANK_FIELDS = ("shard_index", "shard_count", "epoch", "position", "ranges")


class ElasticEpoch:
    """The epoch an elastic state resumes: the rows of `ranges` (epoch positions), `served` already."""

    def __init__(self, epoch: int, ranges: list[tuple[int, int]], served: int):
        self.epoch = epoch
        self.ranges = ranges
        self.total = sum(hi - lo for lo, hi in ranges)
        self.served = served
        self._pieces = [r for r in skip_rows(ranges, served) if r[1] > r[0]]
        self.piece = None  # the NativeReader of the piece being read
        self.pending: dict | None = None  # rows of its last batch not yet served

    def next_piece(self) -> tuple[int, int]:
        return self._pieces.pop(0)

    def close(self) -> None:
        if self.piece is not None:
            self.piece.stop()
            self.piece = None


def parse_state(state: bytes) -> dict:
    try:
        saved = json.loads(state)
    except (ValueError, TypeError):
        raise ValueError("state is not a ShardReader state") from None
    if not isinstance(saved, dict) or saved.get("v") != STATE_VERSION:
        version = saved.get("v") if isinstance(saved, dict) else None
        raise ValueError(f"state version {version!r}, expected {STATE_VERSION}")
    return saved


def state_generation(state: bytes) -> int | None:
    """The output generation a state was taken on; None for a state that does not say (older states)."""
    generation = parse_state(state).get("generation")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)
                                   or not 0 <= generation <= 999_999):
        raise ValueError(f"state field generation {generation!r} is outside 0..999999")
    return generation


def parse_total(saved: dict) -> int:
    total = saved.get("rows")
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError("state has no row count")
    return total


def checked_ranges(ranges, total: int) -> list[tuple[int, int]]:
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
    total = parse_total(shared)
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
        remaining += skip_rows(checked_ranges(ranges, total), position)
    remaining = merged(remaining)
    per_rank = sum(hi - lo for lo, hi in remaining) // shard_count
    out = []
    for rank in range(shard_count):
        mine = take_rows(skip_rows(remaining, rank * per_rank), per_rank)
        out.append(json.dumps({**shared, "shard_index": rank, "shard_count": shard_count, "epoch": epoch,
                               "position": 0, "ranges": [list(r) for r in mine]},
                              separators=(",", ":")).encode())
    return out
