"""Sampling kernels: the window, threshold-gamma use counts, positions per use, shard keys.

Statistical tests use fixed seeds; each threshold is a chi-square p-value of
1e-3 (so a correct implementation fails one in a thousand seeds, and with a
fixed seed the outcome is deterministic).
"""

import collections

import numpy as np
import pytest

from shardmill.transforms.common import keyed_hash
from shardmill.transforms.common.sampling import acceptance_probability, shuffle_keys
from shardmill.transforms.lc0.sampling import decide, round_permutation, use_counts, window_mask
from tests.support.lc0_plan import positions_of_uses
from tests.support.stats import binomial_pmf, chi_square_test

ALPHA = 1e-3


def keys_for(n_chunks, prefix="src"):
    sort_keys = [f"{prefix}-{i // 100:05d}.tar" for i in range(n_chunks)]
    return keyed_hash.chunk_keys(sort_keys, np.arange(n_chunks) % 100)


# ---- keyed hash -------------------------------------------------------------

def test_keyed_hash_test_vectors_are_stable():
    # Shared with the native reader: changing these changes every output.
    assert int(keyed_hash.mix64(np.uint64(0))) == 0xE220A8397B1DCDAF
    assert int(keyed_hash.mix64(np.uint64(1))) == 0x910A2DEC89025CC1
    assert int(keyed_hash.hash_words(42, keyed_hash.STREAM_SHUFFLE, 7, 3)) == int(
        keyed_hash.mix64(keyed_hash.mix64(keyed_hash.mix64(np.uint64(42 ^ 3)) ^ np.uint64(7)) ^ np.uint64(3)))
    assert keyed_hash.fingerprint("training-20261101-0000.tar") == int.from_bytes(
        __import__("hashlib").blake2b(b"training-20261101-0000.tar", digest_size=8).digest(), "little")


def test_unit_float_is_uniform():
    u = keyed_hash.unit_float(keyed_hash.hash_words(5, 1, np.arange(100_000)))
    assert u.min() >= 0 and u.max() < 1
    observed = np.bincount((u * 20).astype(int), minlength=20)
    assert chi_square_test(observed, np.full(20, 5000.0))[2] > ALPHA


def test_chunk_keys_depend_on_sort_key_and_chunk_only():
    a = keyed_hash.chunk_keys(["x.tar", "x.tar", "y.tar"], [0, 1, 0])
    assert len(set(a.tolist())) == 3
    assert (keyed_hash.chunk_keys(["x.tar"], [1]) == a[1]).all()


# ---- window -----------------------------------------------------------------

def window_of(sort_keys, chunks, pool_size):
    summaries = [{"source": k, "sort_key": k, "versions": {6: [n, n * 10, 8356]}}
                 for k, n in collections.Counter(sort_keys.tolist()).items()]
    return window_mask(sort_keys, chunks, decide(summaries, pool_size))


def test_window_keeps_the_newest_chunks_by_sort_key_then_chunk():
    sort_keys = np.array(["h02.tar", "h00.tar", "h01.tar", "h02.tar", "h01.tar", "h00.tar"], dtype=object)
    chunks = np.array([1, 0, 0, 0, 1, 1])
    mask = window_of(sort_keys, chunks, 3)
    kept = sorted(zip(sort_keys[mask], chunks[mask]))
    assert kept == [("h01.tar", 1), ("h02.tar", 0), ("h02.tar", 1)]
    assert window_of(sort_keys, chunks, 0).all() and window_of(sort_keys, chunks, 100).all()
    assert window_of(sort_keys, chunks, 6).all() and window_of(sort_keys, chunks, 4).sum() == 4


# ---- threshold-gamma --------------------------------------------------------

def test_acceptance_probability_formula():
    p = acceptance_probability(np.array([0, 50, 150, 300]), 150, 2.0)
    assert p.tolist() == pytest.approx([0.0, (50 / 150) ** 2, 1.0, 1.0])
    assert acceptance_probability(np.array([3, 999]), 0, 2.0).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("gamma", [1.0, 0.5, 2.5])
def test_use_counts_follow_binomial_passes_p_for_every_game_length(gamma):
    passes, threshold, per_length = 8, 150, 4000
    lengths = [5, 30, 75, 120, 150, 400]
    n = np.repeat(lengths, per_length)
    keys = keys_for(len(n))
    p = acceptance_probability(n, threshold, gamma)
    counts = use_counts(keys, p, passes, seed=11)
    for length in lengths:
        sel = n == length
        prob = min(1.0, length / threshold) ** gamma
        if prob >= 1.0:
            assert (counts[sel] == passes).all()
            continue
        observed = np.bincount(counts[sel], minlength=passes + 1)
        _, df, pval = chi_square_test(observed, binomial_pmf(passes, prob) * per_length)
        assert pval > ALPHA, f"length {length}: p={pval:.2e} (df {df})"


