"""The README's Python examples run as written, against the output the README's demo command makes."""

import os
import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO, SHARED_FIXTURES


def python_blocks() -> list[str]:
    with open(os.path.join(REPO, "README.md")) as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """A working directory holding out/demo, as `bash dev.sh demo` leaves the repository, out/tokens and
    out/clicks."""
    work = tmp_path_factory.mktemp("readme")
    data = work / "data" / "default"
    subprocess.run([sys.executable, "-m", "tests.datagen.lc0", str(data)], check=True, cwd=REPO,
                   capture_output=True, timeout=300)
    run = subprocess.run([sys.executable, "-m", "shardmill.pipelines.cli", "-q", "run", "--config",
                          os.path.join(REPO, "pipelines", "configs", "demo.textproto")],
                         cwd=str(work), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert (work / "out" / "demo" / ".manifest.json").exists()
    # out/tokens, for the token example: a Megatron corpus of the shared fixtures.
    corpus = os.path.join(SHARED_FIXTURES, "megatron", "meg-gpt2-openwebtext_text_document")
    config = work / "tokens.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{corpus}" seq_length: 128 }} output {{ path: "out/tokens" }}')
    run = subprocess.run([sys.executable, "-m", "shardmill.pipelines.cli", "-q", "run", "--config", str(config)],
                         cwd=str(work), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    # out/clicks, for the label example: a small click log.
    logs = work / "logs"
    logs.mkdir()
    (logs / "day-1.csv").write_text("user,clicked\n" + "".join(f"u{i},{int(i % 9 == 0)}\n" for i in range(500)))
    config = work / "clicks.textproto"
    config.write_text('input: "logs"\nlabel_sampling { label_column: "clicked" } output { path: "out/clicks" }')
    run = subprocess.run([sys.executable, "-m", "shardmill.pipelines.cli", "-q", "run", "--config", str(config)],
                         cwd=str(work), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return work


def test_the_readme_has_python_examples():
    assert len(python_blocks()) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_example_runs(demo_dir, index):
    block = python_blocks()[index]
    result = subprocess.run([sys.executable, "-c", block], cwd=str(demo_dir), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"README example {index + 1} failed:\n{block}\n{result.stderr}"
