"""The Python examples of README.md and docs/*.md run as written, against the outputs the README's demo command
and two small jobs make. A block that cannot run here (it needs a cloud or a cluster) starts with a line
`# not run: <why>`; such blocks are few and say why."""

import glob
import os
import re
import subprocess
import sys

import pytest
from google.protobuf import text_format

from shardmill.proto import shardmill_config_pb2 as config_pb2
from tests.support.cli import run_shardmill
from tests.support.paths import REPO, SHARED_FIXTURES

NOT_RUN = "# not run:"
MAX_NOT_RUN = 3  # an example that cannot run is an example nobody checks: keep them rare


def documentation_pages() -> list[str]:
    """README.md, then every page of docs/, as paths relative to the repository."""
    docs = sorted(os.path.relpath(path, REPO) for path in glob.glob(os.path.join(REPO, "docs", "*.md")))
    return ["README.md", *docs]


def python_blocks(page: str) -> list[str]:
    return fenced_blocks(page, "python")


def fenced_blocks(page: str, language: str) -> list[str]:
    with open(os.path.join(REPO, page)) as f:
        return re.findall(rf"^```{language}\n(.*?)^```", f.read(), re.MULTILINE | re.DOTALL)


def all_python_blocks() -> list[tuple[str, int, str]]:
    """(page, 1-based index of the block in its page, block) for every ```python block of the documentation."""
    return [(page, index, block) for page in documentation_pages()
            for index, block in enumerate(python_blocks(page), start=1)]


def not_run_reason(block: str) -> str | None:
    """Why a block is not run, when its first line says so; None for a block that runs."""
    first_line = block.split("\n", 1)[0]
    return first_line[len(NOT_RUN):].strip() if first_line.startswith(NOT_RUN) else None


BLOCKS = all_python_blocks()


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """A working directory holding out/demo, as `bash dev.sh demo` leaves the repository, out/tokens and
    out/clicks."""
    work = tmp_path_factory.mktemp("readme")
    data = work / "data" / "default"
    subprocess.run([sys.executable, "-m", "tests.datagen.lc0", str(data)], check=True, cwd=REPO,
                   capture_output=True, timeout=300)
    run = run_shardmill("-q", "run", "--config", os.path.join(REPO, "pipelines", "configs", "demo.textproto"),
                        cwd=work, timeout=600)
    assert run.returncode == 0, run.stderr
    assert (work / "out" / "demo" / ".manifest.json").exists()
    # out/tokens, for the token example: a Megatron corpus of the shared fixtures.
    corpus = os.path.join(SHARED_FIXTURES, "megatron", "meg-gpt2-openwebtext_text_document")
    config = work / "tokens.textproto"
    config.write_text(f'token_dataset {{ path_prefix: "{corpus}" seq_length: 128 }} output {{ path: "out/tokens" }}')
    run = run_shardmill("-q", "run", "--config", config, cwd=work, timeout=600)
    assert run.returncode == 0, run.stderr
    # out/clicks, for the label example: a small click log.
    logs = work / "logs"
    logs.mkdir()
    (logs / "day-1.csv").write_text("user,clicked\n" + "".join(f"u{i},{int(i % 9 == 0)}\n" for i in range(500)))
    config = work / "clicks.textproto"
    config.write_text('input: "logs"\nlabel_sampling { label_column: "clicked" } output { path: "out/clicks" }')
    run = run_shardmill("-q", "run", "--config", config, cwd=work, timeout=600)
    assert run.returncode == 0, run.stderr
    return work


def test_the_readme_has_a_python_example_and_the_docs_more():
    assert len(python_blocks("README.md")) >= 1
    assert len(BLOCKS) >= 10


def test_a_block_not_run_says_so_on_its_first_line():
    assert not_run_reason("# not run: needs a Dataflow project\nimport apache_beam\n") == "needs a Dataflow project"
    assert not_run_reason("import numpy  # not run: a comment further on is code\n") is None
    assert not_run_reason("# not run:\n") == ""


def test_examples_not_run_are_few_and_say_why():
    not_run = [(page, index, not_run_reason(block)) for page, index, block in BLOCKS
               if not_run_reason(block) is not None]
    assert len(not_run) <= MAX_NOT_RUN, f"too many examples not run: {not_run}"
    for page, index, reason in not_run:
        assert len(reason) >= 10, f"{page} example {index}: `{NOT_RUN}` needs its reason, got {reason!r}"


@pytest.mark.parametrize("page, index, block",
                         [pytest.param(page, index, block, id=f"{page}-{index}") for page in documentation_pages()
                          for index, block in enumerate(fenced_blocks(page, "text"), start=1)])
def test_documentation_config_example_parses(page, index, block):
    """Every ```text block of the documentation is a config: it parses as a JobConfig."""
    text_format.Parse(block, config_pb2.JobConfig())


@pytest.mark.slow
@pytest.mark.parametrize("page, index, block",
                         [pytest.param(page, index, block, id=f"{page}-{index}") for page, index, block in BLOCKS
                          if not_run_reason(block) is None])
def test_documentation_python_example_runs(demo_dir, page, index, block):
    result = subprocess.run([sys.executable, "-c", block], cwd=str(demo_dir), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"{page} example {index} failed:\n{block}\n{result.stderr}"
