"""What every benchmark here shares: timed rounds, peak memory of a child process, paired ratios, JSON out.

Benchmarks run as modules from the repository root (`python -m benchmarks.bench_index`), so `benchmarks.*`
and `tests.*` import without any path set-up; child processes they start get the root as their working
directory for the same reason. Standard library only: bench_peers runs in a virtualenv without shardmill.

- Rounds: `interleaved_rounds` runs every variant once per round, the order rotated each round, after
  `warmup_rounds` untimed rounds; `summary` gives a list of figures' median, min, max and spread.
- A/B: variants timed in the same rounds are compared per round (`paired_ratio`: each round's ratio, then
  their median and spread; `paired_ab`: two variants interleaved; `versus`: every variant against one
  baseline), so that the machine's drift over
  a run hits both sides of every ratio alike.
- Peak memory: `run_child` runs a command and reads its peak resident memory from `wait4` (below), through
  a small launcher process.
- Output: `emit` prints a benchmark's one JSON object to stdout; `progress` prints a partial result to
  stderr as it comes.

Why peak memory comes from `wait4` and nothing else: the kernel keeps each process's high-water mark of
resident memory (ru_maxrss), so a peak that lasts a millisecond is counted, where sampling /proc or psutil
every 20-50 ms misses it and its sampling thread competes for the cores it measures. `wait4` on the child's
own pid gives that child's figure alone; the parent's RUSAGE_CHILDREN is a maximum over every child it
ever waited for, so a second, smaller run would report the first one's peak. The kernel folds the peaks of
the child's reaped descendants in (the largest one, not their sum): a run with worker processes reports
its largest process's peak. A child's ru_maxrss also starts from the image it was forked from, so the
command is started by a launcher of a few MiB (run_child), not by the benchmark's own process.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- rounds ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timed:
    """One timed run: its wall seconds and what the run returned (rows read, a count, a result)."""

    seconds: float
    value: Any


def timed(run: Callable[[], Any]) -> Timed:
    start = time.perf_counter()
    value = run()
    return Timed(time.perf_counter() - start, value)


def interleaved_rounds(variants: Mapping[str, Callable[[], Any]], rounds: int, *, warmup_rounds: int = 0,
                       warm_each: bool = False) -> dict[str, list[Timed]]:
    """Each variant timed once per round, the variants' order rotated by one each round: whichever runs first
    in a round pays the process's cold caches, and machine noise spreads over every variant alike.

    warmup_rounds: untimed rounds first. warm_each: every timed run directly follows an untimed run of the
    same variant, so that none pays the page faults of buffers another variant left cold."""
    names = list(variants)
    out: dict[str, list[Timed]] = {name: [] for name in names}
    for round_index in range(-warmup_rounds, rounds):
        shift = round_index % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if warm_each:
                variants[name]()
            result = timed(variants[name])
            if round_index >= 0:
                out[name].append(result)
    return out


def seconds_of(runs: Sequence[Timed]) -> list[float]:
    return [run.seconds for run in runs]


def rates_of(runs: Sequence[Timed]) -> list[float]:
    """Items per second of each run, for runs that return how many items they handled."""
    return [run.value / run.seconds for run in runs]


def summary(values: Sequence[float], digits: int = 3) -> dict:
    """A figure over rounds: median, min, max and spread ((max - min) / median, 0 for one round)."""
    middle = statistics.median(values)
    return {"median": round(middle, digits), "min": round(min(values), digits), "max": round(max(values), digits),
            "spread": round((max(values) - min(values)) / middle, 3) if middle else 0.0}


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> dict:
    """B over A from rounds in which both ran: each round's ratio, their median and spread."""
    ratios = [b / a for b, a in zip(numerator, denominator, strict=True)]
    return {"per_round": [round(r, 3) for r in ratios], **summary(ratios)}


def paired_ab(a: Callable[[], float], b: Callable[[], float], rounds: int, **options: Any) -> dict:
    """Two variants, each returning its figure (rows/s, say), run interleaved: A first in even rounds, B first
    in odd ones (options as interleaved_rounds'). Their figures per round and B/A (paired_ratio)."""
    runs = interleaved_rounds({"a": a, "b": b}, rounds, **options)
    figures = {side: [run.value for run in runs[side]] for side in ("a", "b")}
    return {**figures, "b_over_a": paired_ratio(figures["b"], figures["a"])}


