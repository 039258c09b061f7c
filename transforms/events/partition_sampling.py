"""One event partition through label sampling to per-shard record batches.

Plain pyarrow/numpy: the Beam transforms in transforms/events/graph.py call these
per partition. Emitted rows keep every input column and gain `_partition`
(the file's path relative to the inputs' root, with "#i" for range i of a
split file) and `_row` (row
index in the partition, bad rows excluded), which identify them; each gets its
shard and order key from the keyed hash of (seed, partition, row), like lc0
records.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardmill.transforms.common.keyed_hash import STREAM_TWO_PASS, fingerprint, hash_words, unit_float
from shardmill.transforms.events.readers import EventPartition
from shardmill.transforms.events.sampling import (exact_priorities, exact_select, in_bucket, priority_histogram,
                                                  sample_partition)
from shardmill.transforms.common.sampling import shuffle_keys

IDENTITY_COLUMNS = ["_partition", "_row"]


def partition_key(part: EventPartition) -> int:
    return fingerprint(part.name)


def partition_stats(part: EventPartition, emitted: np.ndarray) -> dict:
    is_target = part.target_mask()
    kept = is_target[emitted]
    targets = int(is_target.sum())
    non_out = int((~kept).sum())
    return {
        "partition": part.name,
        "records": len(is_target),
        "targets": targets,
        "non_targets_in": int((~is_target).sum()),
        "non_targets_out": non_out,
        "ratio": non_out / targets if targets else None,
    }


def one_pass_rows(part: EventPartition, ratio: float, mode: str, seed: int) -> np.ndarray:
    """ITERATIVE / ADAPTIVE: row indices emitted, in emission order."""
    is_target = part.target_mask()
    return sample_partition(is_target, ratio, mode, seed, partition_key(part)).emitted


# Keyed draws of a partition are made this many rows at a time (a compressed log's mask can hold tens of
# millions of rows: its draws are never all in memory).
DRAW_ROWS = 1 << 20


def _mask_slices(part: EventPartition):
    """(first row, target mask) of the partition's rows, DRAW_ROWS at a time."""
    is_target = part.target_mask()
    for first in range(0, len(is_target), DRAW_ROWS):
        yield first, is_target[first : first + DRAW_ROWS]


def exact_label_counts(part: EventPartition, seed: int) -> tuple[int, np.ndarray]:
    """EXACT, first label pass: (targets, histogram of the non-targets' priorities)."""
    targets, histogram = 0, priority_histogram(np.zeros(0, np.uint64))
    for first, is_target in _mask_slices(part):
        priorities = exact_priorities(is_target, seed, partition_key(part), first)
        targets += int(is_target.sum())
        histogram += priority_histogram(priorities[~is_target])
    return targets, histogram


def exact_bucket(part: EventPartition, bucket: int, seed: int) -> np.ndarray:
    """EXACT, second label pass: this partition's non-target priorities in the cut's bucket."""
    return np.concatenate([np.zeros(0, np.uint64)] + [
        in_bucket(exact_priorities(is_target, seed, partition_key(part), first)[~is_target], bucket)
        for first, is_target in _mask_slices(part)])


def exact_rows(part: EventPartition, threshold: int | None, seed: int) -> np.ndarray:
    return np.concatenate([np.zeros(0, np.int64)] + [
        first + exact_select(is_target, exact_priorities(is_target, seed, partition_key(part), first), threshold)
        for first, is_target in _mask_slices(part)])


def two_pass_rows(part: EventPartition, rate: float, seed: int) -> np.ndarray:
    """The baseline: every target, each non-target with probability `rate` (keyed Bernoulli)."""
    rows = []
    for first, is_target in _mask_slices(part):
        u = unit_float(hash_words(seed, STREAM_TWO_PASS, np.uint64(partition_key(part)),
                                  np.arange(first, first + len(is_target), dtype=np.uint64)))
        rows.append(first + np.flatnonzero(is_target | (u < rate)))
    return np.concatenate([np.zeros(0, np.int64)] + rows)


def shard_batches(part: EventPartition, rows: np.ndarray, seed: int, num_shards: int) -> dict[int, pa.RecordBatch]:
    """The emitted rows with identity columns and order keys, split by shard.

    rows: indices in the partition; part.table may be a block of it, holding rows part.first_row...
    """
    if len(rows) == 0:
        return {}
    key = np.uint64(partition_key(part))
    shard, order = shuffle_keys(np.full(len(rows), key, dtype=np.uint64), np.zeros(len(rows), np.int64),
                                rows.astype(np.int64), seed, num_shards)
    table = part.table.take(pa.array(rows - part.first_row))
    table = table.append_column("_partition", pa.array([part.name] * len(rows)))
    table = table.append_column("_row", pa.array(rows.astype(np.int64)))
    table = table.append_column("order_key", pa.array(order))
    by_shard = np.argsort(shard, kind="stable")
    bounds = np.searchsorted(shard[by_shard], np.arange(num_shards + 1))
    out = {}
    for s in range(num_shards):
        if bounds[s + 1] > bounds[s]:
            out[s] = table.take(pa.array(by_shard[bounds[s] : bounds[s + 1]])).combine_chunks().to_batches()[0]
    return out
