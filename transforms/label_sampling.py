"""Label sampling kernels: keep every target, a fixed ratio of non-targets (issue 5).

Plain Python/numpy over one partition's labels in record order. Randomness is
keyed (DESIGN.md rule 2): reservoir draws by (seed, partition key, gap,
draw counter), EXACT priorities by (seed, partition key, record index).

ITERATIVE: a reservoir of size round(ratio) collects the non-targets since
the last target; a target emits the reservoir (in record order), then
itself, and a fresh reservoir starts; the last reservoir is emitted at the
end of the partition.
ADAPTIVE: as ITERATIVE, but the reservoir after t emitted targets and n
emitted non-targets has size round(ratio * (t + 1) - n) (at least 0): if the
next target were the partition's last, its ratio would be exact.
Reservoirs use Algorithm L (Li, 1994): O(k (1 + log(m / k))) random draws for
a gap of m non-targets and a reservoir of k, not one per record.
EXACT: every non-target gets a keyed uniform priority; the run keeps the
round(ratio * total targets) smallest priorities over all partitions (bottom-k
with one global threshold), so each non-target is kept with the same
probability whatever the partitions and target densities are.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from shardmill.transforms.keyed_hash import (
    STREAM_LABEL_EXACT,
    STREAM_LABEL_RESERVOIR,
    hash_int,
    hash_words,
)

MODES = ("ITERATIVE", "ADAPTIVE")
_TWO_TO_MINUS_53 = 1.0 / (1 << 53)


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


class _Draws:
    """Keyed uniform draws for one gap: u in (0, 1) and integers in [0, n)."""

    def __init__(self, seed: int, partition_key: int, gap: int):
        self._words = (seed, STREAM_LABEL_RESERVOIR, partition_key, gap)
        self._counter = 0

    def _next(self) -> int:
        seed, stream, key, gap = self._words
        self._counter += 1
        return hash_int(seed, stream, key, gap, self._counter)

    def uniform(self) -> float:
        return ((self._next() >> 11) + 0.5) * _TWO_TO_MINUS_53

    def below(self, n: int) -> int:
        return ((self._next() >> 32) * n) >> 32


def reservoir_sample(m: int, k: int, seed: int, partition_key: int, gap: int) -> tuple[np.ndarray, int]:
    """(ascending offsets of a uniform k-subset of range(m), number of random draws) by Algorithm L."""
    if k <= 0 or m <= 0:
        return np.zeros(0, dtype=np.int64), 0
    if m <= k:
        return np.arange(m, dtype=np.int64), 0
    draws = _Draws(seed, partition_key, gap)
    reservoir = list(range(k))
    w = math.exp(math.log(draws.uniform()) / k)
    i = k - 1
    while True:
        i += int(math.floor(math.log(draws.uniform()) / math.log1p(-w))) + 1
        if i >= m:
            break
        reservoir[draws.below(k)] = i
        w *= math.exp(math.log(draws.uniform()) / k)
    return np.sort(np.array(reservoir, dtype=np.int64)), draws._counter


@dataclasses.dataclass
class PartitionSample:
    emitted: np.ndarray  # record indices in emission order
    targets: int
    non_targets_in: int
    non_targets_out: int
    reservoir_sizes: list[int]  # per gap, in order (the last one is the trailing gap's)
    draws: int  # random numbers used

    @property
    def ratio(self) -> float:
        return self.non_targets_out / self.targets if self.targets else math.inf


def sample_partition(is_target: np.ndarray, ratio: float, mode: str, seed: int, partition_key: int) -> PartitionSample:
    """ITERATIVE or ADAPTIVE one-pass sampling of one partition's records (in order)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not ratio > 0 or not math.isfinite(ratio):
        raise ValueError(f"ratio must be a positive number, got {ratio}")
    is_target = np.asarray(is_target, dtype=bool)
    targets = np.flatnonzero(is_target)
    starts = np.concatenate([[0], targets + 1])  # gap g runs from starts[g] to ends[g]
    ends = np.concatenate([targets, [len(is_target)]])
    pieces, sizes = [], []
    emitted_targets = emitted_non_targets = draws = 0
    for gap, (start, end) in enumerate(zip(starts, ends)):
        if mode == "ITERATIVE":
            k = round_half_up(ratio)
        else:
            k = max(0, round_half_up(ratio * (emitted_targets + 1) - emitted_non_targets))
        sizes.append(k)
        chosen, used = reservoir_sample(int(end - start), k, seed, partition_key, gap)
        draws += used
        pieces.append(chosen + start)
        emitted_non_targets += len(chosen)
        if gap < len(targets):
            pieces.append(np.array([targets[gap]], dtype=np.int64))
            emitted_targets += 1
    emitted = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return PartitionSample(emitted, len(targets), int((~is_target).sum()), emitted_non_targets, sizes, draws)


def exact_priorities(is_target: np.ndarray, seed: int, partition_key: int) -> np.ndarray:
    """Keyed uniform uint64 priority of every record (only non-targets' are used)."""
    return hash_words(seed, STREAM_LABEL_EXACT, np.uint64(partition_key), np.arange(len(is_target), dtype=np.uint64))


def exact_keep_count(total_targets: int, total_non_targets: int, ratio: float) -> int:
    """How many non-targets EXACT keeps: round(ratio * targets), or all of them if fewer exist."""
    return min(total_non_targets, round_half_up(ratio * total_targets))


def bottom_k(priorities: np.ndarray, k: int) -> np.ndarray:
    """The k smallest priorities, ascending (a partition's candidates for the global threshold)."""
    if k <= 0:
        return np.zeros(0, dtype=np.uint64)
    if k >= len(priorities):
        return np.sort(priorities)
    return np.sort(np.partition(priorities, k - 1)[:k])


def exact_threshold(candidates: list[np.ndarray], keep: int) -> int | None:
    """The global priority threshold: the keep-th smallest over all partitions' bottom-k lists.

    Each partition contributes its `keep` smallest non-target priorities; a
    non-target is kept iff its priority <= the returned value (None: keep none).
    Ties have probability ~n^2 / 2^64 and are ignored.
    """
    if keep <= 0:
        return None
    merged = np.sort(np.concatenate(candidates)) if candidates else np.zeros(0, np.uint64)
    return int(merged[keep - 1])


def exact_select(is_target: np.ndarray, priorities: np.ndarray, threshold: int | None) -> np.ndarray:
    """Record indices a partition emits in EXACT mode (record order): targets and kept non-targets."""
    keep = np.asarray(is_target, dtype=bool).copy()
    if threshold is not None:
        keep |= priorities <= np.uint64(threshold)
    return np.flatnonzero(keep)
