import sys

import pytest

from benchmarks.harness import interleaved_rounds, paired_ab, paired_ratio, python_child, run_child, summary

# Holds `mib` MiB for a moment, then frees it: a peak a 50 ms sampler can miss.
ALLOCATE = "import sys, time; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096]); del b"
# The same in a grandchild the child waits for: a run's worker process.
IN_A_WORKER = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {ALLOCATE!r}, sys.argv[1]], check=True)"


@pytest.mark.slow
def test_a_childs_peak_is_its_own_not_an_earlier_childs():
    big = run_child(python_child(ALLOCATE, 300), timeout=60, address_limit_bytes=1 << 30).check("big")
    small = run_child(python_child(ALLOCATE, 20), timeout=60, address_limit_bytes=1 << 30).check("small")
    assert big.peak_rss_mib >= 300
    assert small.peak_rss_mib < 150  # not the big one's, as the parent's RUSAGE_CHILDREN would say


@pytest.mark.slow
def test_a_childs_peak_does_not_count_the_memory_of_the_process_measuring_it():
    held = bytearray(400 << 20)
    held[::4096] = b"x" * len(held[::4096])  # resident in this process when the child starts
    small = run_child(python_child(ALLOCATE, 20), timeout=60).check("small")
    assert small.peak_rss_mib < 150, small.peak_rss_mib  # forked from 400+ MiB, a child's ru_maxrss starts there
    del held


@pytest.mark.slow
def test_a_childs_peak_includes_the_worker_processes_it_waited_for():
    run = run_child(python_child(IN_A_WORKER, 300), timeout=60, address_limit_bytes=1 << 30).check("worker")
    assert run.peak_rss_mib >= 300


@pytest.mark.slow
def test_a_childs_cpu_includes_the_worker_processes_it_waited_for():
    spin = "import sys, time; end = time.process_time() + float(sys.argv[1])\nwhile time.process_time() < end: pass"
    worker = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}, sys.argv[1]], check=True)"
    run = run_child(python_child(worker, 0.6), timeout=60).check("worker")
    assert 0.6 <= run.cpu_seconds < 5, run.cpu_seconds  # the worker's 0.6 s, counted once


@pytest.mark.slow
def test_a_child_over_its_timeout_is_killed_and_its_output_kept():
    run = run_child([sys.executable, "-c", "print('started', flush=True); import time; time.sleep(60)"], timeout=2)
    assert run.returncode == -9 and run.seconds < 30 and run.stdout == "started\n"
    with pytest.raises(RuntimeError, match="sleeper failed with exit -9"):
        run.check("sleeper")


def test_rounds_rotate_the_variants_order_after_untimed_warm_up_rounds():
    calls = []
    runs = interleaved_rounds({name: (lambda name=name: calls.append(name) or len(calls)) for name in "abc"}, 3,
                              warmup_rounds=1)
    assert "".join(calls) == "cab" + "abc" + "bca" + "cab"  # the warm-up is round -1; timed rounds from "abc"
    assert [r.value for r in runs["a"]] == [4, 9, 11]  # the warm-up's call of each is not kept


def test_paired_ratios_are_per_round_with_their_median_and_spread():
    ratio = paired_ratio([2.0, 3.0, 8.0], [1.0, 1.0, 4.0])
    assert ratio == {"per_round": [2.0, 3.0, 2.0], "median": 2.0, "min": 2.0, "max": 3.0, "spread": 0.5}
    assert summary([5.0]) == {"median": 5.0, "min": 5.0, "max": 5.0, "spread": 0.0}
    figures = iter([10.0, 20.0, 10.0, 30.0])
    ab = paired_ab(lambda: next(figures), lambda: next(figures), 2)
    assert ab["a"] == [10.0, 30.0] and ab["b"] == [20.0, 10.0]  # round 1 runs B first
    assert ab["b_over_a"]["per_round"] == [2.0, 0.333]
