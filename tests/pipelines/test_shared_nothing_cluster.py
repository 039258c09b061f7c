"""The job on Beam's portable runner with workers that share nothing with the launcher but the object store.

tests/support/shared_nothing.py sets it up: the launcher (Beam's job service and the `shardmill` command) and
the SDK worker pool each in a private mount namespace (their own tmpfs /tmp, /var/tmp, /dev/shm and HOME; the
workers' package read-only), moto's S3 server the only storage both reach. Inputs and outputs are on s3://.
Every kind's shards are those of the same job in-process; a worker pool killed, a paused store and workers
without the store's settings end as docs/cluster.md says.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import time

import pytest
from pyarrow.fs import FileSelector, FileType

import shardmill
from shardmill.pipelines import cli

from tests.datagen.lc0 import gzip_bytes, make_game_records
from tests.pipelines.test_job_contract import write_inputs
from tests.support.shared_nothing import SharedNothingCluster, isolation_unavailable

pytestmark = pytest.mark.slow  # every test here runs jobs in subprocesses

BUCKET = "cluster"
PACKAGE = list(shardmill.__path__)[0]
# A lost worker pool or a paused store must end a run within this (seconds after the fault); docs/cluster.md.
FAULT_BOUND_SECONDS = 60
MEGATRON_CACHE = ' megatron_cache { data_path: "/data/megatron/corpus" tokenizer: "{\\"class\\": \\"T\\"}" }'


@pytest.fixture(scope="module")
def cluster(lc0_dataset, tmp_path_factory):
    reason = isolation_unavailable()
    if reason:
        if os.environ.get("CI"):  # CI runs as root: there the set-up must work
            pytest.fail(f"shared-nothing cluster unavailable in CI: {reason}")
        pytest.skip(f"shared-nothing cluster unavailable: {reason}")
    local = tmp_path_factory.mktemp("cluster-inputs")
    texts = write_inputs(local, lc0_dataset[0])
    with SharedNothingCluster() as running:
        running.store.create_bucket(BUCKET)
        running.store.upload(str(local), f"{BUCKET}/inputs")
        running.store.upload(lc0_dataset[0], f"{BUCKET}/lc0")
        remote = {name: text.replace(lc0_dataset[0], f"s3://{BUCKET}/lc0").replace(str(local), f"s3://{BUCKET}/inputs")
                  for name, text in texts.items()}
        remote["tokens"] = remote["tokens"].rstrip().removesuffix("}") + MEGATRON_CACHE + " }"
        assert all("s3://" in text for text in remote.values())
        running.configs = remote
        yield running


def config_text(cluster, kind: str, output: str) -> str:
    return cluster.configs[kind] + f'\noutput {{ path: "{output}" num_shards: 2 }}\n'


def start_run(cluster, kind: str, output: str, *extra: str) -> subprocess.Popen:
    """`shardmill run` on the portable runner, on the launcher's side (the config on its standard input), started."""
    return cluster.start_launcher("run", "--config", "/dev/stdin", *cluster.runner_args, *extra,
                                  input_text=config_text(cluster, kind, output))


