"""The import layers of pyproject.toml's [tool.importlinter] hold on the source tree (.ci/lint_imports.py, which CI
also runs before the tests), and an import against them fails the check, naming the edge."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = os.path.join(REPO, ".ci", "lint_imports.py")
# A wide terminal for lint-imports' report, so that no edge is wrapped across lines.
ENV = dict(os.environ, COLUMNS="400")


def _lint(source: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, LINT, "--source", source], capture_output=True, text=True, timeout=300,
                          env=ENV)


def _copy_of_the_source_tree(destination) -> str:
    """The checkout's Python parts and pyproject.toml (what the linter reads), without build products."""
    spec = importlib.util.spec_from_file_location("lint_imports", LINT)
    lint_imports = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lint_imports)
    shutil.copy(os.path.join(REPO, "pyproject.toml"), destination)
    for folder in sorted(set(lint_imports.wheel_packages(Path(REPO, "pyproject.toml")).values())):
        shutil.copytree(os.path.join(REPO, folder), os.path.join(destination, folder),
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "src", "tests", "cmake"))
    return str(destination)


@pytest.mark.slow
def test_the_source_tree_keeps_every_import_contract():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.slow
def test_a_shared_block_importing_the_commands_breaks_the_layers(tmp_path):
    source = _copy_of_the_source_tree(tmp_path)
    spill = os.path.join(source, "transforms", "common", "spill.py")
    with open(spill, "a") as f:
        f.write("\nimport shardmill.pipelines.cli  # noqa: E402,F401  (backwards: a shared block uses a command)\n")
    done = _lint(source)
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout
    assert "commands -> job kinds -> shared job blocks -> reader -> core BROKEN" in report
    assert "shardmill.transforms.common.spill -> shardmill.pipelines.cli" in report
    assert "no import cycles between the modules of a package BROKEN" in report  # transforms <-> pipelines


@pytest.mark.slow
def test_a_new_job_kind_left_out_of_the_contracts_fails_the_check(tmp_path):
    """The contracts name the kinds one by one: a fourth kind's folder that they do not name would import
    another kind unchecked, so the check refuses it, saying what to add."""
    source = _copy_of_the_source_tree(tmp_path)
    os.makedirs(os.path.join(source, "transforms", "images"))
    for name in ("__init__.py", "kind.py"):
        Path(source, "transforms", "images", name).write_text("import shardmill.transforms.lc0.kind  # noqa: F401\n")
    done = _lint(source)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("transforms/images is a job kind (it has kind.py), but pyproject.toml's import contract 'layers' does "
            "not name shardmill.transforms.images") in done.stdout
    assert "contract 'kinds-independent' does not name shardmill.transforms.images" in done.stdout
