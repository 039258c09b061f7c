"""Label sampling kernels: keep every target, a fixed ratio of non-targets.

Plain Python/numpy over one partition's labels in record order. Randomness is
keyed (ARCHITECTURE.md, rule "randomness is a pure function"): reservoir
draws by (seed, partition key, gap, draw counter), EXACT priorities by (seed,
partition key, record index).

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
probability whatever the partitions and target densities are. The threshold
is found without gathering k priorities anywhere: a histogram of the top 16
bits of every priority (summed over partitions) names the bucket holding the
k-th smallest, and only that bucket's priorities (about non-targets / 65536)
are gathered and sorted.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from shardmill.core import kernels
from shardmill.transforms.common.keyed_hash import STREAM_LABEL_EXACT, hash_words

MODES = ("ITERATIVE", "ADAPTIVE")


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def reservoir_sample(m: int, k: int, seed: int, partition_key: int, gap: int) -> tuple[np.ndarray, int]:
    """(ascending offsets of a uniform k-subset of range(m), number of random draws) by Algorithm L.

    Runs in the native extension (about 100x the Python reference in
    tests/support/reference_label_sampling.py, which it matches bit for bit).
    """
    return kernels.reservoir_sample(m, k, seed, partition_key, gap)


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
    emitted, sizes, non_targets_out, draws = kernels.sample_labels(
        is_target.view(np.uint8), float(ratio), mode == "ADAPTIVE", seed, partition_key)
    targets = int(is_target.sum())
    return PartitionSample(emitted, targets, len(is_target) - targets, int(non_targets_out), list(sizes), int(draws))


def exact_priorities(is_target: np.ndarray, seed: int, partition_key: int, first_row: int = 0) -> np.ndarray:
    """Keyed uniform uint64 priority of every record (only non-targets' are used); is_target may be a slice of
    the partition's records starting at first_row."""
    return hash_words(seed, STREAM_LABEL_EXACT, np.uint64(partition_key),
                      np.arange(first_row, first_row + len(is_target), dtype=np.uint64))


def exact_keep_count(total_targets: int, total_non_targets: int, ratio: float) -> int:
    """How many non-targets EXACT keeps: round(ratio * targets), or all of them if fewer exist."""
    return min(total_non_targets, round_half_up(ratio * total_targets))


CUT_BITS = 16  # the priority histogram's buckets: the top 16 bits of a priority


def priority_histogram(priorities: np.ndarray) -> np.ndarray:
    """Counts of priorities per bucket of their top CUT_BITS bits (int64, 2**CUT_BITS entries)."""
    top = (np.asarray(priorities, np.uint64) >> np.uint64(64 - CUT_BITS)).astype(np.intp)
    return np.bincount(top, minlength=1 << CUT_BITS).astype(np.int64)


def exact_cut(histogram: np.ndarray, keep: int) -> tuple[int, int] | None:
    """(bucket, rank) of the keep-th smallest priority: its bucket, and its 1-based rank among that
    bucket's priorities. None when nothing is kept."""
    if keep <= 0:
        return None
    below = np.cumsum(histogram)
    bucket = int(np.searchsorted(below, keep))  # first bucket whose running count reaches keep
    if bucket >= len(histogram):
        raise ValueError(f"keep {keep} exceeds the {int(below[-1])} priorities in the histogram")
    return bucket, keep - (int(below[bucket - 1]) if bucket else 0)


def in_bucket(priorities: np.ndarray, bucket: int) -> np.ndarray:
    """The priorities that fall in one bucket of priority_histogram."""
    priorities = np.asarray(priorities, np.uint64)
    return priorities[(priorities >> np.uint64(64 - CUT_BITS)) == np.uint64(bucket)]


def exact_threshold(bucket_priorities: list[np.ndarray], rank: int) -> int:
    """The global priority threshold: the rank-th smallest priority of the cut's bucket, over all partitions.

    A non-target is kept iff its priority <= the returned value, which keeps
    exactly the keep smallest priorities of the run. Ties have probability
    ~n^2 / 2^64 and are ignored.
    """
    merged = np.sort(np.concatenate(bucket_priorities)) if bucket_priorities else np.zeros(0, np.uint64)
    return int(merged[rank - 1])


def exact_select(is_target: np.ndarray, priorities: np.ndarray, threshold: int | None) -> np.ndarray:
    """Record indices a partition emits in EXACT mode (record order): targets and kept non-targets."""
    keep = np.asarray(is_target, dtype=bool).copy()
    if threshold is not None:
        keep |= priorities <= np.uint64(threshold)
    return np.flatnonzero(keep)
