"""A training machine installs only the reader: a wheel of this checkout in a fresh venv, without Beam."""

import json
import os
import subprocess
import sys

import pytest

from tests.datagen.shards import write_output
from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # every test here runs a job or a subprocess


READ = """
import importlib.util, json, sys
assert importlib.util.find_spec("apache_beam") is None, "Beam came with the reader"
from shardmill.native_ext import OrderOptions, ShardReader
rows = 0
with ShardReader(sys.argv[1], 64, ["frame"], order_options=OrderOptions(seed=1)) as reader:
    for batch in reader:
        rows += len(batch["frame"])
print(json.dumps({"rows": rows}))
"""


def test_the_reader_alone_installs_and_reads_an_output_without_beam(tmp_path):
    wheels, venv, output = tmp_path / "wheels", tmp_path / "venv", tmp_path / "out"
    write_output(str(output), [300, 200], row_group_rows=64, width=16)
    wheel = os.environ.get("SHARDMILL_BUILT_WHEEL")  # `bash dev.sh test`: the wheel of this checkout it built
    if not wheel:
        # The build requirements are in the test extras: no isolated build environment to download. A build
        # directory of its own: the installed build's CMake cache names its (deleted) isolated environment.
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "--config-settings=build-dir=build/install-test-{wheel_tag}",
                        "-w", str(wheels), REPO], check=True, timeout=900, cwd=REPO)
        [wheel] = list(wheels.iterdir())
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
                   check=True, timeout=900)
    installed = subprocess.run([python, "-m", "pip", "list", "--format=json"], check=True, capture_output=True,
                               text=True).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert {"shardmill", "numpy", "pyarrow"} <= names and "apache-beam" not in names and "protobuf" not in names
    read = subprocess.run([python, "-c", READ, str(output)], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == {"rows": 500}
    # The job's commands say what to install instead of a traceback.
    run = subprocess.run([str(venv / "bin" / "shardmill"), "run", "--config", "job.textproto"],
                         capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert run.returncode == 2 and "pip install 'shardmill[job]'" in run.stderr
