"""Stage 3 kernels: threshold-gamma use counts, positions per use, shard keys.

Plain numpy; every decision comes from keyed_hash, so it depends only on the
seed and chunk identities, never on order, bundles or workers.

Semantics:
- Window (decided in job_plan): the newest `pool_size` chunks in (sort_key,
  chunk) order, i.e. whole sources newest first until the pool is covered,
  then the newest chunks of the last source.
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

from shardmill.transforms.common.keyed_hash import (STREAM_ACCEPT, STREAM_POSITION_ORDER, STREAM_SHUFFLE, bounded,
                                                    hash_words, mix64, unit_float)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    seed: int = 0
    passes: int = 1
    position_count: int = 0  # 0: every position of the chunk per use
    threshold: int = 0  # 0: every proposal accepted
    gamma: float = 1.0
    pool_size: int = 0  # 0: every chunk


def acceptance_probability(num_records: np.ndarray, threshold: int, gamma: float) -> np.ndarray:
    """min(1, n / threshold) ^ gamma per chunk; 1 everywhere without a threshold."""
    n = np.asarray(num_records, dtype=np.float64)
    if threshold <= 0:
        return np.ones_like(n)
    return np.minimum(1.0, n / float(threshold)) ** gamma


def use_counts(keys: np.ndarray, probability: np.ndarray, passes: int, seed: int) -> np.ndarray:
    """Number of accepted proposals of each chunk over `passes` passes.

    Draw p of a chunk is keyed by (seed, chunk, p); blocks of passes are drawn
    at once over at most ~2^20 (chunk, pass) pairs, so memory stays bounded
    and a million passes cost seconds, not a Python loop per pass.
    """
    counts = np.zeros(len(keys), dtype=np.int64)
    always = probability >= 1.0
    counts[always] = passes
    sampled = np.flatnonzero(~always & (probability > 0))
    if len(sampled) == 0:
        return counts
    sampled_keys = keys[sampled][:, None]
    sampled_p = probability[sampled][:, None]
    block = max(1, (1 << 20) // len(sampled))
    for start in range(0, passes, block):
        passes_block = np.arange(start, min(passes, start + block), dtype=np.uint64)[None, :]
        u = unit_float(hash_words(seed, STREAM_ACCEPT, sampled_keys, passes_block))
        counts[sampled] += (u < sampled_p).sum(axis=1)
    return counts


def round_permutation(key: int, num_records: int, round_index: int, seed: int) -> np.ndarray:
    """The order of positions 0..n-1 in round r of a chunk (a keyed shuffle)."""
    h = hash_words(seed, STREAM_POSITION_ORDER, np.uint64(key), round_index, np.arange(num_records))
    return np.argsort(h, kind="stable")


def emissions(key: int, num_records: int, position_count: int, seed: int, start: int, stop: int):
    """(use_count, position) of a chunk's emissions start..stop-1.

    A chunk's emissions are the records its uses emit, use by use: with
    position_count 0 each use emits positions 0..n-1 (emission e is use
    e // n, position e % n); otherwise use u emits items u*k .. u*k+k-1 of
    the round-by-round position sequence (emission e is use e // k, item e).
    Memory is O(stop - start + n) whatever the number of uses, so a plan may
    cut a chunk's emissions into bounded ranges.
    """
    n = num_records
    items = np.arange(start, stop, dtype=np.int64)
    if position_count <= 0:
        return items // n, items % n
    positions = np.empty_like(items)
    if len(items):
        rounds = items // n
        for r in range(int(rounds[0]), int(rounds[-1]) + 1):
            lo, hi = np.searchsorted(rounds, [r, r + 1])
            positions[lo:hi] = round_permutation(key, n, r, seed)[items[lo:hi] - r * n]
    return items // position_count, positions


def shuffle_keys(keys: np.ndarray, use_count: np.ndarray, position: np.ndarray, seed: int, num_shards: int):
    """(shard, order_key) of emitted records from a keyed hash of (seed, chunk, use, position)."""
    h = hash_words(seed, STREAM_SHUFFLE, keys, use_count, position)
    return bounded(h, num_shards).astype(np.int64), mix64(h)
