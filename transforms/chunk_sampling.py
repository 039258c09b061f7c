"""Stage 3 kernels: chunk-pool window, threshold-gamma use counts, positions per use.

Plain numpy; every decision comes from keyed_hash, so it depends only on the
seed and chunk identities, never on order, bundles or workers.

Semantics (issue 3):
- Window: the newest `pool_size` chunks in (sort_key, chunk) order, i.e. whole
  sources newest first until the pool is covered, then the newest chunks of
  the last source.
- Passes: in each of P passes every chunk in the window is proposed once and
  accepted with p = min(1, n / threshold) ^ gamma. Each acceptance is one use;
  a use carries the chunk's use_count before the increment. So a chunk's uses
  are 0..k-1 with k ~ Binomial(P, p).
- Positions: a chunk's positions are visited in rounds; round r is a
  permutation of 0..n-1 keyed by (seed, chunk, r). Use u with position_count
  k takes the sequence's items u*k .. u*k+k-1, so uses never repeat a
  position before the chunk is exhausted. position_count 0 means all
  positions 0..n-1 for every use.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardmill.transforms.keyed_hash import (
    STREAM_ACCEPT,
    STREAM_POSITION_ORDER,
    STREAM_SHUFFLE,
    bounded,
    hash_words,
    mix64,
    unit_float,
)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    seed: int = 0
    passes: int = 1
    position_count: int = 0  # 0: every position of the chunk per use
    threshold: int = 0  # 0: every proposal accepted
    gamma: float = 1.0
    pool_size: int = 0  # 0: every chunk


def window_mask(sort_keys: np.ndarray, chunks: np.ndarray, pool_size: int) -> np.ndarray:
    """Bool mask of the chunks inside the window of the newest pool_size chunks."""
    n = len(chunks)
    if pool_size <= 0 or pool_size >= n:
        return np.ones(n, dtype=bool)
    order = np.lexsort((np.asarray(chunks), np.asarray(sort_keys)))  # oldest first
    mask = np.zeros(n, dtype=bool)
    mask[order[n - pool_size :]] = True
    return mask


def acceptance_probability(num_records: np.ndarray, threshold: int, gamma: float) -> np.ndarray:
    """min(1, n / threshold) ^ gamma per chunk; 1 everywhere without a threshold."""
    n = np.asarray(num_records, dtype=np.float64)
    if threshold <= 0:
        return np.ones_like(n)
    return np.minimum(1.0, n / float(threshold)) ** gamma


def use_counts(keys: np.ndarray, probability: np.ndarray, passes: int, seed: int) -> np.ndarray:
    """Number of accepted proposals of each chunk over `passes` passes."""
    counts = np.zeros(len(keys), dtype=np.int64)
    always = probability >= 1.0
    counts[always] = passes
    sampled = np.flatnonzero(~always & (probability > 0))
    for p in range(passes):  # one pass at a time bounds memory at O(chunks)
        u = unit_float(hash_words(seed, STREAM_ACCEPT, keys[sampled], p))
        counts[sampled] += u < probability[sampled]
    return counts


def round_permutation(key: int, num_records: int, round_index: int, seed: int) -> np.ndarray:
    """The order of positions 0..n-1 in round r of a chunk (a keyed shuffle)."""
    h = hash_words(seed, STREAM_POSITION_ORDER, np.uint64(key), round_index, np.arange(num_records))
    return np.argsort(h, kind="stable")


def positions_of_uses(key: int, num_records: int, num_uses: int, position_count: int, seed: int):
    """(use_count, position) arrays of every record the chunk's uses emit.

    position_count 0: every use emits all positions 0..n-1.
    Otherwise use u emits items u*k .. u*k+k-1 of the round-by-round sequence.
    """
    n = num_records
    if num_uses <= 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    if position_count <= 0:
        uses = np.repeat(np.arange(num_uses, dtype=np.int64), n)
        return uses, np.tile(np.arange(n, dtype=np.int64), num_uses)
    items = np.arange(num_uses * position_count, dtype=np.int64)
    rounds = items // n
    positions = np.empty_like(items)
    for r in range(int(rounds[-1]) + 1):
        in_round = rounds == r
        positions[in_round] = round_permutation(key, n, r, seed)[items[in_round] - r * n]
    return items // position_count, positions


def shuffle_keys(keys: np.ndarray, use_count: np.ndarray, position: np.ndarray, seed: int, num_shards: int):
    """(shard, order_key) of emitted records from a keyed hash of (seed, chunk, use, position)."""
    h = hash_words(seed, STREAM_SHUFFLE, keys, use_count, position)
    return bounded(h, num_shards).astype(np.int64), mix64(h)
