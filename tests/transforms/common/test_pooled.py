"""Large arrays from Arrow's memory pool: writable numpy arrays that Arrow wraps without a copy, their buffers kept
for the next array."""

import numpy as np
import pyarrow as pa

from shardmill.transforms.common import pooled
from shardmill.transforms.common.pooled import kept_bytes, pooled_empty, release_kept


def test_the_array_is_writable_with_the_asked_shape_and_dtype():
    array = pooled_empty((3, 5), np.int32)
    assert array.shape == (3, 5) and array.dtype == np.int32 and array.flags.c_contiguous
    array[:] = np.arange(15, dtype=np.int32).reshape(3, 5)
    np.testing.assert_array_equal(array.ravel(), np.arange(15))


def test_the_memory_comes_from_arrows_pool_and_returns_to_it():
    release_kept()
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    array = pooled_empty((1000, 8356))
    assert pool.bytes_allocated() - before >= 1000 * 8356
    del array
    release_kept()
    assert pool.bytes_allocated() == before


def test_a_buffer_made_from_the_array_shares_its_memory():
    array = pooled_empty((4, 16))
    array[:] = 7
    frames = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), 4, [None, pa.py_buffer(array)])
    array[2, 0] = 9
    assert frames[2].as_py()[0] == 9


def test_an_empty_shape_gives_an_empty_array():
    assert pooled_empty((0, 8356)).shape == (0, 8356)


def test_a_large_arrays_buffer_is_kept_for_the_next_array_it_can_hold_and_released_on_demand():
    release_kept()
    first = pooled_empty((64, 1 << 16))  # 4 MiB
    address = first.__array_interface__["data"][0]
    del first
    assert kept_bytes() == 4 << 20
    again = pooled_empty((3 << 20,))  # 3 MiB: the kept 4 MiB holds it
    assert again.__array_interface__["data"][0] == address and kept_bytes() == 0
    tiny = pooled_empty((1 << 10,))  # below the recycling size: from Arrow's pool, never kept
    del again, tiny
    assert kept_bytes() == 4 << 20
    other = pooled_empty((1 << 20,))  # 1 MiB: the 4 MiB buffer would hold memory it does not use
    assert other.__array_interface__["data"][0] != address
    release_kept()
    assert kept_bytes() == 0


def test_a_table_on_the_array_keeps_its_buffer_from_being_reused():
    release_kept()
    array = pooled_empty((4, 1 << 20))
    array[:] = 7
    frames = pa.FixedSizeBinaryArray.from_buffers(pa.binary(1 << 20), 4, [None, pa.py_buffer(array)])
    del array
    assert kept_bytes() == 0  # the table holds it
    other = pooled_empty((4, 1 << 20))
    other[:] = 1
    assert frames[3].as_py()[:2] == b"\x07\x07"
    del frames, other
    release_kept()


def test_the_kept_bytes_stay_within_their_cap():
    release_kept()
    arrays = [pooled_empty((66 << 20,)) for _ in range(5)]
    del arrays
    assert kept_bytes() <= pooled.KEPT_BYTES
    release_kept()
