"""Label sampling kernels: semantics on hand-made sequences, uniformity, ratios, EXACT counts.

Statistical tests use fixed seeds and chi-square at p = 1e-3 (tests/support/stats.py).
"""

import math

import numpy as np
import pytest

from shardmill.transforms.common import keyed_hash
from shardmill.transforms.events.sampling import (exact_cut, exact_keep_count, exact_priorities, exact_select,
                                                  exact_threshold, in_bucket, priority_histogram, reservoir_sample,
                                                  sample_partition)
from tests.support import reference_label_sampling as reference
from tests.support.reference_label_sampling import hash_int
from tests.support.stats import chi_square_test

ALPHA = 1e-3


def labels(text):
    return np.array([c == "T" for c in text], dtype=bool)


def test_scalar_hash_equals_the_vectorised_generator():
    rng = np.random.default_rng(1)
    for _ in range(100):
        words = [int(x) for x in rng.integers(0, 2**63, 4)]
        assert hash_int(*words) == int(keyed_hash.hash_words(*words))


@pytest.mark.slow
def test_native_kernel_matches_the_python_reference_bit_for_bit():
    rng = np.random.default_rng(2)
    for trial in range(30):
        is_target = rng.random(int(rng.integers(1, 4000))) < rng.choice([0.003, 0.05, 0.3])
        for ratio in (1, 2.5, 10):
            for mode in ("ITERATIVE", "ADAPTIVE"):
                got = sample_partition(is_target, ratio, mode, seed=trial, partition_key=99)
                emitted, sizes, non_out, draws = reference.sample_partition(is_target, ratio, mode, trial, 99)
                assert got.emitted.tolist() == emitted.tolist()
                assert (got.reservoir_sizes, got.non_targets_out, got.draws) == (sizes, non_out, draws)
    for m, k in [(1, 1), (10, 3), (100_000, 7)]:
        chosen, draws = reservoir_sample(m, k, 5, 6, 7)
        want, want_draws = reference.reservoir_sample(m, k, 5, 6, 7)
        assert chosen.tolist() == want.tolist() and draws == want_draws


# ---- semantics ----------------------------------------------------------------

def test_iterative_emits_each_reservoir_before_its_target_and_the_last_at_the_end():
    s = sample_partition(labels("nnnTnTnn"), 2, "ITERATIVE", seed=1, partition_key=5)
    emitted = s.emitted.tolist()
    assert s.reservoir_sizes == [2, 2, 2]
    assert len(emitted) == 7 and set(emitted[:2]) <= {0, 1, 2} and emitted[2] == 3
    assert emitted[3:] == [4, 5, 6, 7]  # gap of 1 <= 2: kept; trailing gap of 2: kept
    assert (s.targets, s.non_targets_in, s.non_targets_out) == (2, 6, 5)


def test_adaptive_reservoir_sizes_follow_ratio_times_targets_plus_one_minus_emitted():
    s = sample_partition(labels("nnnTnTTnnnnnnT" + "n" * 9), 2, "ADAPTIVE", seed=3, partition_key=1)
    # gap0: k=2 (emits 2); after T1: 2*2-2=2 (gap of 1 emits 1); after T2: 2*3-3=3 (empty gap);
    # after T3: 2*4-3=5 (6 non-targets, emits 5); after T4: 2*5-8=2 (trailing 9, emits 2)
    assert s.reservoir_sizes == [2, 2, 3, 5, 2]
    assert s.non_targets_out == 2 + 1 + 0 + 5 + 2
    targets = [i for i in s.emitted.tolist() if i in (3, 5, 6, 13)]
    assert targets == [3, 5, 6, 13]


def test_every_emitted_non_target_lies_in_the_gap_before_its_target():
    is_target = np.random.default_rng(0).random(500) < 0.08
    for mode in ("ITERATIVE", "ADAPTIVE"):
        s = sample_partition(is_target, 3, mode, seed=2, partition_key=9)
        last_target = -1
        for i in s.emitted.tolist():
            assert i > last_target  # emission order never goes back before the last target
            if is_target[i]:
                last_target = i
        assert s.targets == int(is_target.sum())


