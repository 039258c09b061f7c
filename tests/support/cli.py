"""The `shardmill` command run as a user runs it, for tests that need it in a fresh process: the console
script installed beside this interpreter (its entry(), the environment it sets before pyarrow loads, its
exit on a signal), not main() called in the test's own process."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from typing import Mapping

SHARDMILL = os.path.join(os.path.dirname(sys.executable), "shardmill")


def interruptible() -> None:
    """preexec_fn of a child a test interrupts: SIGINT and SIGTERM at their defaults whatever this process
    inherited (a job a non-interactive shell starts in the background ignores SIGINT, and the command keeps an
    ignored signal ignored, as a program should; the test's signal would then do nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def shardmill_command(*args: object) -> list[str]:
    """The command line of `shardmill args...`, for a test that starts it with Popen (runs side by side)."""
    return [SHARDMILL, *map(str, args)]


def run_shardmill(*args: object, env: Mapping[str, str] | None = None, cwd: str | None = None,
                  timeout: float = 300, memory_limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """`shardmill args...` to its end: exit code, stdout and stderr as text. env: variables set over this
    process's environment; timeout: seconds before it is killed (TimeoutExpired); memory_limit_bytes: its
    address space (RLIMIT_AS), for runs that could otherwise take the machine's memory."""

    def limit_memory():
        if memory_limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))

    return subprocess.run(shardmill_command(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **env} if env else None,
                          preexec_fn=limit_memory if memory_limit_bytes else None)
