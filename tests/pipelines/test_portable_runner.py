"""The job through Beam's portable API, as a Flink or Dataflow cluster would run it.

Starts Beam's local job service and an external SDK worker pool as separate
processes on loopback, submits with PortableRunner (EXTERNAL environment), and
checks the shards are byte-identical to the in-process run.
"""

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.pipelines.test_run_job import SAMPLED, file_digests, job_config, run

pytestmark = pytest.mark.slow  # every test here runs a job or a subprocess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"service exited early with code {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


@pytest.fixture(scope="module")
def portable_services(tmp_path_factory):
    logs = tmp_path_factory.mktemp("services")
    env = dict(os.environ)
    # The worker pool starts workers with a bare `python` from PATH: make it ours.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    job_port, worker_port = _free_port(), _free_port()
    commands = {
        "job_service": [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                        "--port", str(job_port)],
        "worker_pool": [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                        "--service_port", str(worker_port)],
    }
    processes = {}
    try:
        for name, command in commands.items():
            log = open(logs / f"{name}.log", "w")
            processes[name] = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True)
        _wait_for_port(job_port, processes["job_service"])
        _wait_for_port(worker_port, processes["worker_pool"])
        yield [
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{worker_port}",
        ]
    finally:
        for process in processes.values():
            try:
                os.killpg(process.pid, 15)
            except ProcessLookupError:
                pass
            process.wait(timeout=30)


def test_portable_runner_with_external_workers_writes_identical_shards(lc0_dataset, portable_services, tmp_path):
    directory, _ = lc0_dataset
    in_process = tmp_path / "in_process"
    portable = tmp_path / "portable"
    run(job_config(directory, SAMPLED), in_process)
    run(job_config(directory, SAMPLED), portable, portable_services)
    assert file_digests(portable) == file_digests(in_process)


@pytest.mark.parametrize("command", ["run", "count"])
def test_a_job_service_or_worker_pool_that_is_not_there_is_named_in_one_line_before_any_work(command, tmp_path,
                                                                                            lc0_dataset):
    # Beam waited without end on a job endpoint nothing answered; a missing worker pool surfaced as gRPC's
    # multi-line text once the job had started.
    from tests.support.cli import run_shardmill

    job_port, pool_port = _free_port(), _free_port()
    out = tmp_path / "out"
    args = {"run": ["run", "--config", str(_lc0_config(tmp_path, lc0_dataset[0])), "--output", str(out)],
            "count": ["count", lc0_dataset[0], "--temp_location", str(tmp_path / "temp")]}[command]
    started = time.monotonic()
    done = run_shardmill(*args, "--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
                         "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}", timeout=120)
    seconds = time.monotonic() - started
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 3 and len(lines) == 1, done.stderr
    assert (f"ServiceUnreachable: the job service (--job_endpoint) at localhost:{job_port} does not accept "
            f"connections") in lines[0] and f"the worker pool (--environment_config) at localhost:{pool_port}" in lines[0]
    assert seconds < 60 and not out.exists()


def _lc0_config(tmp_path, inputs: str):
    path = tmp_path / "job.textproto"
    path.write_text(f'input: "{inputs}"\n')
    return path
