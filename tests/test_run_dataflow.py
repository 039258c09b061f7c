"""run_dataflow.sh: argument checks and --dry-run (graph built locally, exact submission printed)."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def submit(*args):
    env = dict(os.environ, SHARDMILL_PYTHON=sys.executable)
    return subprocess.run(["bash", os.path.join(REPO, "run_dataflow.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def config(lc0_dataset, tmp_path):
    path = tmp_path / "job.textproto"
    path.write_text(f'input: "{lc0_dataset[0]}"\nchunk_pool {{ position_count: 2 }}\n')
    return str(path)


def test_dataflow_dry_run_prints_the_exact_submission_and_builds_the_graph(config):
    result = submit("--dry-run", "--config", config, "--output", "gs://bucket/out", "--project", "proj",
                    "--region", "europe-west4", "--temp-location", "gs://bucket/tmp", "--num-workers", "8")
    assert result.returncode == 0, result.stderr
    submission = next(line for line in result.stdout.splitlines() if line.startswith("would submit:"))
    for part in ["--runner=DataflowRunner", "--project=proj", "--region=europe-west4",
                 "--temp_location=gs://bucket/tmp", "--num_workers=8", "--extra_package=dist/shardmill-",
                 "--output gs://bucket/out", f"--config {config}"]:
        assert part in submission
    assert "graph built and serialized, nothing submitted" in result.stdout
    assert "runner DataflowRunner" in result.stdout


def test_flink_dry_run(config, tmp_path):
    result = submit("--dry-run", "--runner", "flink", "--flink-master", "flink-jm:8081", "--config", config,
                    "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "--runner=FlinkRunner --flink_master=flink-jm:8081" in result.stdout
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    "args,message",
    [
        (["--output", "gs://b/o", "--region", "r", "--temp-location", "gs://b/t"], "--project is required"),
        (["--output", "/local/out", "--project", "p", "--region", "r", "--temp-location", "gs://b/t"],
         "--output must be a gs:// path"),
        (["--output", "gs://b/o", "--project", "p", "--region", "r", "--temp-location", "/tmp"],
         "--temp-location must be a gs:// path"),
        (["--runner", "flink", "--output", "/o"], "--flink-master HOST:PORT is required"),
        (["--runner", "spark", "--output", "/o"], "--runner must be dataflow or flink"),
    ],
)
def test_bad_arguments_are_refused_with_a_message(config, args, message):
    result = submit("--dry-run", "--config", config, *args)
    assert result.returncode == 2 and message in result.stderr


def test_invalid_config_fails_the_dry_run(tmp_path):
    path = tmp_path / "bad.textproto"
    path.write_text('input: "x" chunk_pool { passes: 0 }')
    result = submit("--dry-run", "--runner", "flink", "--flink-master", "h:1", "--config", str(path),
                    "--output", str(tmp_path / "o"))
    assert result.returncode == 2 and "chunk_pool.passes" in result.stderr
