"""The `shardmill` command line.

Subcommands:
  run              a job: its inputs in, globally shuffled Parquet shards + manifest out
  inspect DIR      print an output directory's manifest summary (and charts)
  count INPUT...   index lc0 chunk files and report what they hold
  submit           the job on Dataflow or a Flink cluster (wheel built, runner validated)

Job kinds (the config's section picks one):
{kinds}

Options a subcommand does not know must be Beam pipeline options
(e.g. --direct_running_mode=multi_processing --direct_num_workers=2);
anything else is refused, with the nearest known option. -v and -q work
before or after the subcommand.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

# Neither imports Beam or pyarrow (set-up below must come first): each command imports its job code on use,
# after main() has taken over SIGINT and SIGTERM (importing Beam takes a second or two, and a Ctrl-C then must
# end as cleanly as later).
from shardmill.pipelines import terminal
from shardmill.pipelines.commands import (  # noqa: F401  (the exit codes, re-exported)
    EXIT_BAD_INVOCATION, EXIT_COMMITTED_WITH_ERROR, EXIT_ERROR_BUDGET, EXIT_FAILED, EXIT_OK, Command, count, inspect,
    kinds_text, run, submit)

# Arrow's allocator (mimalloc) hands freed pages back to the kernel after 10 ms, and a job frees and
# allocates tens of MB per task and per shard: each new buffer was faulted in and zeroed again (13% of a
# sampled lc0 run's CPU was the kernel's clear_page). A quarter second keeps most of them for reuse; a
# longer delay saved little more system time and raised peak memory (measured 10, 100, 300, 1000 ms).
# Read when pyarrow loads, so set before any import of it; worker processes inherit it; the user's wins.
MIMALLOC_PURGE_DELAY_MS = "250"
os.environ.setdefault("MIMALLOC_PURGE_DELAY", MIMALLOC_PURGE_DELAY_MS)

# Packages no shardmill command uses that Beam and pyarrow load whenever they are installed: pandas (Beam's
# typehints register its batch converters on import; pyarrow imports it at its first conversion of a Python
# list, to check whether the list is a pandas object), pymongo and its bson (Beam's MongoDB IO). Loading them was
# ~0.5 s of the ~3.5 s of CPU a small run starts with. The command's own process runs as if they were not
# installed (Beam and pyarrow take an ImportError as "not installed"); Beam's worker processes and a program
# calling main() load them as before.
PACKAGES_LEFT_OUT = ("pandas", "pymongo", "bson")
# numpy's bundled OpenBLAS starts a thread per core when numpy loads, and they spin a while for work the job
# never gives them (no shardmill kernel calls BLAS): ~0.1 s of CPU per process (perf: blas_thread_server 1.3%
# of an lc0 run). The command sets these for its own process (read when numpy loads; its worker processes
# inherit them), unless the user has; a program calling main() keeps its own environment.
COMMAND_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1"}
# What Beam logs when it finds them missing: not about the job.
LEFT_OUT_NOTICES = {"apache_beam.io.mongodbio": "Could not find a compatible bson package"}


class _LeftOut:
    """A meta path finder that finds no PACKAGES_LEFT_OUT: importing one raises ModuleNotFoundError, as if it
    were not installed. (A None in sys.modules would not do: Cython's import, pyarrow's, takes it for the
    module.)"""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in PACKAGES_LEFT_OUT:
            raise ModuleNotFoundError(f"No module named {name!r} (the shardmill command leaves it out)", name=name)
        return None


COMMANDS: dict[str, Command] = {c.name: c for c in (count.COMMAND, run.COMMAND, inspect.COMMAND, submit.COMMAND)}

# The signals that ended the last main() of this process: entry() exits at once after one.
_interrupts = terminal.Interrupts()


def _add_verbosity(parser: argparse.ArgumentParser, default) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", default=default,
                       help="log Beam's progress too, and show tracebacks")
    group.add_argument("-q", "--quiet", action="store_true", default=default,
                       help="only warnings, errors and the final summary")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The `shardmill` parser and each subcommand's own parser, by name."""
    from shardmill.core.output_contract import shardmill_version

    parser = argparse.ArgumentParser(prog="shardmill", description=__doc__.format(kinds=kinds_text("\n")),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"shardmill {shardmill_version()}")
    _add_verbosity(parser, default=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_verbosity(common, default=argparse.SUPPRESS)  # after the subcommand too, without resetting
    subparsers = parser.add_subparsers(dest="command", required=True)
    return parser, {name: command.add_parser(subparsers, common) for name, command in COMMANDS.items()}


def _exit_code(err: BaseException) -> int:
    """What a command that ended in `err` exits with: a ShardmillError's own exit_code (core/errors.py: bad
    config, input or output and an output in use are EXIT_BAD_INVOCATION, refused before any work); any other
    exception is a defect (EXIT_FAILED). A failure of the pipeline itself arrives as RunFailed, whatever the
    worker raised."""
    from shardmill.core.errors import ShardmillError

    if isinstance(err, ShardmillError):
        return err.exit_code
    return EXIT_FAILED


def _missing_job_dependency(err: BaseException) -> bool:
    return isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] in ("apache_beam", "google")


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 ok, 1 error budget exceeded, 2 bad invocation/config/input/output, 3 failed run (nothing
    committed), 4 the new generation was committed but a step after the commit point failed."""
    parser, parsers = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.verbose and args.quiet:
        parser.error("-v and -q exclude each other")
    command = COMMANDS[args.command]
    with terminal.logging_configured(args.verbose, args.quiet), _interrupts.raised() as interrupts:
        try:
            from shardmill.pipelines.beam_options import check_extra_options

            check_extra_options(command.name, extra, parsers[command.name], command.takes_beam_options)
            return command.execute(args, extra)
        except BaseException as err:  # a failed run: one line, the traceback only with -v
            if not isinstance(err, Exception) and not interrupts.received:
                raise
            return _report_failure(command, args, err, interrupts.received)


def _report_failure(command: Command, args: argparse.Namespace, err: BaseException, signals: list[str]) -> int:
    """The one line of a command that failed or was interrupted, and its exit code."""
    if _missing_job_dependency(err):
        print(f"shardmill {command.name}: error: the job needs Apache Beam and protobuf, which are not "
              f"installed ({err}): pip install 'shardmill[job]'", file=sys.stderr)
        return EXIT_BAD_INVOCATION
    if isinstance(err, BrokenPipeError) and _stdout_closed():
        return EXIT_OK  # the reader of our output stopped reading (`inspect | head`): not a failure of ours
    code = _exit_code(err)
    if args.verbose and not signals:
        logging.getLogger("shardmill").error("shardmill %s failed", command.name, exc_info=err)
    if not signals and code == EXIT_BAD_INVOCATION:
        print(f"shardmill {command.name}: error: {err}", file=sys.stderr)
        return EXIT_BAD_INVOCATION
    note = command.failure_note(args)
    if signals:
        print(f"shardmill {command.name}: interrupted ({signals[0]}){note}", file=sys.stderr)
        return EXIT_FAILED
    from shardmill.pipelines.run_job import one_line

    hint = "" if args.verbose else " (-v shows the traceback)"
    print(f"shardmill {command.name}: failed: {one_line(err)}{note}{hint}", file=sys.stderr)
    return code


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone (a pipe's write end then polls as an error); if so, stdout is pointed at
    /dev/null so that the interpreter's own flush at exit does not fail on it again."""
    import select

    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poll.poll(0)):
            return False
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
        return True
    except (OSError, ValueError):  # no file descriptor behind stdout
        return False


def entry() -> None:
    """The `shardmill` command: main(), then exit — at once after a signal, so that the in-process runner's
    worker threads, still finishing steps of the abandoned pipeline, can't keep the process alive (the run's
    files are already removed and its one line printed)."""
    for name, value in COMMAND_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    sys.meta_path.insert(0, _LeftOut())
    for logger, notice in LEFT_OUT_NOTICES.items():
        logging.getLogger(logger).addFilter(lambda record, notice=notice: notice not in record.getMessage())
    code = main()
    if _interrupts.received:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
