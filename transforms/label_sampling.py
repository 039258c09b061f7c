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
probability whatever the partitions and target densities are.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from shardmill.native_ext import _native
from shardmill.transforms.keyed_hash import STREAM_LABEL_EXACT, hash_words

MODES = ("ITERATIVE", "ADAPTIVE")


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def reservoir_sample(m: int, k: int, seed: int, partition_key: int, gap: int) -> tuple[np.ndarray, int]:
    """(ascending offsets of a uniform k-subset of range(m), number of random draws) by Algorithm L.

    Runs in the native extension (about 100x the Python reference in
    tests/reference_label_sampling.py, which it matches bit for bit).
    """
    return _native.reservoir_sample(m, k, seed, partition_key, gap)


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
    emitted, sizes, non_targets_out, draws = _native.sample_labels(
        is_target.view(np.uint8), float(ratio), mode == "ADAPTIVE", seed, partition_key)
    targets = int(is_target.sum())
    return PartitionSample(emitted, targets, len(is_target) - targets, int(non_targets_out), list(sizes), int(draws))


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
