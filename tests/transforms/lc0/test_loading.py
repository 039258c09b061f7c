"""The native chunk kernel: inflate, check, and pack planned records (unpacked here to rows to compare)."""

import gzip
import struct

import numpy as np
import pytest

from shardmill.core import kernels
from shardmill.core.errors import NativeError
from shardmill.transforms.lc0.gzip_chunks import ChunkError
from shardmill.transforms.lc0.loading import _pack_chunk

RECORD = 16
VERSION = 6


def records(n: int, version: int = VERSION) -> np.ndarray:
    out = np.random.default_rng(n).integers(0, 256, size=(n, RECORD), dtype=np.uint8)
    out[:, :4] = np.frombuffer(struct.pack("<I", version), dtype=np.uint8)
    return out


def scatter(compressed: bytes, n: int, positions, rows, out):
    """pack_chunk_records, then packed record i unpacked to out[rows[i]] when the chunk checked out."""
    positions = np.asarray(positions, np.int64)
    packed = np.zeros(kernels.max_packed_bytes(RECORD, len(positions)), np.uint8)
    offsets = np.zeros(len(positions) + 1, np.int64)
    outcome = kernels.pack_chunk_records(compressed, n, RECORD, VERSION, positions, packed, offsets)
    if outcome == -1:
        kernels.unpack_records(packed, offsets, np.asarray(rows, np.int64), out)
    return outcome


def test_planned_positions_land_on_their_rows():
    data = records(50)
    out = np.zeros((4, RECORD), np.uint8)
    assert scatter(gzip.compress(data.tobytes()), 50, [7, 0, 49, 7], [3, 1, 0, 2], out) == -1
    np.testing.assert_array_equal(out, data[[49, 0, 7, 7]])


def test_scratch_buffer_reuse_across_chunks_of_different_sizes():
    for n in (300, 5, 120):
        data = records(n)
        out = np.zeros((n, RECORD), np.uint8)
        assert scatter(gzip.compress(data.tobytes()), n, np.arange(n)[::-1], np.arange(n), out) == -1
        np.testing.assert_array_equal(out, data[::-1])


def test_first_record_with_another_version_is_reported_and_nothing_copied():
    data = records(10)
    data[4, :4] = np.frombuffer(struct.pack("<I", 5), dtype=np.uint8)
    out = np.zeros((10, RECORD), np.uint8)
    assert scatter(gzip.compress(data.tobytes()), 10, np.arange(10), np.arange(10), out) == 4
    assert not out.any()


def test_crc_mismatch_raises():
    blob = bytearray(gzip.compress(records(10).tobytes()))
    blob[-8] ^= 0xFF  # CRC32 of the member
    with pytest.raises(NativeError):
        scatter(bytes(blob), 10, [0], [0], np.zeros((1, RECORD), np.uint8))


def test_several_members_are_inflated_natively_one_after_another():
    data = records(10)
    two_members = gzip.compress(data[:4].tobytes()) + gzip.compress(data[4:].tobytes())
    out = np.zeros((2, RECORD), np.uint8)
    assert scatter(two_members, 10, [9, 1], [0, 1], out) == -1
    np.testing.assert_array_equal(out, data[[9, 1]])


def test_bytes_after_the_member_that_are_no_member_defer_to_the_streaming_path():
    out = np.zeros((1, RECORD), np.uint8)
    assert scatter(gzip.compress(records(10).tobytes()) + b"\0" * 32, 10, [0], [0], out) is None
    assert not out.any()


@pytest.mark.parametrize("indexed", [9, 11])
def test_another_record_count_than_the_index_is_a_count_mismatch(indexed):
    data = records(10)
    # Several members: the kernel reports the size it found, and the streaming path names the mismatch.
    blob = gzip.compress(data[:3].tobytes()) + gzip.compress(data[3:].tobytes())
    out = np.zeros((1, RECORD), np.uint8)
    with pytest.raises(NativeError, match="more than|the index says"):
        scatter(blob, indexed, [0], [0], out)
    row = {"num_records": indexed, "record_size": RECORD, "version": VERSION, "length": len(blob)}
    region, starts, lengths = np.zeros(kernels.max_packed_bytes(RECORD, 1), np.uint8), np.zeros(1), np.zeros(1)
    with pytest.raises(ChunkError) as err:
        _pack_chunk(blob, row, np.array([0]), region, starts, lengths, 1 << 20)
    assert err.value.reason == "count_mismatch"
    assert not region.any() and not lengths.any()


