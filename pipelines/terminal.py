"""What the `shardmill` command does to its terminal and process: log lines, signals, worker processes' lines.

- logging_configured: timestamped log lines at the chosen verbosity, for the command only;
- interrupts_raised / signals_deferred: SIGINT and SIGTERM end a command as an interruption, except
  inside the steps that must not be cut short (rejecting, discarding, committing);
- worker_lines_filtered: standard error through a filter that drops the local worker processes' own
  start-up lines.

Imports neither Beam nor pyarrow: main() takes the signals before those load (a second or two), so that
a Ctrl-C then ends as cleanly as later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import sys
import threading

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_LOG = logging.getLogger(__name__)


def _drop_beam_optional_dependency_noise(record: logging.LogRecord) -> bool:
    # Beam logs this on import whenever the GCP extras are absent; it is not about our job.
    return "apitools not found" not in record.getMessage()


logging.getLogger().addFilter(_drop_beam_optional_dependency_noise)


def _not_a_relayed_job_message(record: logging.LogRecord) -> bool:
    # PortableRunner relays the job service's messages through the root logger (logging.log), past the
    # apache_beam logger's level: a failed job's whole traceback, which the command's one line sums up.
    return not (record.name == "root" and record.module == "portable_runner")


@contextlib.contextmanager
def logging_configured(verbose: bool, quiet: bool):
    """Timestamped logs at the chosen verbosity for the command; the previous set-up afterwards (main()
    is also called in-process, where later log lines must not go to this command's streams)."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_levels = {name: logging.getLogger(name).level for name in ("shardmill", "apache_beam")}
    # force: importing Beam installs a root handler, which would make basicConfig do nothing.
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )
    logging.getLogger("shardmill").setLevel(logging.WARNING if quiet else logging.INFO)
    # A failed run ends with one line of ours; Beam's traceback of it only with -v.
    logging.getLogger("apache_beam").setLevel(logging.NOTSET if verbose else logging.CRITICAL)
    if not verbose:
        for handler in root.handlers:
            handler.addFilter(_not_a_relayed_job_message)
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def _signals_handled_by(handler, keep_ignored: bool = False):
    """SIGINT and SIGTERM go to handler inside the block, their previous handlers after it. Python sets
    handlers only in the main thread; elsewhere (main() called from a thread) nothing changes.
    keep_ignored: a signal the process ignores (nohup, a parent's SIG_IGN) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in HANDLED_SIGNALS
                if not (keep_ignored and signal.getsignal(sig) is signal.SIG_IGN)}
    try:
        yield
    finally:
        for sig, saved in previous.items():
            signal.signal(sig, saved)


class Interrupts:
    """The signals that ended a command, by name ("SIGTERM"), in the order they came."""

    def __init__(self):
        self.received: list[str] = []

    @contextlib.contextmanager
    def raised(self):
        """Inside the block, SIGINT and SIGTERM raise KeyboardInterrupt and are remembered: runners re-raise
        what a step raised in their own wrappers, so the command tells an interrupted run from a failed one
        by what it received, whatever the wrapping."""
        del self.received[:]

        def interrupt(signum, _frame):
            self.received.append(signal.Signals(signum).name)
            raise KeyboardInterrupt(signal.Signals(signum).name)

        with _signals_handled_by(interrupt, keep_ignored=True):
            yield self


@contextlib.contextmanager
def signals_deferred(reraise: bool = True):
    """SIGINT/SIGTERM arriving inside the block are held until it ends, so it is never cut short.

    reraise=False: the block finishes the run (the commit), so a signal that
    arrived during it is only logged — the run ended as if it came after.
    """
    received = []
    try:
        with _signals_handled_by(lambda signum, _frame: received.append(signum)):
            yield
    finally:  # a block that raised too: the signal held is still what ends the command
        if received and reraise:
            signal.raise_signal(received[0])
        elif received:
            _LOG.warning("%s arrived while committing; the commit completed", signal.Signals(received[0]).name)


# A worker process's own log lines (Beam's logging format, before and beside the level it is given): import-time
# warnings, "Logging handler created", "Discarding unparseable args". Errors and anything else pass.
WORKER_NOISE = re.compile(r"^(DEBUG|INFO|WARNING):(?!shardmill[.:])[\w.]*:")


@contextlib.contextmanager
def worker_lines_filtered(enabled: bool):
    """Standard error (file descriptor 2, which worker processes inherit) through a filter that drops the
    workers' own INFO/WARNING lines; every other line passes, in order."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump():
        with os.fdopen(read_end, "rb") as source:
            for line in source:
                if not WORKER_NOISE.match(line.decode("utf-8", errors="replace")):
                    os.write(terminal, line)

    thread = threading.Thread(target=pump, name="shardmill-stderr-filter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # the pipe ends when the workers, which hold it too, are gone
        thread.join(timeout=5)
        if not thread.is_alive():
            os.close(terminal)
