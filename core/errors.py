"""Every error shardmill reports to a user, under one base class that carries the command's exit code.

A command turns a ShardmillError into one line and `exit_code`; any other exception is a defect and exits
EXIT_FAILED with its traceback under -v.
"""

EXIT_OK = 0  # the run committed its output
EXIT_ERROR_BUDGET = 1  # more input was lost than max_error_fraction allows: nothing committed
EXIT_BAD_INVOCATION = 2  # bad arguments, config or input: refused before (or without) work
EXIT_FAILED = 3  # the run failed (I/O, a lost claim, a defect): nothing committed
EXIT_COMMITTED_WITH_ERROR = 4  # the output was committed, then a later step failed


class ShardmillError(Exception):
    """Base of shardmill's errors; `exit_code` is what a command exits with when it ends in this error."""

    exit_code = EXIT_FAILED


class NativeError(ShardmillError, RuntimeError):
    """A failure inside the native (C++) reader or the job kernels: the message names the file and what is
    wrong. The native code raises this, never aborts. Both compiled modules raise this one class (their
    `NativeError` attribute is it); a RuntimeError, as it always was, so `except RuntimeError` still catches it."""


class OutputError(ShardmillError, ValueError):
    """A directory that is not a complete, consistent shardmill output (or one that can't be reached): raised by
    the reader and by `shardmill inspect`. A ValueError, as it always was (`except ValueError` still catches it).

    Always one line: storage clients' own messages (GCS's run over several) are folded into it."""

    exit_code = EXIT_BAD_INVOCATION

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class ConfigError(ShardmillError, ValueError):
    """An invalid job configuration; the message names the file and/or field. Raised by the commands' config
    checks, the job contract and each kind's own checks (validate, plan)."""

    exit_code = EXIT_BAD_INVOCATION


class InputError(ShardmillError, ValueError):
    """An input argument that names nothing usable (no file of the job's kind, a FIFO, an unreadable corpus):
    raised by discovery and by a kind's plan."""

    exit_code = EXIT_BAD_INVOCATION


class UsageError(ShardmillError, ValueError):
    """A command line shardmill can't carry out as given: an option neither shardmill nor Beam knows, or one that
    needs an extra that is not installed (--plot without matplotlib)."""

    exit_code = EXIT_BAD_INVOCATION