def test_a_member_with_a_forged_length_raises():
    data = records(12)
    blob = bytearray(gzip.compress(data.tobytes()))
    blob[-4:] = struct.pack("<I", 10 * RECORD)  # ISIZE claims the index's 10 records; the data holds 12
    with pytest.raises(NativeError, match="more than"):
        scatter(bytes(blob), 10, [0], [0], np.zeros((1, RECORD), np.uint8))


@pytest.mark.parametrize("positions, rows", [([10], [0]), ([-1], [0]), ([0], [1]), ([0, 1], [0])])
def test_out_of_range_positions_and_rows_raise(positions, rows):
    with pytest.raises(NativeError):
        scatter(gzip.compress(records(10).tobytes()), 10, positions, rows, np.zeros((1, RECORD), np.uint8))


def test_many_empty_members_around_the_records_are_inflated_natively():
    data = records(10)
    empty = gzip.compress(b"")
    blob = empty * 500 + gzip.compress(data.tobytes()) + empty * 500
    out = np.zeros((1, RECORD), np.uint8)
    assert scatter(blob, 10, [4], [0], out) == -1
    np.testing.assert_array_equal(out[0], data[4])


@pytest.mark.parametrize("damage", ["truncated", "garbage_body", "garbage_after_header"])
def test_a_hostile_chunk_is_a_dead_letter_reason_never_a_crash(damage):
    blob = gzip.compress(records(50).tobytes())
    rng = np.random.default_rng(len(damage))
    if damage == "truncated":
        blob = blob[: len(blob) // 2]
    elif damage == "garbage_body":
        blob = blob[:10] + rng.integers(0, 256, len(blob) - 18, dtype=np.uint8).tobytes() + blob[-8:]
    else:
        blob = blob[:10] + rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    out = np.zeros((1, RECORD), np.uint8)
    row = {"num_records": 50, "record_size": RECORD, "version": VERSION, "length": len(blob)}
    with pytest.raises(ChunkError):
        _pack_chunk(blob, row, np.array([0]), np.zeros(kernels.max_packed_bytes(RECORD, 1), np.uint8),
                        np.zeros(1, np.int64), np.zeros(1, np.int64), 1 << 20)
    assert not out.any()


def test_a_region_too_small_for_the_positions_or_a_short_offsets_array_is_refused():
    blob = gzip.compress(records(10).tobytes())
    with pytest.raises(NativeError, match="max_packed_bytes"):
        kernels.pack_chunk_records(blob, 10, RECORD, VERSION, np.array([0, 1]),
                                   np.zeros(kernels.max_packed_bytes(RECORD, 1), np.uint8), np.zeros(3, np.int64))
    with pytest.raises(NativeError, match="len\\(positions\\) \\+ 1"):
        kernels.pack_chunk_records(blob, 10, RECORD, VERSION, np.array([0, 1]),
                                   np.zeros(kernels.max_packed_bytes(RECORD, 2), np.uint8), np.zeros(2, np.int64))


def test_the_streaming_path_packs_what_the_kernel_leaves_to_it(monkeypatch):
    data = records(10)
    blob = gzip.compress(data[:5].tobytes()) + gzip.compress(data[5:].tobytes())
    row = {"num_records": 10, "record_size": RECORD, "version": VERSION, "length": len(blob)}
    monkeypatch.setattr(kernels, "pack_chunk_records", lambda *args: None)  # as for bytes it cannot place
    region = np.zeros(kernels.max_packed_bytes(RECORD, 3), np.uint8)
    starts, lengths = np.zeros(3, np.int64), np.zeros(3, np.int64)
    _pack_chunk(blob, row, np.array([9, 0, 9]), region, starts, lengths, 1 << 20)
    out = np.zeros((3, RECORD), np.uint8)
    offsets = np.concatenate([starts, [starts[-1] + lengths[-1]]])
    kernels.unpack_records(region, offsets, np.arange(3), out)
    np.testing.assert_array_equal(out, data[[9, 0, 9]])