def test_use_counts_without_threshold_accept_every_proposal():
    assert (use_counts(keys_for(50), np.ones(50), 5, seed=1) == 5).all()


def test_different_seeds_give_different_decisions_same_seed_the_same():
    keys = keys_for(2000)
    p = np.full(2000, 0.5)
    a, b = use_counts(keys, p, 4, seed=1), use_counts(keys, p, 4, seed=2)
    assert (a != b).any()
    assert (use_counts(keys, p, 4, seed=1) == a).all()


# ---- positions --------------------------------------------------------------

def test_round_permutation_is_a_permutation_and_differs_between_rounds():
    perm0, perm1 = round_permutation(123, 50, 0, seed=3), round_permutation(123, 50, 1, seed=3)
    assert sorted(perm0.tolist()) == list(range(50)) == sorted(perm1.tolist())
    assert perm0.tolist() != perm1.tolist()


@pytest.mark.parametrize("n,k,uses", [(10, 3, 7), (7, 7, 3), (5, 1, 12), (4, 6, 3)])
def test_successive_uses_never_repeat_a_position_before_the_chunk_is_exhausted(n, k, uses):
    use, pos = positions_of_uses(99, n, uses, k, seed=5)
    assert len(pos) == uses * k
    assert use.tolist() == np.repeat(np.arange(uses), k).tolist()
    for start in range(0, len(pos) - n + 1, n):  # every aligned run of n items is a permutation
        assert sorted(pos[start : start + n].tolist()) == list(range(n))
    # Use u takes the next k positions: the stream is the same whatever the number of uses.
    _, longer = positions_of_uses(99, n, uses + 2, k, seed=5)
    assert longer[: len(pos)].tolist() == pos.tolist()


def test_unset_position_count_emits_every_position_each_use():
    use, pos = positions_of_uses(1, 4, 2, 0, seed=0)
    assert use.tolist() == [0, 0, 0, 0, 1, 1, 1, 1] and pos.tolist() == [0, 1, 2, 3] * 2


def test_single_position_sampling_makes_every_position_equally_likely():
    # gamma 1 and games shorter than the threshold: each record is emitted with
    # probability 1/threshold per pass, whatever its game's length.
    passes, threshold = 40, 100
    lengths = np.repeat([20, 40, 80], 300)
    keys = keys_for(len(lengths), "pos")
    counts = use_counts(keys, acceptance_probability(lengths, threshold, 1.0), passes, seed=21)
    emitted = {n: np.zeros(n) for n in (20, 40, 80)}
    for key, n, k in zip(keys, lengths, counts):
        _, pos = positions_of_uses(int(key), int(n), int(k), 1, seed=21)
        np.add.at(emitted[n], pos, 1)
    total = sum(e.sum() for e in emitted.values())
    records = {n: 300 * n for n in emitted}
    observed = [emitted[n].sum() for n in emitted]
    expected = [total * records[n] / sum(records.values()) for n in emitted]
    assert chi_square_test(observed, expected)[2] > ALPHA  # per record, equal across game lengths
    assert total / sum(records.values()) == pytest.approx(passes / threshold, rel=0.05)
    for n, e in emitted.items():  # and uniform over positions within games of each length
        assert chi_square_test(e, np.full(n, e.sum() / n))[2] > ALPHA


# ---- shuffle keys -----------------------------------------------------------

def test_shards_are_uniform_and_independent_of_record_order():
    keys = np.repeat(keys_for(200), 50)
    use = np.zeros(len(keys), dtype=np.int64)
    pos = np.tile(np.arange(50), 200)
    shard, order = shuffle_keys(keys, use, pos, seed=4, num_shards=16)
    assert chi_square_test(np.bincount(shard, minlength=16), np.full(16, len(keys) / 16))[2] > ALPHA
    perm = np.random.default_rng(0).permutation(len(keys))
    shard_p, order_p = shuffle_keys(keys[perm], use[perm], pos[perm], seed=4, num_shards=16)
    assert (shard_p == shard[perm]).all() and (order_p == order[perm]).all()
    assert len(np.unique(order)) == len(order)
