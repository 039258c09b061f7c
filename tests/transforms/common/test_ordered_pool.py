import pickle
import threading
import time

import pytest

from shardmill.transforms.common.ordered_pool import OrderedPool


def started(threads: int) -> OrderedPool:
    pool = OrderedPool(threads)
    pool.start()
    return pool


def test_results_come_back_in_submission_order_whatever_finishes_first():
    pool = started(2)
    results = []
    for i, delay in enumerate([0.2, 0.0, 0.1, 0.0, 0.05]):
        results += pool.submit(lambda i, d: (time.sleep(d), i)[1], i, delay)
    results += pool.drain()
    assert results == [0, 1, 2, 3, 4]
    pool.stop()


def test_at_most_threads_run_at_once_and_submit_waits_beyond_one_queued():
    pool = started(2)
    running, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def work(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(5)
        with lock:
            running[0] -= 1
        return i

    assert pool.submit(work, 0) == [] and pool.submit(work, 1) == []  # two running, nothing finished
    timer = threading.Timer(0.2, release.set)
    timer.start()
    assert pool.submit(work, 2) == [0]  # the third waits for the oldest
    assert pool.drain() == [1, 2]
    assert peak[0] == 2
    pool.stop()


def test_an_error_in_the_work_is_raised_by_submit_or_drain():
    pool = started(1)

    def fail(message):
        raise ValueError(message)

    pool.submit(fail, "first")
    with pytest.raises(ValueError, match="first"):
        pool.submit(lambda: None)
    pool.reset()
    pool.submit(fail, "last")
    with pytest.raises(ValueError, match="last"):
        pool.drain()
    pool.stop()


@pytest.mark.parametrize("surfaces_in", ["submit", "drain"])
def test_an_error_surfaces_only_once_the_work_still_running_has_ended(surfaces_in):
    # A failed shard write fails the run, whose clean-up removes the staging directory: a write still running
    # beside it must not finish after that (it would leave a shard behind the clean-up).
    pool = started(2)
    running = threading.Event()
    ended = []

    def slow_write():
        running.set()
        time.sleep(0.5)
        ended.append("slow write")

    def fail():
        running.wait(5)
        raise OSError(28, "No space left on device")

    never_started = []
    pool.submit(fail)
    pool.submit(slow_write)
    with pytest.raises(OSError, match="No space left"):
        if surfaces_in == "submit":
            pool.submit(never_started.append, "queued")
            pool.submit(never_started.append, "queued")
        else:
            pool.drain()
    assert ended == ["slow write"]
    time.sleep(0.1)
    assert never_started in ([], ["queued"])  # at most the one a free thread had already taken
    assert pool.drain() == []
    pool.stop()


def test_reset_forgets_a_failed_bundles_work():
    pool = started(1)
    gate = threading.Event()
    pool.submit(gate.wait, 5)
    pool.reset()
    gate.set()
    assert pool.drain() == []
    pool.stop()


def test_pickles_before_start_as_a_dofn_does_and_works_after():
    pool = pickle.loads(pickle.dumps(OrderedPool(3)))
    with pytest.raises(RuntimeError, match="before start"):
        pool.submit(lambda: 1)
    pool.start()
    assert pool.submit(lambda: 1) == [] and pool.drain() == [1]
    pool.stop()


def test_stop_is_idempotent_and_does_not_wait_for_abandoned_work():
    pool = started(1)
    gate = threading.Event()
    pool.submit(gate.wait, 5)
    began = time.monotonic()
    pool.stop()
    pool.stop()
    assert time.monotonic() - began < 1
    gate.set()
