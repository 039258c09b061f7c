"""Megatron indexed datasets (`.idx`/`.bin`) and Megatron's GPT-dataset index arrays.

Format (ARCHITECTURE.md, "Formats"): `.idx` = magic `MMIDIDX\\x00\\x00`, u64 version (1), u8
dtype code, u64 sequence count S, u64 document-index length D, i32[S]
lengths, i64[S] byte pointers into `.bin`, i64[D] document indices. `.bin` is
raw tokens. Everything is validated; problems raise IndexedDatasetError
naming the file.

Index arrays: the same values, dtypes and random-number consumption order as
Megatron-LM's GPTDataset (`_build_document_index`, helpers' `build_sample_idx`,
`_build_shuffle_index`, one `numpy.random.RandomState(seed)` used in that
order), written here as vectorised numpy: sample i starts at token i·L of the
epoch-concatenated stream, in the first document of the document index whose
end reaches that position plus the extra token.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from shardmill.core.errors import EXIT_BAD_INVOCATION, ShardmillError

MAGIC = b"MMIDIDX\x00\x00"
HEADER_BYTES = len(MAGIC) + 8 + 1 + 8 + 8
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
          8: np.uint16}
SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80  # Megatron's threshold


class IndexedDatasetError(ShardmillError, ValueError):
    """A malformed `.idx`/`.bin` pair; the message names the file."""

    exit_code = EXIT_BAD_INVOCATION


@dataclasses.dataclass
class IndexedDataset:
    idx_path: str
    dtype: np.dtype
    sequence_lengths: np.ndarray  # int32[S]
    sequence_pointers: np.ndarray  # int64[S], byte offsets into .bin
    document_indices: np.ndarray  # int64[D]
    bin_size: int

    @property
    def num_sequences(self) -> int:
        return len(self.sequence_lengths)


def parse_index(idx_bytes: bytes, idx_path: str, bin_size: int) -> IndexedDataset:
    """Validates and parses the bytes of an `.idx` file against the `.bin` file's size."""
    def fail(what: str):
        raise IndexedDatasetError(f"{idx_path}: {what}")

    if len(idx_bytes) < HEADER_BYTES:
        fail(f"{len(idx_bytes)} bytes is shorter than the {HEADER_BYTES}-byte header")
    if idx_bytes[: len(MAGIC)] != MAGIC:
        fail(f"bad magic {idx_bytes[:len(MAGIC)]!r}, expected {MAGIC!r}")
    pos = len(MAGIC)
    version = int.from_bytes(idx_bytes[pos : pos + 8], "little")
    if version != 1:
        fail(f"unsupported version {version} (only 1)")
    code = idx_bytes[pos + 8]
    if code not in DTYPES:
        fail(f"unknown dtype code {code} (known: {sorted(DTYPES)})")
    count = int.from_bytes(idx_bytes[pos + 9 : pos + 17], "little")
    doc_count = int.from_bytes(idx_bytes[pos + 17 : pos + 25], "little")
    expected = HEADER_BYTES + 4 * count + 8 * count + 8 * doc_count
    if len(idx_bytes) == HEADER_BYTES - 8 + 12 * count:
        fail("no document index: this is the older header without one, not supported")
    if len(idx_bytes) < expected:
        fail(f"truncated: {len(idx_bytes)} bytes, the header's counts ({count} sequences, "
             f"{doc_count} document indices) need {expected}")
    if len(idx_bytes) > expected:
        fail(f"{len(idx_bytes) - expected} unexpected trailing bytes after the arrays")
    lengths = np.frombuffer(idx_bytes, np.int32, count, HEADER_BYTES)
    pointers = np.frombuffer(idx_bytes, np.int64, count, HEADER_BYTES + 4 * count)
    documents = np.frombuffer(idx_bytes, np.int64, doc_count, HEADER_BYTES + 12 * count)
    itemsize = np.dtype(DTYPES[code]).itemsize
    if count and (lengths.min() < 0 or pointers.min() < 0):
        fail("negative sequence length or pointer")
    if count:
        # Compared without forming pointer + bytes, which overflows int64 for a pointer near 2^63.
        spans = lengths.astype(np.int64) * itemsize
        bad = np.flatnonzero((pointers > bin_size) | (spans > bin_size - np.minimum(pointers, bin_size)))
        if len(bad):
            end = int(pointers[bad[0]]) + int(spans[bad[0]])
            fail(f"sequence {bad[0]} ends at byte {end}, past the end of the {bin_size}-byte .bin")
    if doc_count == 0 or documents[0] != 0 or documents[-1] != count or (np.diff(documents) < 0).any():
        fail(f"document index must rise from 0 to {count} (the sequence count)")
    return IndexedDataset(idx_path, np.dtype(DTYPES[code]), lengths, pointers, documents, bin_size)


