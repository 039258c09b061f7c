"""Large numpy arrays in Arrow's memory pool.

A job allocates one large array per task (the lc0 load's packing arena) and
per shard (the rows being encoded). From numpy
(malloc), each is a fresh mapping: every page faults in and is zeroed,
then unmapped, tens of MB per array, and those faults were a large share
of the lc0 job's system time. Arrow's pool keeps freed pages for the next
array, and a table built on the array wraps the same memory (pa.py_buffer)
without a copy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def pooled_empty(shape: tuple[int, ...], dtype=np.uint8) -> np.ndarray:
    """An uninitialised, writable C-contiguous array whose memory comes from Arrow's default pool."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    buffer = pa.allocate_buffer(max(1, count * dtype.itemsize))
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)