def finished(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def object_names(cluster, prefix: str) -> list[str]:
    """The objects under s3://BUCKET/prefix by their paths relative to it."""
    infos = cluster.store.filesystem().get_file_info(FileSelector(f"{BUCKET}/{prefix}", recursive=True,
                                                                  allow_not_found=True))
    return [info.path[len(f"{BUCKET}/{prefix}/"):] for info in infos if info.type == FileType.File]


def objects(cluster, prefix: str) -> dict[str, bytes]:
    """Every object under s3://BUCKET/prefix by its path relative to it, with its bytes (of a finished run)."""
    fs = cluster.store.filesystem()
    found = {}
    for rel in object_names(cluster, prefix):
        with fs.open_input_stream(f"{BUCKET}/{prefix}/{rel}") as f:
            found[rel] = f.read()
    return found


def output_digests(cluster, prefix: str) -> dict[str, str]:
    """An output's files by relative path: their SHA-256; the manifests without their timings and with the output's
    own path (in the config they record) taken out, the only things two runs into two places may differ in."""
    digests = {}
    for rel, data in objects(cluster, prefix).items():
        if rel.rsplit("/", 1)[-1] in (".manifest.json", "manifest.json"):
            manifest = json.loads(data)
            del manifest["stats"]["timings"]
            data = json.dumps(manifest, sort_keys=True).replace(f"s3://{BUCKET}/{prefix}", "OUTPUT").encode()
        digests[rel] = hashlib.sha256(data).hexdigest()
    return digests


def in_process_output(cluster, kind: str, tmp_path) -> str:
    """The prefix of the kind's output run in this process (the environment pointed at the store), run once."""
    prefix = f"in-process-{kind}"
    if not objects(cluster, prefix):
        config = tmp_path / f"{kind}.textproto"
        config.write_text(config_text(cluster, kind, f"s3://{BUCKET}/{prefix}"))
        assert cli.main(["run", "--config", str(config)]) == 0
    return prefix


def staged_objects(cluster, prefix: str) -> list[str]:
    return [rel for rel in object_names(cluster, prefix) if rel.startswith(".staging-")]


def test_a_file_the_launcher_writes_to_its_disk_is_invisible_to_the_workers(cluster, tmp_path):
    (tmp_path / "host-marker").write_text("the test's own /tmp")
    written = cluster.run_on("launcher", ["sh", "-c", "echo launcher > /tmp/launcher-marker && echo x > "
                                          "\"$HOME/home-marker\" && cat /tmp/launcher-marker"])
    assert written.returncode == 0 and written.stdout.strip() == "launcher", written.stderr
    seen = cluster.run_on("workers", ["sh", "-c", f"for f in /tmp/launcher-marker /tmp/home/home-marker "
                                      f"{tmp_path / 'host-marker'}; do test -e $f && echo seen $f; done; "
                                      f"pwd; echo $HOME; touch {PACKAGE}/.written-by-a-worker 2>&1 || true; "
                                      "awk '$5 ~ \"^/(tmp|var/tmp|dev/shm)$\" {print $5, $9}' /proc/self/mountinfo"])
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.splitlines()
    assert not [line for line in lines if line.startswith("seen ")], lines
    assert lines[:2] == ["/tmp/work", "/tmp/home"]  # its own working directory and HOME, outside the checkout
    assert {"/dev/shm tmpfs", "/tmp tmpfs", "/var/tmp tmpfs"} <= set(lines[2:])
    # the package (here the venv holding it) is read-only: a worker cannot change what the next one runs
    assert "Read-only file system" in seen.stdout or "Permission denied" in seen.stdout, lines


@pytest.fixture()
def store_env(cluster, monkeypatch):
    """This process pointed at the cluster's store (for runs in-process and the reader)."""
    for name, value in cluster.store.env.items():
        monkeypatch.setenv(name, value)


def test_every_kind_on_workers_sharing_only_the_store_writes_the_in_process_shards(cluster, store_env, tmp_path,
                                                                                   capsys):
    # side by side: one job service and one worker pool take several jobs
    runs = {kind: start_run(cluster, kind, f"s3://{BUCKET}/portable-{kind}") for kind in cluster.configs}
    for kind in cluster.configs:  # meanwhile the same jobs in this process (Beam is imported here already)
        in_process_output(cluster, kind, tmp_path)
    results = {kind: finished(process) for kind, process in runs.items()}
    for kind, (code, out, err) in results.items():
        assert code == 0, (kind, out[-2000:], err[-3000:])
    for kind in cluster.configs:
        in_process = output_digests(cluster, f"in-process-{kind}")
        assert output_digests(cluster, f"portable-{kind}") == in_process, kind
        assert [rel for rel in in_process if rel.startswith(".staging-") or rel.startswith(".claims/")] == []
    assert any("megatron-cache/" in rel for rel in output_digests(cluster, "portable-tokens"))

    from shardmill.native_ext import CacheOptions, OrderOptions, ReadOptions, ShardReader, load_manifest

    for kind in cluster.configs:
        output = f"s3://{BUCKET}/portable-{kind}"
        inspected = cluster.run_launcher("inspect", output)
        assert inspected.returncode == 0 and "shard" in inspected.stdout, inspected.stderr
        manifest = load_manifest(output)
        options = ReadOptions(cache=CacheOptions(str(tmp_path / "shard-cache"), max_bytes=1 << 30))
        with ShardReader(output, batch_size=64, read_options=options,
                         order_options=OrderOptions(shuffle=False)) as reader:
            rows = sum(batch.num_rows if hasattr(batch, "num_rows") else len(next(iter(batch.values())))
                       for batch in reader)
        assert rows == sum(shard["rows"] for shard in manifest["shards"]), kind
    assert len(os.listdir(tmp_path / "shard-cache")) > 0


def test_count_on_workers_sharing_only_the_store_reports_what_it_reports_in_process(cluster, store_env, capsys):
    args = ["count", f"s3://{BUCKET}/lc0", "--json", "--index-cache", "none"]
    portable = cluster.run_launcher(*args, *cluster.runner_args, f"--temp_location=s3://{BUCKET}/temp")
    assert portable.returncode == 0, portable.stderr[-3000:]
    capsys.readouterr()
    assert cli.main(args) == 0
    counted = [json.loads(text) for text in (portable.stdout, capsys.readouterr().out)]
    for report in counted:
        report.pop("seconds")
    assert counted[0] == counted[1]
    assert objects(cluster, "temp") == {}  # the count's files on the store, removed once read


def test_a_worker_pool_killed_mid_run_fails_the_run_in_one_line_and_a_rerun_commits(cluster):
    output = "killed"
    started = time.monotonic()
    process = start_run(cluster, "lc0", f"s3://{BUCKET}/{output}")
    # Mid-run: the workers have spilled a first task's rows to the store.
    while not any("/spill/" in rel for rel in staged_objects(cluster, output)):
        assert process.poll() is None and time.monotonic() - started < 240, process.communicate()
        time.sleep(0.2)
    cluster.kill_workers()
    killed = time.monotonic()
    try:
        code, out, err = finished(process, timeout=FAULT_BOUND_SECONDS + 30)
        seconds = time.monotonic() - killed
        assert code == 3, (out, err)
        assert err.strip().count("\n") == 0 and err.startswith("shardmill run: failed:"), err
        assert seconds < FAULT_BOUND_SECONDS, seconds
        assert objects(cluster, output) == {}  # nothing committed, staging dropped, the claim released
        print(f"\nworker pool killed -9: exit {code} {seconds:.1f} s later: {err.strip()}")
    finally:
        cluster.start_workers()
    code, out, err = finished(start_run(cluster, "lc0", f"s3://{BUCKET}/{output}"))
    assert code == 0, err[-3000:]
    assert "committed generation 1" in out


def test_a_store_paused_mid_run_ends_the_run_with_the_whole_new_output_or_none(cluster, store_env, tmp_path):
    output = "paused"
    started = time.monotonic()
    process = start_run(cluster, "labels", f"s3://{BUCKET}/{output}")
    while not staged_objects(cluster, output):
        assert process.poll() is None and time.monotonic() - started < 240, process.communicate()
        time.sleep(0.2)
    with cluster.store_paused():
        time.sleep(5)
    resumed = time.monotonic()
    code, out, err = finished(process, timeout=FAULT_BOUND_SECONDS + 30)
    assert time.monotonic() - resumed < FAULT_BOUND_SECONDS
    left = objects(cluster, output)
    print(f"\nstore paused 5 s: exit {code} {time.monotonic() - resumed:.1f} s after it resumed; {len(left)} object(s)")
    if code == 0:
        reference = in_process_output(cluster, "labels", tmp_path)
        assert output_digests(cluster, output) == output_digests(cluster, reference), "a mixed output"
    else:
        assert left == {}, (code, err, sorted(left))
        assert err.strip().count("\n") == 0, err


def test_workers_without_the_store_settings_fail_the_run_in_one_line_naming_the_store(cluster):
    cluster.start_workers(with_store=False)
    try:
        started = time.monotonic()
        code, out, err = finished(start_run(cluster, "labels", f"s3://{BUCKET}/no-store"), timeout=240)
        seconds = time.monotonic() - started
    finally:
        cluster.start_workers()
    print(f"\nworkers without the store's settings: exit {code} after {seconds:.1f} s: {err.strip()}")
    assert code == 3, (out, err)
    assert err.strip().count("\n") == 0 and f"s3://{BUCKET}" in err, err
    assert seconds < FAULT_BOUND_SECONDS + 60, seconds
    assert objects(cluster, "no-store") == {}


def test_a_local_input_the_workers_cannot_see_fails_the_run_naming_it(cluster):
    # The launcher finds the files on its own disk; the workers, listing the same path on theirs, find nothing.
    # Before, the run went on without them and committed an empty output with exit 0.
    chunk = base64.b64encode(gzip_bytes(make_game_records(6, 3))).decode()
    made = cluster.run_on("launcher", ["sh", "-c", f"mkdir -p /tmp/local-lc0 && echo {chunk} | base64 -d "
                                       "> /tmp/local-lc0/a.gz"])
    assert made.returncode == 0, made.stderr
    code, out, err = finished(start_run(cluster, "lc0", f"s3://{BUCKET}/local-input", "--input", "/tmp/local-lc0"),
                              timeout=240)
    print(f"\na local input on workers with their own disks: exit {code}: {err.strip()}")
    assert code != 0 and "committed" not in out + err, (out, err)
    assert err.strip().count("\n") == 0, err
    assert "input '/tmp/local-lc0': names no file on the host running this step" in err, err
    assert objects(cluster, "local-input") == {}


def job_states(cluster) -> dict[str, str]:
    """The job service's jobs by id: their states' names (RUNNING, CANCELLED...)."""
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2 as api, beam_job_api_pb2_grpc as rpc

    with grpc.insecure_channel(f"localhost:{cluster.job_port}") as channel:
        jobs = rpc.JobServiceStub(channel).GetJobs(api.GetJobsRequest(), timeout=10).job_info
    return {job.job_id: api.JobState.Enum.Name(job.state) for job in jobs}


# An interrupted launcher's job must be over on the runner within this (seconds after the signal); docs/cluster.md.
CANCEL_BOUND_SECONDS = 30


def test_an_interrupted_launcher_cancels_its_job_on_the_runner_and_leaves_the_store_clean(cluster):
    output = "interrupted"
    before = set(job_states(cluster))
    started = time.monotonic()
    process = start_run(cluster, "lc0", f"s3://{BUCKET}/{output}")
    while "RUNNING" not in [state for job, state in job_states(cluster).items() if job not in before]:
        assert process.poll() is None and time.monotonic() - started < 120, process.communicate()
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    code, out, err = finished(process, timeout=CANCEL_BOUND_SECONDS + 30)
    seconds = time.monotonic() - interrupted
    states = {job: state for job, state in job_states(cluster).items() if job not in before}
    print(f"\nlauncher SIGINTed mid-run: exit {code} {seconds:.1f} s later, its job {states}: {err.strip()}")
    assert code != 0 and err.strip().count("\n") == 0 and "interrupted (SIGINT)" in err, (code, out, err)
    assert seconds < CANCEL_BOUND_SECONDS, seconds
    assert list(states.values()) == ["CANCELLED"], states  # before: RUNNING, for the job service's 900 s wait
    assert objects(cluster, output) == {}


def test_a_local_output_on_workers_with_their_own_disks_fails_in_one_line_naming_the_error_and_path(cluster):
    # The launcher stages on its disk; the workers, looking for that staging on theirs, find none.
    started = time.monotonic()
    code, out, err = finished(start_run(cluster, "labels", "/tmp/local-output"), timeout=240)
    print(f"\na local output with workers on their own disks: exit {code} after {time.monotonic() - started:.1f} s: "
          f"{err.strip()}")
    assert code == 3 and "committed" not in out + err, (out, err)
    assert err.strip().count("\n") == 0, err
    assert "failed: RunCancelled: run " in err and "its staging directory /tmp/local-output/.staging-" in err, err
    assert "Traceback" not in err