def read_sequence(bin_file, dataset: IndexedDataset, sequence: int, offset: int = 0,
                  length: int | None = None) -> np.ndarray:
    """Tokens [offset, offset + length) of one sequence, by a range read of `.bin` (never all of it)."""
    available = int(dataset.sequence_lengths[sequence]) - offset
    length = available if length is None else length
    if offset < 0 or length < 0 or length > available:
        raise IndexedDatasetError(f"{dataset.idx_path}: tokens [{offset}, {offset + length}) are outside "
                                  f"sequence {sequence} of length {dataset.sequence_lengths[sequence]}")
    itemsize = dataset.dtype.itemsize
    bin_file.seek(int(dataset.sequence_pointers[sequence]) + offset * itemsize)
    data = bin_file.read(length * itemsize)
    if len(data) != length * itemsize:
        raise IndexedDatasetError(f"{dataset.idx_path}: the .bin ended inside sequence {sequence}")
    return np.frombuffer(data, dataset.dtype)


# ---- Megatron's GPT index arrays ---------------------------------------------------------

@dataclasses.dataclass
class GPTIndices:
    document_index: np.ndarray  # int32, sequences over epochs (shuffled)
    sample_index: np.ndarray  # int32 or int64 [num_samples + 1, 2]: (document-index position, offset)
    shuffle_index: np.ndarray  # uint32 or int64: sample order
    num_epochs: int
    separate_final_epoch: bool


def num_epochs_for(tokens_per_epoch: int, num_samples: int | None, sequence_length: int, add_extra: bool) -> int:
    if num_samples is None:
        return 1
    requested = num_samples * sequence_length + int(add_extra)
    return max(1, math.ceil(requested / tokens_per_epoch)) if tokens_per_epoch > 0 else 1


def build_document_index(documents: np.ndarray, num_epochs: int, rng: np.random.RandomState,
                         separate_final_epoch: bool) -> np.ndarray:
    """Megatron's: the documents of each epoch, shuffled as one (or the last epoch apart, shuffled after).

    Filled and shuffled in place (RandomState.shuffle of a slice draws as of the array it copies), so the
    index is the only array of its size."""
    documents = np.asarray(documents)
    index = np.empty(num_epochs * len(documents), dtype=np.int32)
    index.reshape(num_epochs, len(documents))[:] = documents
    if not separate_final_epoch or num_epochs == 1:
        rng.shuffle(index)
    else:
        rng.shuffle(index[: (num_epochs - 1) * len(documents)])
        rng.shuffle(index[(num_epochs - 1) * len(documents):])
    return index


# Samples per step of the sample index's search: bounds its temporaries (about 50 bytes a sample).
SAMPLE_INDEX_STEP = 1 << 20


def sample_index_dtype(document_index_length: int, max_size: int) -> np.dtype:
    return np.dtype(np.int32 if max(document_index_length, max_size) <= np.iinfo(np.int32).max else np.int64)


def build_sample_index(sizes: np.ndarray, document_index: np.ndarray, sequence_length: int, num_epochs: int,
                       tokens_per_epoch: int, drop_last_partial_sequence: bool = True,
                       add_extra: bool = True) -> np.ndarray:
    extra = int(add_extra)
    total = num_epochs * tokens_per_epoch - extra
    num_samples = total // sequence_length if drop_last_partial_sequence else math.ceil(total / sequence_length)
    out = np.zeros((num_samples + 1, 2), dtype=sample_index_dtype(len(document_index), int(sizes.max())))
    lengths = sizes[document_index]
    ends = lengths.astype(np.int64)
    np.cumsum(ends, out=ends)  # in place: cumsum(lengths, dtype=int64) holds an int64 copy of lengths besides
    last = len(document_index) - 1
    for begin in range(0, num_samples, SAMPLE_INDEX_STEP):
        stop = min(num_samples, begin + SAMPLE_INDEX_STEP)
        positions = np.arange(begin + 1, stop + 1, dtype=np.int64) * sequence_length
        doc = np.searchsorted(ends, positions + extra, side="left")
        past_end = doc > last  # only the last, partial sample (drop_last False)
        np.minimum(doc, last, out=doc)
        length = lengths[doc].astype(np.int64)
        out[begin + 1 : stop + 1, 0] = doc
        out[begin + 1 : stop + 1, 1] = np.where(past_end, length - extra, positions - (ends[doc] - length))
    return out


def shuffle_index_dtype(total_size: int) -> np.dtype:
    return np.dtype(np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64)


