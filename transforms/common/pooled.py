"""Large numpy arrays in Arrow's memory pool, their memory kept for the next array of the same use.

A job allocates one large array per task (the lc0 load's packing arena) and per shard (the rows being
encoded). From numpy (malloc), each is a fresh mapping: every page faults in and is zeroed, then unmapped,
tens of MB per array, and those faults were a large share of the lc0 job's system time (on a VM whose
freed memory goes back to the host, a page's first touch costs ~1.3 s of CPU per GiB). Arrow's pool keeps
freed pages only briefly (mimalloc purges them after its delay, and a buffer of another size may land on
other pages), so the arrays' buffers themselves are kept: when an array is collected its buffer waits here,
at most KEPT_BYTES of them, and the next request it can hold takes it. A table built on the array wraps the
same memory (pa.py_buffer) without a copy, and keeps the array (so the buffer) alive as long as it lives.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
import pyarrow as pa

# Arrays at least this large are recycled; smaller ones go straight back to Arrow's pool.
RECYCLED_MIN_BYTES = 1 << 20
# Bytes of freed buffers kept for reuse: two, as many as a local worker has in flight at once (two load tasks'
# arenas, then two shards'; the stages never overlap, so one stage's freed buffers serve the next). Beyond it the
# oldest go back to Arrow's pool: a worker process keeps them until its run ends, on top of its working set
# (memory_budget counts them).
KEPT_BYTES = 2 * (66 << 20)


class _Recycler:
    def __init__(self, kept_bytes: int):
        self._kept_bytes = kept_bytes
        self._free: list[pa.Buffer] = []  # oldest first
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> pa.Buffer | None:
        """The smallest kept buffer of at least nbytes and at most twice that (a larger one would hold memory
        the request does not use), or None."""
        with self._lock:
            fits = [b for b in self._free if nbytes <= b.size <= 2 * nbytes]
            if not fits:
                return None
            best = min(fits, key=lambda b: b.size)
            self._free.remove(best)
            return best

    def give(self, buffer: pa.Buffer) -> None:
        with self._lock:
            self._free.append(buffer)
            while sum(b.size for b in self._free) > self._kept_bytes:
                self._free.pop(0)

    def release(self) -> None:
        with self._lock:
            self._free.clear()

    def kept_bytes(self) -> int:
        with self._lock:
            return sum(b.size for b in self._free)


_RECYCLER = _Recycler(KEPT_BYTES)


def pooled_empty(shape: tuple[int, ...], dtype=np.uint8) -> np.ndarray:
    """An uninitialised, writable C-contiguous array whose memory comes from Arrow's default pool, or from a
    buffer an earlier such array left (its pages already mapped)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = max(1, count * dtype.itemsize)
    if nbytes < RECYCLED_MIN_BYTES:
        return np.frombuffer(pa.allocate_buffer(nbytes), dtype=dtype, count=count).reshape(shape)
    buffer = _RECYCLER.take(nbytes) or pa.allocate_buffer(nbytes)
    array = np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)
    weakref.finalize(array, _RECYCLER.give, buffer)  # views and tables built on it keep it alive until they go
    return array


def release_kept() -> None:
    """Hands the kept buffers back to Arrow's pool (at a run's end: a process may live on after it)."""
    _RECYCLER.release()


def kept_bytes() -> int:
    return _RECYCLER.kept_bytes()
