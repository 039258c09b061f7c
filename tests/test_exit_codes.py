"""The README's exit-code table is the error module's: every code a command can end with is a row, and every row is
a code some error (or success) ends with."""

import dataclasses
import importlib
import os
import pkgutil
import re

import shardmill.pipelines
import shardmill.transforms
from shardmill.core.errors import EXIT_OK, ShardmillError

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\S.*?)\s*\|\s*$")


def readme_exit_codes() -> dict[int, str]:
    """The rows `| N | meaning |` of the README's "Exit codes" section."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^## Exit codes\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "README.md has no '## Exit codes' section"
    rows = {}
    for line in section.group(1).splitlines():
        match = ROW.match(line)
        if match:
            rows[int(match.group(1))] = match.group(2)
    return rows


def error_classes() -> set[type]:
    """Every ShardmillError subclass, after importing every module of the job and the commands (the reader's and
    core's are imported by them)."""
    for package in (shardmill.transforms, shardmill.pipelines):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(module.name)
    found, pending = set(), [ShardmillError]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass not in found:
                found.add(subclass)
                pending.append(subclass)
    return found


def test_the_readme_lists_exactly_the_exit_codes_of_the_errors():
    rows = readme_exit_codes()
    classes = error_classes()
    codes = {cls.exit_code for cls in classes} | {EXIT_OK}
    assert set(rows) == codes, {"in README only": set(rows) - codes, "of errors only": codes - set(rows)}
    # Every error says which code it ends with, and that code is a row.
    assert all(isinstance(cls.exit_code, int) for cls in classes)
    assert all(rows[code] for code in codes)


def test_every_error_keeps_its_builtin_base():
    """`except ValueError` / `except OSError` / `except RuntimeError` written before the error module still catch
    what they caught: each error is also the builtin exception it always was."""
    for cls in error_classes():
        assert issubclass(cls, (ValueError, OSError, RuntimeError)), cls


def _main_raising(monkeypatch, capsys, err: BaseException) -> tuple[int, str]:
    """cli.main(["inspect", ...]) with the command's work replaced by raising err: its exit code and stderr."""
    from shardmill.pipelines import cli

    def execute(args, beam_args):
        raise err

    monkeypatch.setitem(cli.COMMANDS, "inspect", dataclasses.replace(cli.COMMANDS["inspect"], execute=execute))
    code = cli.main(["inspect", "somewhere"])
    return code, capsys.readouterr().err


def test_a_command_ends_with_its_errors_own_exit_code(monkeypatch, capsys):
    from shardmill.core.errors import EXIT_BAD_INVOCATION, EXIT_COMMITTED_WITH_ERROR, ConfigError

    code, err = _main_raising(monkeypatch, capsys, ConfigError("output.path: an output directory is required"))
    assert code == EXIT_BAD_INVOCATION
    assert err == "shardmill inspect: error: output.path: an output directory is required\n"

    class LateFailure(ShardmillError, RuntimeError):
        exit_code = EXIT_COMMITTED_WITH_ERROR

    code, err = _main_raising(monkeypatch, capsys, LateFailure("after the commit point: disk full"))
    assert code == EXIT_COMMITTED_WITH_ERROR and "failed: LateFailure: after the commit point: disk full" in err


def test_a_builtin_value_error_is_a_defect_not_a_bad_invocation(monkeypatch, capsys):
    """Only shardmill's errors say the input was at fault; any other exception is shardmill's own failure."""
    from shardmill.core.errors import EXIT_FAILED

    code, err = _main_raising(monkeypatch, capsys, ValueError("operands could not be broadcast together"))
    assert code == EXIT_FAILED
    assert "shardmill inspect: failed: ValueError: operands could not be broadcast together" in err
