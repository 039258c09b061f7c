"""CI's dependency pre-install (.ci/install_dependencies.py) installs exactly what pyproject.toml declares."""

import importlib.util
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="the script reads pyproject.toml with Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("install_dependencies", ROOT / ".ci" / "install_dependencies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_requirements_are_the_projects_and_its_named_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["job"] + project["optional-dependencies"]["test"]
    assert _script().requirements(["job", "test"]) == wanted
    assert "torch==2.13.0" in wanted  # the pin the test extra carries reaches pip unchanged


def test_an_unknown_extra_is_refused_by_name():
    with pytest.raises(SystemExit, match="no such extra in pyproject.toml: tset"):
        _script().requirements(["job", "tset"])