def versus(figures: Mapping[str, Sequence[float]], baseline: str, name: str, ratio_name: str,
           digits: int = 0) -> dict[str, dict]:
    """Per variant: the median of its figure over rounds and that figure's spread, and its per-round ratio
    to the baseline's figure (paired_ratio's median and spread), as {name, name_spread, ratio_name,
    ratio_name_spread}. Figures where more is better (rows/s): a ratio above 1 is faster than the baseline."""
    report = {}
    for variant, values in figures.items():
        ratio = paired_ratio(values, figures[baseline])
        report[variant] = {name: round(statistics.median(values), digits or None),
                           f"{name}_spread": summary(values)["spread"],
                           ratio_name: ratio["median"], f"{ratio_name}_spread": ratio["spread"]}
    return report


# ---- child processes and their peak memory -------------------------------------------------------------

@dataclass(frozen=True)
class ChildRun:
    """A finished child process: exit code, wall seconds, peak resident memory, its output, and its CPU seconds
    (user + system, from wait4 too: its own and those of every descendant it waited for, which the kernel adds
    in at each wait — unlike the peak, a sum)."""

    returncode: int
    seconds: float
    peak_rss_bytes: int
    stdout: str
    stderr: str
    cpu_seconds: float = 0.0

    @property
    def peak_rss_mib(self) -> float:
        return round(self.peak_rss_bytes / 2**20, 1)

    def check(self, what: str) -> "ChildRun":
        """This run, or a RuntimeError naming what failed with the end of its stderr."""
        if self.returncode:
            raise RuntimeError(f"{what} failed with exit {self.returncode}:\n{self.stderr[-3000:]}")
        return self


def python_child(code: str, *args: object) -> list[str]:
    """The command line running code in this interpreter with args (sys.argv[1:])."""
    return [sys.executable, "-c", code, *map(str, args)]


# Starts the measured command and reports its wait4 usage: a fresh interpreter of a few MiB, so that the
# command's figure starts from the launcher's small image, not from this process's (see run_child).
_LAUNCHER = """
import json, os, resource, sys
report, limit, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
pid = os.posix_spawnp(command[0], command, os.environ)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as f:
    json.dump({"returncode": os.waitstatus_to_exitcode(status), "peak_rss_bytes": usage.ru_maxrss * 1024,
               "cpu_seconds": usage.ru_utime + usage.ru_stime}, f)
"""


def run_child(command: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = REPO_ROOT,
              timeout: float | None = None, address_limit_bytes: int | None = None) -> ChildRun:
    """Runs command to its end; its peak RSS from wait4 (see the module's docstring). A timeout kills the
    command and what it started; address_limit_bytes caps its address space (RLIMIT_AS).

    The command is started by a small launcher process, not by this one: a process's ru_maxrss counts, from
    the start, the resident memory of the process it was forked from (the kernel folds the old image's peak
    in at exec), so a child of a benchmark holding 1 GiB of test data would report at least 1 GiB."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(suffix=".json") as report:
        start = time.perf_counter()
        # Its own session, so that a timeout kills the command's workers too.
        launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER, report.name, str(address_limit_bytes or 0),
                                     *command], stdout=out, stderr=err, env=None if env is None else dict(env),
                                    cwd=cwd, start_new_session=True)
        try:
            launcher.wait(timeout)
        except BaseException:  # the timeout, or an interrupt of the benchmark
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
            if not isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
                raise
        seconds = time.perf_counter() - start
        reported = json.loads(report.read() or "{}")
        out.seek(0)
        err.seek(0)
        return ChildRun(reported.get("returncode", launcher.returncode), seconds, reported.get("peak_rss_bytes", 0),
                        out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                        reported.get("cpu_seconds", 0.0))


def last_json_line(text: str) -> Any:
    """The last line of a child's output that is a JSON value (children print their result last)."""
    return json.loads(text.strip().splitlines()[-1])


# ---- output --------------------------------------------------------------------------------------------

def emit(report: Mapping[str, Any]) -> None:
    """A benchmark's result: one JSON object on stdout."""
    print(json.dumps(report, indent=1), flush=True)


def progress(partial: Mapping[str, Any]) -> None:
    """A partial result as it comes, one JSON line on stderr (stdout keeps the one object)."""
    print(json.dumps(partial), file=sys.stderr, flush=True)