def test_partition_without_targets_emits_one_reservoir():
    s = sample_partition(labels("nnnnnnnnnn"), 3, "ITERATIVE", seed=0, partition_key=0)
    assert len(s.emitted) == 3 and s.reservoir_sizes == [3]


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        sample_partition(labels("nT"), 1, "RANDOM", 0, 0)
    with pytest.raises(ValueError, match="ratio"):
        sample_partition(labels("nT"), 0, "ITERATIVE", 0, 0)


# ---- reservoir (Algorithm L) ---------------------------------------------------

def test_reservoir_keeps_k_distinct_items_or_all_of_a_short_gap():
    chosen, _ = reservoir_sample(100, 7, 1, 2, 3)
    assert len(set(chosen.tolist())) == 7 and chosen.max() < 100
    assert reservoir_sample(5, 7, 1, 2, 3)[0].tolist() == [0, 1, 2, 3, 4]
    assert len(reservoir_sample(5, 0, 1, 2, 3)[0]) == 0


def test_reservoir_draws_grow_with_log_of_the_gap_not_its_length():
    k = 10
    for m in (1_000, 100_000):
        draws = np.mean([reservoir_sample(m, k, 4, 5, g)[1] for g in range(50)])
        assert draws < 3 * k * (1 + math.log(m / k)), (m, draws)
    assert np.mean([reservoir_sample(100_000, k, 4, 5, g)[1] for g in range(50)]) < 400  # not ~100,000


def test_within_a_gap_every_non_target_is_equally_likely_to_be_kept():
    m, k, trials = 12, 4, 6000
    counts = np.zeros(m)
    for gap in range(trials):
        np.add.at(counts, reservoir_sample(m, k, 7, 11, gap)[0], 1)
    assert chi_square_test(counts, np.full(m, trials * k / m))[2] > ALPHA


def test_sampled_pairs_are_uniform_too():
    m, k, trials = 6, 2, 6000
    counts = np.zeros((m, m))
    for gap in range(trials):
        a, b = reservoir_sample(m, k, 8, 12, gap)[0]
        counts[a, b] += 1
    pairs = counts[np.triu_indices(m, 1)]
    assert chi_square_test(pairs, np.full(len(pairs), trials / len(pairs)))[2] > ALPHA


# ---- ADAPTIVE vs ITERATIVE -----------------------------------------------------

def _bursty(rng, n):
    """Clicks in bursts: long click-free stretches, then several clicks close together."""
    is_target = np.zeros(n, dtype=bool)
    pos = 0
    while pos < n:
        pos += int(rng.integers(20, 200))
        for _ in range(int(rng.integers(2, 8))):
            if pos < n:
                is_target[pos] = True
            pos += int(rng.integers(1, 4))
    return is_target


def _mixed_gaps(rng, n):
    """Half the gaps shorter than the ratio (2-4), half long (30-60): enough non-targets overall."""
    is_target = np.zeros(n, dtype=bool)
    pos = int(rng.integers(2, 60))
    while pos < n:
        is_target[pos] = True
        pos += int(rng.integers(2, 5)) if rng.random() < 0.5 else int(rng.integers(30, 61))
    return is_target


@pytest.mark.parametrize("kind", ["bursty", "short_gaps"])
def test_adaptive_gets_closer_to_the_ratio_than_iterative(kind):
    ratio, rng = 10, np.random.default_rng(4)
    errors = {"ITERATIVE": [], "ADAPTIVE": []}
    for p in range(20):
        is_target = _bursty(rng, 3000) if kind == "bursty" else _mixed_gaps(rng, 3000)
        for mode in errors:
            s = sample_partition(is_target, ratio, mode, seed=1, partition_key=p)
            errors[mode].append(abs(s.ratio - ratio))
    assert np.mean(errors["ADAPTIVE"]) < 0.5 * np.mean(errors["ITERATIVE"])


