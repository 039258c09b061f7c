"""Megatron indexed datasets and GPT index arrays, against an independent re-statement of Megatron."""

import io
import math

import numpy as np
import pytest

from shardmill.transforms.tokens.megatron_index import (DTYPES, IndexedDatasetError, build_gpt_indices,
                                                        build_sample_index, parse_index, read_sequence, sample_tokens)
from tests.datagen.megatron import write_indexed_dataset

# ---- an independent re-statement of Megatron-LM's GPTDataset index building ----------

def megatron_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, drop_last, add_extra):
    """helpers.cpp build_sample_idx, line by line (the document walk)."""
    extra = int(add_extra)
    if drop_last:
        num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    else:
        num_samples = math.ceil((num_epochs * tokens_per_epoch - extra) / seq_length)
    out = [(0, 0)]
    d, offset = 0, 0
    while len(out) <= num_samples:
        remaining = seq_length + extra
        while remaining != 0:
            length = sizes[doc_idx[d]] - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - extra
                remaining = 0
            else:
                if d == len(doc_idx) - 1:
                    offset = sizes[doc_idx[d]] - extra
                    break
                d += 1
                offset = 0
        out.append((d, offset))
    return np.array(out)


def megatron_indices(sizes, seq_length, num_samples, seed, add_extra, documents=None):
    """GPTDataset._build_document_sample_shuffle_indices for a split of these sequences (default: all)."""
    sizes = np.asarray(sizes, dtype=np.int32)
    documents = np.arange(len(sizes), dtype=np.int32) if documents is None else np.asarray(documents, np.int32)
    tokens = int(sizes[documents].astype(np.int64).sum())
    epochs, have = 1, tokens
    if num_samples is not None:
        while have < num_samples * seq_length + int(add_extra):
            epochs += 1
            have += tokens
    separate = False
    if epochs > 1:
        sans = ((epochs - 1) * tokens - int(add_extra)) // seq_length
        per_epoch = (tokens - int(add_extra)) // seq_length
        separate = (num_samples - sans) < int(0.80 * per_epoch)
    rng = np.random.RandomState(seed)

    def doc_index(n_epochs, sep):
        if not sep or n_epochs == 1:
            idx = np.mgrid[0:n_epochs, 0 : len(documents)][1]
            idx[:] = documents
            idx = idx.reshape(-1).astype(np.int32)
            rng.shuffle(idx)
            return idx
        return np.concatenate((doc_index(n_epochs - 1, False), doc_index(1, False)))

    document_index = doc_index(epochs, separate)
    sample_index = megatron_sample_idx(sizes, document_index, seq_length, epochs, tokens, True, add_extra)
    total = len(sample_index) - 1
    first = np.arange(0, sans if separate else total, dtype=np.uint32)
    rng.shuffle(first)
    if separate:
        last = np.arange(sans, total, dtype=np.uint32)
        rng.shuffle(last)
        first = np.concatenate((first, last))
    return document_index, sample_index, first, epochs, separate


# ---- the worked example and the re-statement ----------------------------------------

def test_worked_example_sample_starts():
    sizes = np.array([20, 50, 60, 30, 100, 5], dtype=np.int32)
    starts = build_sample_index(sizes, np.arange(6, dtype=np.int32), 30, 1, int(sizes.sum()))
    assert starts.tolist() == [[0, 0], [1, 10], [1, 40], [2, 20], [2, 50], [3, 20], [4, 20], [4, 50], [4, 80]]
    assert starts.dtype == np.int32


