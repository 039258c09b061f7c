"""`shardmill submit` (and its wrapper run_dataflow.sh): argument checks, the runner's own validation,
--dry-run (graph built locally, exact commands printed), the wheel and the workers' image."""

import os
import re
import subprocess
import sys
import sysconfig

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # every test here runs a job, a cluster or a subprocess



def submit(*args, cwd=None):
    env = dict(os.environ, SHARDMILL_PYTHON=sys.executable)
    return subprocess.run(["bash", os.path.join(REPO, "run_dataflow.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def has_gcp_extras():
    try:
        import apitools  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture
def config(lc0_dataset, tmp_path):
    path = tmp_path / "job.textproto"
    path.write_text(f'input: "{lc0_dataset[0]}"\nlc0 {{ chunk_pool {{ position_count: 2 }} }}\n')
    return str(path)


DATAFLOW = ["--output", "gs://bucket/out", "--project", "proj", "--region", "europe-west4",
            "--temp-location", "gs://bucket/tmp", "--num-workers", "8"]


@pytest.mark.skipif(has_gcp_extras(), reason="apache-beam[gcp] is installed here")
def test_dataflow_dry_run_without_the_gcp_extras_says_what_to_install(config):
    result = submit("--dry-run", "--config", config, *DATAFLOW)
    assert result.returncode == 2
    assert "DataflowRunner is not usable here" in result.stderr
    assert "pip install 'apache-beam[gcp]==2.77.0'" in result.stderr
    assert "would submit" not in result.stdout  # no plausible command for a submission that would fail


@pytest.mark.skipif(not has_gcp_extras(), reason="needs apache-beam[gcp] (not a test dependency: ~50 packages)")
def test_dataflow_dry_run_prints_the_exact_submission_and_builds_the_graph(config):
    result = submit("--dry-run", "--config", config, *DATAFLOW)
    assert result.returncode == 0, result.stderr
    submission = next(line for line in result.stdout.splitlines() if line.startswith("would submit:"))
    for part in ["--runner=DataflowRunner", "--project=proj", "--region=europe-west4",
                 "--temp_location=gs://bucket/tmp", "--num_workers=8", "--extra_package=",
                 "--output gs://bucket/out", f"--config {config}"]:
        assert part in submission
    assert "runner DataflowRunner; graph built and serialized, nothing submitted" in result.stdout


def test_flink_dry_run_validates_builds_the_graph_and_uses_an_external_worker_pool(config, tmp_path):
    result = submit("--dry-run", "--runner", "flink", "--flink-master", "flink-jm:8081", "--config", config,
                    "--output", str(tmp_path / "out"), cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    submission = next(line for line in result.stdout.splitlines() if line.startswith("would submit:"))
    assert "--runner=FlinkRunner --flink_master=flink-jm:8081" in submission
    assert "--environment_type=EXTERNAL --environment_config=localhost:50000" in submission
    assert "sdk_worker_main" not in submission  # a PROCESS command that cannot start under Flink
    assert "runner FlinkRunner; graph built and serialized, nothing submitted" in result.stdout
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_the_wheel_is_named_for_this_platform_and_python(config, tmp_path):
    result = submit("--dry-run", "--runner", "flink", "--flink-master", "h:1", "--config", config,
                    "--output", str(tmp_path / "o"))
    wheel = re.search(r"--extra_package=(\S+)", result.stdout).group(1)
    python = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel == os.path.join(REPO, "dist", f"shardmill-{wheel.split('-')[1]}-{python}-{python}-{platform}.whl")
    build = next(line for line in result.stdout.splitlines() if line.startswith("would build:"))
    assert f"-w {os.path.join(REPO, 'dist')} {REPO}" in build


def test_flink_docker_environment_and_user_beam_options_come_last(config, tmp_path):
    result = submit("--dry-run", "--runner", "flink", "--flink-master", "h:1", "--environment", "docker",
                    "--sdk-container", "reg/shardmill:1", "--config", config, "--output", str(tmp_path / "o"),
                    "--max_parallelism=4")
    assert result.returncode == 0, result.stderr
    submission = next(line for line in result.stdout.splitlines() if line.startswith("would submit:"))
    assert "--environment_type=DOCKER --environment_config=reg/shardmill:1" in submission
    assert submission.endswith("--max_parallelism=4")


def test_the_submitted_run_gets_every_job_argument_given_to_submit(config, tmp_path):
    from shardmill.pipelines import cli
    from shardmill.pipelines.commands import submit as submit_command

    wheel = tmp_path / "shardmill-0-py3-none-any.whl"
    wheel.write_bytes(b"")
    parser, parsers = cli.build_parser()
    given = ["--config", config, "--input", "a/*.tar", "--input", "b", "--output", str(tmp_path / "o"),
             "--seed", "7", "--overwrite", "--break-claim"]
    args = parser.parse_args(["submit", "--runner", "flink", "--flink-master", "h:1", "--wheel", str(wheel), *given])
    run_argv = submit_command.plan(args, []).run[4:]
    submitted, _ = parsers["run"].parse_known_args(run_argv)  # the rest: the runner's Beam options
    expected = parsers["run"].parse_args(given)
    assert vars(submitted) == vars(expected)


def test_help_exits_0():
    result = submit("--help")
    assert result.returncode == 0 and "--flink-master" in result.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--output", "gs://b/o", "--region", "r", "--temp-location", "gs://b/t"], "--project is required"),
        (["--output", "/local/out", "--project", "p", "--region", "r", "--temp-location", "gs://b/t"],
         "--output must be a gs:// path"),
        (["--output", "gs://b/o", "--project", "p", "--region", "r", "--temp-location", "/tmp"],
         "--temp-location must be a gs:// path"),
        (["--runner", "flink", "--output", "/o"], "--flink-master HOST:PORT is required"),
        (["--runner", "flink", "--flink-master", "h:1", "--environment", "docker", "--output", "/o"],
         "--environment docker needs --sdk-container"),
        (["--runner", "flink", "--flink-master", "h:1", "--worker-pool", "nowhere", "--output", "/o"],
         "--worker-pool must be HOST:PORT"),
        (["--runner", "spark", "--output", "/o"], "invalid choice: 'spark'"),
        (["--runner", "flink", "--flink-master", "h:1", "--output", "/o", "--flink-mastr", "x"],
         "did you mean --flink-master?"),
        (["--runner", "flink", "--flink-master", "h:1", "--output", "/o", "--wheel", "/nonexistent.whl"],
         "not a wheel file"),
    ],
)
def test_bad_arguments_are_refused_with_a_message(config, args, message):
    result = submit("--dry-run", "--config", config, *args)
    assert result.returncode == 2 and message in result.stderr


def test_invalid_config_fails_the_dry_run(tmp_path):
    path = tmp_path / "bad.textproto"
    path.write_text('input: "x" lc0 { chunk_pool { passes: 0 } }')
    result = submit("--dry-run", "--runner", "flink", "--flink-master", "h:1", "--config", str(path),
                    "--output", str(tmp_path / "o"))
    assert result.returncode == 2 and "chunk_pool.passes" in result.stderr


def test_the_workers_image_pins_the_same_beam_and_installs_the_job():
    with open(os.path.join(REPO, "Dockerfile")) as f:
        dockerfile = f.read()
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        beam = re.search(r'"apache-beam==([\d.]+)"', f.read()).group(1)
    assert f"FROM apache/beam_python{sys.version_info[0]}.{sys.version_info[1]}_sdk:{beam}" in dockerfile
    assert "pip install --no-cache-dir '.[job]'" in dockerfile


def test_a_dry_runs_validation_is_offline_and_a_store_it_reaches_for_is_one_line(monkeypatch):
    from apache_beam.options.pipeline_options import TestOptions
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

    from shardmill.pipelines.commands.submit import SubmitError, validate_for_runner

    seen = []

    def validate(self):
        seen.append(self.options.view_as(TestOptions).dry_run)
        raise ConnectionError("HTTPSConnectionPool(host='storage.googleapis.com', port=443): Max retries "
                              "exceeded\nwith url: /storage/v1/b?project=proj")

    monkeypatch.setattr(PipelineOptionsValidator, "validate", validate)
    with pytest.raises(SubmitError) as refused:
        validate_for_runner("flink", ["--runner=FlinkRunner", "--flink_master=localhost:8081"], offline=True)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("FlinkRunner options could not be validated offline: ")
    assert "ConnectionError: HTTPSConnectionPool(host='storage.googleapis.com'" in message
    assert seen == ["True"]  # Beam's own switch: Dataflow's validation then checks no bucket over the network
