"""The `shardmill` subcommands, one module each: count, run, inspect, submit.

A command module holds its parser and what it does (its COMMAND); pipelines/cli.py builds the `shardmill`
parser from them and turns what they raise into one line and an exit code. Job code and Beam are imported
inside `execute`, after main() has taken the signals.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Callable

from shardmill.core.errors import (  # noqa: F401  (the commands' exit codes: core/errors.py defines them once)
    EXIT_BAD_INVOCATION, EXIT_COMMITTED_WITH_ERROR, EXIT_ERROR_BUDGET, EXIT_FAILED, EXIT_OK)


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    # (subparsers, the options every subcommand shares) -> the command's parser
    add_parser: Callable[..., argparse.ArgumentParser]
    # (parsed arguments, the Beam options among the rest) -> exit code
    execute: Callable[[argparse.Namespace, list[str]], int]
    takes_beam_options: bool
    # what a failure or an interruption leaves behind, appended to its one line ("" when nothing to say)
    failure_note: Callable[[argparse.Namespace], str] = lambda args: ""


def kinds_text(separator: str) -> str:
    """Each job kind's config section and what it does, for the help texts."""
    from shardmill.pipelines.jobs import kinds

    if separator == "\n":
        return "\n".join(f"  {k.config_field:<16} {k.description}" for k in kinds())
    return separator.join(f"{k.config_field} ({k.description})" for k in kinds())