CASES = [
    # (sizes generator, seq_length, num_samples, seed): multi-epoch on both sides of the 0.8 threshold,
    # documents longer than a sample, samples ending exactly on document boundaries, zero-length documents
    (lambda r: r.integers(1, 200, 50), 32, None, 1),
    (lambda r: r.integers(1, 200, 50), 32, 400, 2),
    (lambda r: r.integers(1, 200, 50), 32, 300, 3),
    (lambda r: r.integers(100, 1000, 20), 16, 2000, 4),
    (lambda r: np.full(40, 64), 32, 150, 5),
    (lambda r: np.full(40, 33), 32, 100, 6),
    (lambda r: r.integers(0, 50, 200), 8, 2500, 7),
    (lambda r: r.integers(1, 5, 300), 64, 40, 8),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("add_extra", [True, False])
def test_indices_equal_megatron_element_for_element(case, add_extra):
    make, seq_length, num_samples, seed = CASES[case]
    sizes = make(np.random.default_rng(case)).astype(np.int32)
    got = build_gpt_indices(sizes, seq_length, num_samples, seed, add_extra)
    doc, sample, shuffle, epochs, separate = megatron_indices(sizes, seq_length, num_samples, seed, add_extra)
    assert (got.num_epochs, got.separate_final_epoch) == (epochs, separate)
    assert got.document_index.dtype == np.int32 and (got.document_index == doc).all()
    assert got.sample_index.dtype == np.int32 and got.sample_index.tolist() == sample.tolist()
    assert got.shuffle_index.dtype == np.uint32 and (got.shuffle_index == shuffle).all()


def test_the_cases_cover_both_sides_of_the_separate_final_epoch_rule():
    flags = {build_gpt_indices(CASES[c][0](np.random.default_rng(c)).astype(np.int32), CASES[c][1],
                               CASES[c][2], CASES[c][3]).separate_final_epoch for c in range(len(CASES))}
    assert flags == {True, False}


@pytest.mark.parametrize("drop_last", [True, False])
def test_sample_index_matches_the_document_walk_including_a_partial_last_sample(drop_last):
    rng = np.random.default_rng(9)
    for _ in range(30):
        sizes = rng.integers(0, 40, int(rng.integers(2, 30))).astype(np.int32)
        sizes[0] = max(sizes[0], 1)
        doc_idx = rng.permutation(np.tile(np.arange(len(sizes), dtype=np.int32), 2))
        tokens = int(sizes.sum())
        if tokens < 10:
            continue
        for add_extra in (True, False):
            want = megatron_sample_idx(sizes, doc_idx, 7, 2, tokens, drop_last, add_extra)
            got = build_sample_index(sizes, doc_idx, 7, 2, tokens, drop_last, add_extra)
            assert got.tolist() == want.tolist()


# ---- reading -------------------------------------------------------------------------

@pytest.mark.parametrize("code", sorted(DTYPES))
def test_every_dtype_round_trips(tmp_path, code):
    dtype = np.dtype(DTYPES[code])
    rng = np.random.default_rng(code)
    sequences = [(rng.integers(0, 100, int(n))).astype(dtype) for n in rng.integers(0, 50, 12)]
    idx, data = write_indexed_dataset(str(tmp_path / "ds"), sequences, dtype, documents=[0, 5, 12])
    dataset = parse_index(idx, "ds.idx", len(data))
    assert dataset.dtype == dtype and dataset.document_indices.tolist() == [0, 5, 12]
    with open(tmp_path / "ds.bin", "rb") as f:
        for i, seq in enumerate(sequences):
            assert (read_sequence(f, dataset, i) == seq).all()
            if len(seq) > 3:
                assert (read_sequence(f, dataset, i, 1, 2) == seq[1:3]).all()


@pytest.mark.parametrize("add_extra", [True, False])
def test_every_sample_holds_megatrons_tokens(tmp_path, add_extra):
    rng = np.random.default_rng(3)
    sequences = [rng.integers(0, 50_000, int(n)).astype(np.uint16) for n in rng.integers(1, 90, 60)]
    idx, data = write_indexed_dataset(str(tmp_path / "ds"), sequences, np.uint16)
    dataset = parse_index(idx, "ds.idx", len(data))
    indices = build_gpt_indices(dataset.sequence_lengths, 24, 500, seed=11, add_extra=add_extra)
    stream = np.concatenate([sequences[d] for d in indices.document_index])  # the epochs, flattened
    extra = int(add_extra)
    with open(tmp_path / "ds.bin", "rb") as f:
        for s in range(len(indices.sample_index) - 1):
            tokens = sample_tokens(f, dataset, indices, s, add_extra)
            assert tokens.tolist() == stream[s * 24 : s * 24 + 24 + extra].tolist()


def _corrupt(idx: bytes, at: int, value: bytes) -> bytes:
    return idx[:at] + value + idx[at + len(value) :]


def test_corrupt_index_files_are_clear_errors(tmp_path):
    sequences = [np.arange(10, dtype=np.int32), np.arange(5, dtype=np.int32)]
    idx, data = write_indexed_dataset(str(tmp_path / "ds"), sequences, np.int32)
    cases = {
        "bad magic": _corrupt(idx, 0, b"NOTMEGA"),
        "unsupported version 2": _corrupt(idx, 9, (2).to_bytes(8, "little")),
        "unknown dtype code 9": _corrupt(idx, 17, bytes([9])),
        "truncated": idx[:-5],
        "shorter than": idx[:20],
        "past the end": _corrupt(idx, 34 + 8 + 8, (10_000).to_bytes(8, "little")),
        "document index must rise": _corrupt(idx, len(idx) - 8, (7).to_bytes(8, "little")),
        "trailing bytes": idx + b"\0" * 8,
    }
    for message, bad in cases.items():
        with pytest.raises(IndexedDatasetError, match=message) as err:
            parse_index(bad, "ds.idx", len(data))
        assert "ds.idx" in str(err.value)


def test_reading_past_the_bin_is_an_error(tmp_path):
    idx, data = write_indexed_dataset(str(tmp_path / "ds"), [np.arange(10, dtype=np.int64)], np.int64)
    dataset = parse_index(idx, "ds.idx", len(data))
    with pytest.raises(IndexedDatasetError, match="ended inside sequence 0"):
        read_sequence(io.BytesIO(data[:40]), dataset, 0)
    with pytest.raises(IndexedDatasetError, match="outside sequence 0"):
        read_sequence(io.BytesIO(data), dataset, 0, 5, 6)


@pytest.mark.parametrize("drop_last, add_extra, num_samples", [(True, True, 3000), (False, True, 3001),
                                                               (True, False, 2999), (False, False, 4000)])
def test_the_sample_index_built_in_steps_equals_it_built_at_once(monkeypatch, drop_last, add_extra, num_samples):
    import shardmill.transforms.tokens.megatron_index as megatron_index

    sizes = np.random.default_rng(3).integers(1, 60, 200).astype(np.int32)
    whole = build_gpt_indices(sizes, 16, num_samples, 9, add_extra, None, drop_last)
    monkeypatch.setattr(megatron_index, "SAMPLE_INDEX_STEP", 7)
    stepped = build_gpt_indices(sizes, 16, num_samples, 9, add_extra, None, drop_last)
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert (getattr(stepped, name) == getattr(whole, name)).all() and getattr(stepped, name).dtype == getattr(
            whole, name).dtype, name
    assert whole.num_epochs > 1
