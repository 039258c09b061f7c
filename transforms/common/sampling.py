"""Sampling helpers every job kind shares: the threshold-gamma acceptance probability and a record's shard and
order key.

Plain numpy; the shard and order key come from keyed_hash, so they depend only on the seed and the records'
stable identities, never on order, bundles or workers.
"""

from __future__ import annotations

import numpy as np

from shardmill.transforms.common.keyed_hash import STREAM_SHUFFLE, bounded, hash_words, mix64


def acceptance_probability(num_records: np.ndarray, threshold: int, gamma: float) -> np.ndarray:
    """min(1, n / threshold) ^ gamma per chunk; 1 everywhere without a threshold."""
    n = np.asarray(num_records, dtype=np.float64)
    if threshold <= 0:
        return np.ones_like(n)
    return np.minimum(1.0, n / float(threshold)) ** gamma


def shuffle_keys(keys: np.ndarray, use_count: np.ndarray, position: np.ndarray, seed: int, num_shards: int):
    """(shard, order_key) of emitted records from a keyed hash of (seed, chunk, use, position)."""
    h = hash_words(seed, STREAM_SHUFFLE, keys, use_count, position)
    return bounded(h, num_shards).astype(np.int64), mix64(h)