# ---- EXACT ---------------------------------------------------------------------

def _exact(partitions, ratio, seed):
    priorities = [exact_priorities(t, seed, key) for key, t in enumerate(partitions)]
    total_targets = sum(int(t.sum()) for t in partitions)
    total_non = sum(int((~t).sum()) for t in partitions)
    keep = exact_keep_count(total_targets, total_non, ratio)
    histogram = sum(priority_histogram(p[~t]) for p, t in zip(priorities, partitions))
    cut = exact_cut(histogram, keep)
    threshold = None
    if cut is not None:
        threshold = exact_threshold([in_bucket(p[~t], cut[0]) for p, t in zip(priorities, partitions)], cut[1])
    return [exact_select(t, p, threshold) for p, t in zip(priorities, partitions)], keep


def _skewed_partitions(rng):
    return [rng.random(n) < density for n, density in [(20_000, 0.002), (5_000, 0.05), (2_000, 0.3)]]


def test_exact_threshold_from_the_histogram_is_the_kth_smallest_priority_of_the_run():
    rng = np.random.default_rng(11)
    # Real priorities, and crafted ones piled into a few buckets so cuts land on bucket edges.
    crowded = (rng.integers(0, 3, 30_000).astype(np.uint64) << np.uint64(48)) | rng.integers(
        0, 1 << 48, 30_000, dtype=np.uint64)
    for values in (exact_priorities(np.zeros(50_000, bool), 7, 1), crowded):
        parts = np.array_split(values, 7)
        histogram = sum(priority_histogram(p) for p in parts)
        assert histogram.sum() == len(values)
        ordered = np.sort(values)
        edges = np.cumsum(np.bincount((ordered >> np.uint64(48)).astype(np.intp)))
        for keep in {1, 2, len(values) // 3, len(values) - 1, len(values), *edges[edges > 0][:3].tolist(),
                     *(edges[edges > 0][:3] + 1).tolist()}:
            if keep > len(values):
                continue
            bucket, rank = exact_cut(histogram, int(keep))
            assert exact_threshold([in_bucket(p, bucket) for p in parts], rank) == ordered[keep - 1]
    assert exact_cut(priority_histogram(values), 0) is None


def test_exact_keeps_exactly_ratio_times_targets_across_partitions():
    rng = np.random.default_rng(5)
    partitions = _skewed_partitions(rng)
    selected, keep = _exact(partitions, 4.0, seed=3)
    non_targets_out = sum(int((~t[s]).sum()) for t, s in zip(partitions, selected))
    targets_out = sum(int(t[s].sum()) for t, s in zip(partitions, selected))
    assert non_targets_out == keep == round(4.0 * sum(int(t.sum()) for t in partitions))
    assert targets_out == sum(int(t.sum()) for t in partitions)


def test_exact_keeps_all_non_targets_when_there_are_too_few():
    partitions = [labels("nTnTT"), labels("TTn")]
    selected, keep = _exact(partitions, 10.0, seed=1)
    assert keep == 3 and [s.tolist() for s in selected] == [[0, 1, 2, 3, 4], [0, 1, 2]]


def test_exact_inclusion_is_uniform_across_partitions_of_very_different_density():
    rng = np.random.default_rng(6)
    partitions = _skewed_partitions(rng)
    non = np.array([int((~t).sum()) for t in partitions])
    kept = np.zeros(len(partitions))
    runs = 40
    for seed in range(runs):
        selected, keep = _exact(partitions, 4.0, seed=seed)
        kept += [int((~t[s]).sum()) for t, s in zip(partitions, selected)]
    expected = kept.sum() * non / non.sum()
    assert chi_square_test(kept, expected)[2] > ALPHA
