"""A DoFn's own few threads: elements worked on side by side, results in submission order.

Beam's in-process runner calls a DoFn from one thread. The heavy parts of
loading and writing (the load kernel, LZ4, Parquet encoding, zstd) release
the GIL, so a DoFn that hands each element to a small pool keeps more than
one core busy. At most `threads` elements run at once and one more waits;
results come back oldest first, so a DoFn emits in the order it received.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
from typing import Any, Callable

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows


def elements_at_once(local_run: bool) -> int:
    """How many elements a DoFn's pool works on at once.

    Two on a local run, where one bundle at a time would leave a core idle.
    One on a cluster: its runner already runs a bundle per harness thread,
    where a second element in flight would only double each thread's memory.
    """
    return min(2, os.cpu_count() or 1) if local_run else 1


def in_global_window(output):
    """An output of finish_bundle, which must carry its window (tagged ones inside their tag)."""
    if isinstance(output, beam.pvalue.TaggedOutput):
        return beam.pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
    return GlobalWindows.windowed_value(output)


class OrderedPool:
    """Bounded concurrent work for one DoFn instance.

    Picklable until start() (DoFn.setup) creates the threads; reset() at
    each start_bundle forgets a failed bundle's work; stop() is idempotent.
    """

    def __init__(self, threads: int):
        self._threads = max(1, threads)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: collections.deque = collections.deque()

    def __getstate__(self):
        return {"_threads": self._threads}

    def __setstate__(self, state):
        self.__init__(state["_threads"])

    def start(self) -> None:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(self._threads)

    def reset(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pending.clear()

    def submit(self, fn: Callable, *args) -> list[Any]:
        """Starts fn(*args); returns the results of the oldest work beyond the bound (raising its error)."""
        if self._executor is None:
            raise RuntimeError("OrderedPool.submit before start()")
        self._pending.append(self._executor.submit(fn, *args))
        finished = []
        while len(self._pending) > self._threads:
            finished.append(self._oldest_result())
        return finished

    def drain(self) -> list[Any]:
        """Waits for all submitted work; its results oldest first."""
        finished = []
        while self._pending:
            finished.append(self._oldest_result())
        return finished

    def _oldest_result(self) -> Any:
        future = self._pending.popleft()
        try:
            return future.result()
        except BaseException:
            # The error fails the run, whose clean-up follows at once: work still running (a shard being written
            # into the staging directory) must end first, or it would write into what the clean-up removed.
            # Work not started yet never starts.
            for other in self._pending:
                other.cancel()
            concurrent.futures.wait(self._pending)
            self._pending.clear()
            raise

    def stop(self) -> None:
        # A finished bundle has nothing pending (drain waited); an abandoned one (a signal, a failed
        # step) must not wait here for work nobody will use.
        self.reset()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
