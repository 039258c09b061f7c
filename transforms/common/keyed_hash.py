"""The one random generator of shardmill: a keyed SplitMix64 hash chain.

Every random decision is a pure function of (seed, stream, stable keys)
(ARCHITECTURE.md, rule "randomness is a pure function"), computed as

    h = mix64(seed ^ stream)
    for word in words: h = mix64(h ^ word)

where mix64 is SplitMix64's output function (add the golden gamma, then the
xor-shift-multiply finalizer) on 64-bit unsigned integers with wraparound.
The native reader implements the same chain; tests/test_keyed_hash.py pins
shared test vectors. A chunk's stable key is chunk_key(sort_key, chunk):
the first 8 bytes (little-endian) of BLAKE2b-64 of the UTF-8 sort key,
chained with the chunk ordinal.

All functions take and return numpy uint64 arrays (or Python ints) and
broadcast; nothing here depends on arrival order, bundles or workers.
"""

from __future__ import annotations

import hashlib

import numpy as np

GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

# Streams: one per kind of decision, so decisions never share random numbers.
STREAM_ACCEPT = 1  # threshold-gamma acceptance of a chunk in a pass
STREAM_POSITION_ORDER = 2  # per-chunk order of positions, per exhaustion round
STREAM_SHUFFLE = 3  # shard and in-shard order of an emitted record
STREAM_CHUNK_KEY = 4  # chunk identity
STREAM_KEEP = 5  # document-level keep decisions (token datasets)
STREAM_RECORD_SEED = 6  # per-record seed served by the native reader
STREAM_READER_ROW_GROUPS = 7  # native reader: per-epoch row-group permutation
STREAM_READER_WINDOW = 8  # native reader: per-window row permutation
STREAM_LABEL_RESERVOIR = 9  # label sampling: reservoir draws within a gap
STREAM_LABEL_EXACT = 10  # label sampling: EXACT mode's per-record priority
STREAM_TWO_PASS = 11  # label sampling: the two-pass baseline's Bernoulli draws

_MASK64 = (1 << 64) - 1


def mix64(x):
    """SplitMix64's output function of x (uint64, wraps mod 2^64)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + GOLDEN_GAMMA
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def hash_words(seed: int, stream: int, *words):
    """h = mix64(seed ^ stream), then h = mix64(h ^ w) for each word (arrays broadcast)."""
    h = mix64(np.uint64(seed) ^ np.uint64(stream))
    for word in words:
        h = mix64(h ^ np.asarray(word).astype(np.uint64))
    return h


def fingerprint(text: str) -> int:
    """Stable 64-bit fingerprint of a string: BLAKE2b with an 8-byte digest, little-endian."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def chunk_keys(sort_keys, chunks) -> np.ndarray:
    """Stable 64-bit identity of chunks (sort_key, chunk ordinal), independent of the seed."""
    unique, inverse = np.unique(np.asarray(sort_keys, dtype=object).astype(str), return_inverse=True)
    prints = np.array([fingerprint(s) for s in unique], dtype=np.uint64)[inverse.reshape(-1)]
    return hash_words(0, STREAM_CHUNK_KEY, prints, np.asarray(chunks, dtype=np.uint64))


def unit_float(h) -> np.ndarray:
    """Uniform doubles in [0, 1) from the top 53 bits of uint64 hashes."""
    return (np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def bounded(h, n: int) -> np.ndarray:
    """Maps uint64 hashes to [0, n) by the high 32 bits times n (bias <= n / 2^32)."""
    if not 0 < n < 2**32:
        raise ValueError(f"n must be in [1, 2^32), got {n}")
    return ((np.asarray(h, dtype=np.uint64) >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32)