def build_shuffle_index(num_samples: int, total_size: int, rng: np.random.RandomState) -> np.ndarray:
    """Megatron's: samples [0, num_samples) shuffled, then [num_samples, total_size) shuffled apart (in place)."""
    index = np.arange(0, total_size, dtype=shuffle_index_dtype(total_size))
    rng.shuffle(index[:num_samples])
    if num_samples != total_size:
        rng.shuffle(index[num_samples:])
    return index


def build_gpt_indices(sizes: np.ndarray, sequence_length: int, num_samples: int | None, seed: int,
                      add_extra: bool = True, documents: np.ndarray | None = None,
                      drop_last_partial_sequence: bool = True) -> GPTIndices:
    """The three index arrays Megatron's GPTDataset builds for these sequences and settings.

    drop_last_partial_sequence False (Megatron's validation split with
    drop_last_partial_validation_sequence False) keeps the last, partial
    sample, which the reader pads."""
    sizes = np.asarray(sizes, dtype=np.int32)
    documents = np.arange(len(sizes), dtype=np.int32) if documents is None else np.asarray(documents)
    tokens_per_epoch = int(sizes[documents].astype(np.int64).sum())
    num_epochs = num_epochs_for(tokens_per_epoch, num_samples, sequence_length, add_extra)
    separate_final_epoch = False
    if num_epochs > 1:
        sans_final = ((num_epochs - 1) * tokens_per_epoch - int(add_extra)) // sequence_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - int(add_extra)) // sequence_length
        separate_final_epoch = from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)
    rng = np.random.RandomState(seed)
    document_index = build_document_index(documents, num_epochs, rng, separate_final_epoch)
    sample_index = build_sample_index(sizes, document_index, sequence_length, num_epochs, tokens_per_epoch,
                                      drop_last_partial_sequence, add_extra)
    total = sample_index.shape[0] - 1
    shuffle_index = build_shuffle_index(sans_final if separate_final_epoch else total, total, rng)
    return GPTIndices(document_index, sample_index, shuffle_index, num_epochs, separate_final_epoch)


def sample_tokens(bin_file, dataset: IndexedDataset, indices: GPTIndices, sample: int,
                  add_extra: bool = True) -> np.ndarray:
    """The tokens of (unshuffled) sample `sample`, as Megatron's GPTDataset returns them."""
    (doc_beg, off_beg), (doc_end, off_end) = indices.sample_index[sample], indices.sample_index[sample + 1]
    parts = []
    for i in range(int(doc_beg), int(doc_end) + 1):
        offset = int(off_beg) if i == doc_beg else 0
        sequence = int(indices.document_index[i])
        if i < doc_end:
            parts.append(read_sequence(bin_file, dataset, sequence, offset))
        else:
            parts.append(read_sequence(bin_file, dataset, sequence, offset, int(off_end) + int(add_extra) - offset))
    return np.concatenate(parts)


def sample_byte_runs(dataset: IndexedDataset, indices: GPTIndices, samples: np.ndarray, sequence_length: int,
                     add_extra: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The `.bin` byte runs that make up (unshuffled) samples `samples`, in order: (starts, lengths).

    The same pieces as sample_tokens (the rest of the first document from
    its offset, whole documents, the head of the last one), for all samples
    at once: a sample's pieces follow from the sample index with a repeat
    and an arange, so a batch of samples is one copy of runs (native
    copy_runs) instead of a Python read per piece. Concatenated, the runs of
    each sample hold exactly sequence_length + extra tokens.
    """
    extra = int(add_extra)
    itemsize = dataset.dtype.itemsize
    samples = np.asarray(samples, dtype=np.int64)
    n = len(samples)
    doc_beg = indices.sample_index[samples, 0].astype(np.int64)
    off_beg = indices.sample_index[samples, 1].astype(np.int64)
    doc_end = indices.sample_index[samples + 1, 0].astype(np.int64)
    off_end = indices.sample_index[samples + 1, 1].astype(np.int64)
    pieces = doc_end - doc_beg + 1
    owner = np.repeat(np.arange(n), pieces)
    k = np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    position = doc_beg[owner] + k
    sequence = indices.document_index[position].astype(np.int64)
    start = np.where(k == 0, off_beg[owner], 0)
    stop = np.where(position == doc_end[owner], off_end[owner] + extra,
                    dataset.sequence_lengths[sequence].astype(np.int64))
    if int((stop - start).sum()) != n * (sequence_length + extra):
        raise ValueError(f"{dataset.idx_path}: samples span {int((stop - start).sum())} tokens, expected {n} x "
                         f"{sequence_length + extra} (the indices do not belong to this dataset)")
    return dataset.sequence_pointers[sequence] + start * itemsize, (stop - start) * itemsize
