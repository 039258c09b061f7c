"""The native chunk kernel: inflate, check, and scatter planned records to their rows."""

import gzip
import struct

import numpy as np
import pytest

from shardmill.core import kernels
from shardmill.core.errors import NativeError
from shardmill.transforms.lc0.gzip_chunks import ChunkError
from shardmill.transforms.lc0.loading import _scatter_chunk

RECORD = 16
VERSION = 6


def records(n: int, version: int = VERSION) -> np.ndarray:
    out = np.random.default_rng(n).integers(0, 256, size=(n, RECORD), dtype=np.uint8)
    out[:, :4] = np.frombuffer(struct.pack("<I", version), dtype=np.uint8)
    return out


def scatter(compressed: bytes, n: int, positions, rows, out):
    return kernels.scatter_chunk_records(compressed, n, RECORD, VERSION, np.asarray(positions, np.int64),
                                         np.asarray(rows, np.int64), out)


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
    with pytest.raises(ChunkError) as err:
        _scatter_chunk(blob, row, np.array([0]), np.array([0]), out, 1 << 20)
    assert err.value.reason == "count_mismatch"
    assert not out.any()


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
        _scatter_chunk(blob, row, np.array([0]), np.array([0]), out, 1 << 20)
    assert not out.any()
