"""Progress of a local run: workers append counts, the launcher prints a line per stage.

Beam's counters reach the launcher only when the pipeline has finished (the
in-process runner returns from run() at the end), so during a local run the
workers append small JSON lines (`{"stage": "load", "records": 5120}`) to
files of their own in the run's staging directory and a thread of the
launcher sums them every few seconds: tasks and shards done of their
totals, records/s, an ETA. Only local runs report this way (a worker on a
cluster can't reach the launcher's disk, and Dataflow and Flink have their
own progress pages). Progress is best-effort: a count that cannot be written
(the staging directory is gone: the run was discarded) is dropped.

Counts of a stage are summed over all files; `total_*` counts (a stage's
total, from the plan) are taken as the largest reported. Each line carries
its wall-clock time, so rates span the stage's first line (for load and
write, the plan's totals) to its latest, whenever the launcher looks.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid

_LOG = logging.getLogger(__name__)

STAGES = ("index", "load", "sample", "samples", "write")
_OPENING = threading.Lock()


class ProgressLog:
    """A worker's appender of progress counts (picklable; no-op without a directory)."""

    def __init__(self, directory: str | None):
        self._directory = directory
        self._file = None
        self._lock = None

    def __getstate__(self):
        return {"_directory": self._directory, "_file": None, "_lock": None}

    def record(self, stage: str, **counts: int) -> None:
        if not self._directory:
            return
        line = json.dumps({"stage": stage, "t": round(time.time(), 3), **counts}) + "\n"
        try:
            if self._file is None:
                with _OPENING:  # a DoFn's threads may record their first counts at once: one file, one lock
                    if self._file is None:
                        self._lock = threading.Lock()
                        # Never creates the directory: a discarded run's staging must stay gone.
                        self._file = open(os.path.join(self._directory, f"{os.getpid()}-{uuid.uuid4().hex}.jsonl"),
                                          "a")
            with self._lock:
                self._file.write(line)
                self._file.flush()
        except OSError:
            self._directory = None


def record_total(total: int, progress: ProgressLog, stage: str, name: str) -> None:
    """Records a stage's total (`total_*`) from a pipeline step that knows it."""
    progress.record(stage, **{name: total})


def read_progress(directory: str) -> dict[str, dict[str, float]]:
    """Per stage, the summed counts of every worker's file (totals: the largest reported), and the
    times of its first and latest lines (`first_t`, `last_t`)."""
    stages: dict[str, dict[str, int]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return stages
    for name in names:
        try:
            with open(os.path.join(directory, name)) as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:  # a line still being written
                continue
            counts = stages.setdefault(event.pop("stage", "?"), {})
            t = event.pop("t", 0.0)
            counts["first_t"] = min(counts.get("first_t", t), t)
            counts["last_t"] = max(counts.get("last_t", t), t)
            for key, value in event.items():
                if key.startswith("total_"):
                    counts[key] = max(counts.get(key, 0), value)
                else:
                    counts[key] = counts.get(key, 0) + value
    return stages


def _eta(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def format_stage(stage: str, counts: dict[str, float]) -> str:
    """One stage's line: what is done (of its total), the rate and the time left."""
    counts = dict(counts)
    seconds = counts.pop("last_t", 0.0) - counts.pop("first_t", 0.0)
    if stage == "index":
        return f"index: {counts.get('files', 0):,} files, {counts.get('chunks', 0):,} chunks"
    if stage == "load":
        done, total = counts.get("records", 0), counts.get("total_records", 0)
        line = f"load: {counts.get('tasks', 0):,} tasks, {done:,}"
        line += f" of {total:,} records ({100 * done / total:.0f}%)" if total else " records"
        if seconds > 0 and done:
            rate = done / seconds
            line += f", {rate:,.0f} records/s"
            if total > done:
                line += f", ETA {_eta((total - done) / rate)}"
        return line
    if stage == "sample":  # label jobs: partitions read and sampled, by input bytes
        done, total = counts.get("bytes", 0), counts.get("total_bytes", 0)
        line = f"sample: {counts.get('partitions', 0):,} partitions, {counts.get('records', 0):,} records"
        line += f", {done / 2**20:,.0f} of {total / 2**20:,.0f} MiB ({100 * done / total:.0f}%)" if total else ""
        if seconds > 0 and counts.get("records"):
            line += f", {counts['records'] / seconds:,.0f} records/s"
            if total > done and done:
                line += f", ETA {_eta((total - done) * seconds / done)}"
        return line
    if stage == "samples":  # token jobs: ranges of the sample stream materialised
        done, total = counts.get("samples", 0), counts.get("total_samples", 0)
        line = f"samples: {counts.get('ranges', 0):,} ranges, {done:,}"
        line += f" of {total:,} samples ({100 * done / total:.0f}%)" if total else " samples"
        if seconds > 0 and done:
            line += f", {done / seconds:,.0f} samples/s"
            if total > done:
                line += f", ETA {_eta((total - done) * seconds / done)}"
        return line
    if stage == "write":
        done, total = counts.get("shards", 0), counts.get("total_shards", 0)
        line = f"write: {done:,}" + (f" of {total:,}" if total else "") + f" shards, {counts.get('rows', 0):,} rows"
        if seconds > 0 and done and total > done:
            line += f", ETA {_eta((total - done) * seconds / done)}"
        return line
    return f"{stage}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))


def _counts_only(counts: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in counts.items() if k not in ("first_t", "last_t")}


class ProgressPrinter:
    """The launcher's thread that logs each stage's progress line when it changes."""

    def __init__(self, directory: str, interval: float = 2.0):
        self._directory = directory
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[str, dict] = {}

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="shardmill-progress", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stops the thread after a last report (idempotent)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.report()

    def report(self) -> None:
        """Logs the line of each stage whose counts changed since the last report."""
        stages = read_progress(self._directory)
        for stage in sorted(stages, key=lambda s: STAGES.index(s) if s in STAGES else len(STAGES)):
            counts = _counts_only(stages[stage])
            if self._last.get(stage) != counts:
                self._last[stage] = counts
                _LOG.info("progress: %s", format_stage(stage, stages[stage]))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.report()
            except Exception as err:  # progress must never fail a run
                _LOG.debug("progress report failed: %s", err)
