"""Large arrays from Arrow's memory pool: writable numpy arrays that Arrow wraps without a copy."""

import numpy as np
import pyarrow as pa

from shardmill.transforms.common.pooled import pooled_empty


def test_the_array_is_writable_with_the_asked_shape_and_dtype():
    array = pooled_empty((3, 5), np.int32)
    assert array.shape == (3, 5) and array.dtype == np.int32 and array.flags.c_contiguous
    array[:] = np.arange(15, dtype=np.int32).reshape(3, 5)
    np.testing.assert_array_equal(array.ravel(), np.arange(15))


def test_the_memory_comes_from_arrows_pool_and_returns_to_it():
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    array = pooled_empty((1000, 8356))
    assert pool.bytes_allocated() - before >= 1000 * 8356
    del array
    assert pool.bytes_allocated() == before


def test_a_buffer_made_from_the_array_shares_its_memory():
    array = pooled_empty((4, 16))
    array[:] = 7
    frames = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), 4, [None, pa.py_buffer(array)])
    array[2, 0] = 9
    assert frames[2].as_py()[0] == 9


def test_an_empty_shape_gives_an_empty_array():
    assert pooled_empty((0, 8356)).shape == (0, 8356)
