"""The job kernels' Python face: record packing round-trips any records and refuses what it cannot do."""

import numpy as np
import pytest

from shardmill.core import kernels
from tests.datagen.lc0 import make_game_records


@pytest.mark.parametrize("record_bytes", [1, 6, 8, 8356, 8359])
def test_packed_records_unpack_into_their_destination_rows(record_bytes):
    rng = np.random.default_rng(record_bytes)
    records = rng.integers(0, 256, (50, record_bytes), dtype=np.uint8)
    records[::3, : record_bytes // 2] = 0  # runs too
    rows = rng.permutation(50)[:40]  # a subset, in any order
    offsets, packed = kernels.pack_records(records, rows)
    assert offsets[0] == 0 and offsets[-1] == len(packed) and len(offsets) == 41
    out = np.zeros((45, record_bytes), np.uint8)
    dest = rng.permutation(45)[:40]
    kernels.unpack_records(packed, offsets, dest, out)
    assert (out[dest] == records[rows]).all()


def test_lc0_records_pack_about_six_times_smaller():
    records = np.frombuffer(make_game_records(3, 100).tobytes(), np.uint8).reshape(100, -1)
    _, packed = kernels.pack_records(records, np.arange(100))
    assert 5 < records.nbytes / len(packed) < 8


def test_bad_arguments_raise_native_errors_not_crashes():
    records = np.zeros((4, 16), np.uint8)
    with pytest.raises(kernels.NativeError, match="row out of range"):
        kernels.pack_records(records, np.array([4]))
    offsets, packed = kernels.pack_records(records, np.arange(4))
    with pytest.raises(kernels.NativeError, match="one more entry"):
        kernels.unpack_records(packed, offsets, np.arange(3), records)
    with pytest.raises(kernels.NativeError, match="goes to row 9 of 4"):
        kernels.unpack_records(packed, offsets, np.array([0, 1, 2, 9]), records)
    with pytest.raises(kernels.NativeError, match="spans bytes"):
        kernels.unpack_records(packed[:-1], offsets, np.arange(4), records)
