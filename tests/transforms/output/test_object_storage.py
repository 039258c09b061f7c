"""The whole job on object storage, against a real S3 protocol server (moto on loopback): inputs of every
kind read from s3://, outputs written there through the same lifecycle — bytes identical to the job on
local disk, one run at a time by the listing claim, and exactly the old or the new output after kill -9."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from shardmill.native_ext import OrderOptions, ReadOptions, ShardReader, load_manifest
from shardmill.pipelines import cli
from shardmill.transforms.common import filesystem
from shardmill.transforms.output import lifecycle
from shardmill.transforms.output.claim import ClaimHeldError, ClaimInfo, OutputClaim
from tests.pipelines.test_job_contract import write_config, write_inputs
from tests.support.cli import run_shardmill, shardmill_command
from tests.support.s3_server import free_port, silent_server, status_server

BUCKET = "storage"


def content(out: str) -> tuple:
    """The shards' checksums of an output, after reading every row with checksums on."""
    manifest = load_manifest(out, verify_checksums=True)
    with ShardReader(out, batch_size=500, read_options=ReadOptions(verify_checksums=True),
                     order_options=OrderOptions(shuffle=False)) as reader:
        rows = sum(len(batch["record_index"]) for batch in reader)
    assert rows == sum(s["rows"] for s in manifest["shards"])
    return tuple(s["sha256"] for s in manifest["shards"])


def leftovers(out: str) -> list[str]:
    committed = lifecycle.read_committed(out)
    return [rel for rel in lifecycle._relative_tree(out) if lifecycle._is_leftover(rel, committed, set())]


@pytest.fixture(scope="module")
def kinds(s3_server, lc0_dataset, tmp_path_factory):
    """Config texts of every kind twice: inputs on local disk, and the same inputs in the bucket."""
    local = tmp_path_factory.mktemp("storage")
    texts = write_inputs(local, lc0_dataset[0])
    s3_server.create_bucket(BUCKET)
    s3_server.upload(str(local), f"{BUCKET}/inputs")
    s3_server.upload(lc0_dataset[0], f"{BUCKET}/lc0")
    remote = {name: text.replace(lc0_dataset[0], f"s3://{BUCKET}/lc0").replace(str(local), f"s3://{BUCKET}/inputs")
              for name, text in texts.items()}
    assert all("s3://" in text for text in remote.values())
    return local, texts, remote


@pytest.mark.slow
def test_every_kind_from_s3_inputs_into_an_s3_output_is_the_job_on_local_disk(kinds, capsys):
    local, texts, remote = kinds
    for name in texts:
        on_disk = str(local / f"out-{name}")
        assert cli.main(["run", "--config", write_config(local, f"{name}-local", texts[name], on_disk)]) == 0
        in_bucket = f"s3://{BUCKET}/out-{name}"
        assert cli.main(["run", "--config", write_config(local, f"{name}-s3", remote[name], in_bucket)]) == 0, \
            capsys.readouterr().err
        assert content(in_bucket) == content(on_disk), name
        assert leftovers(in_bucket) == [], name
        capsys.readouterr()


RACE = """
import sys, time
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from shardmill.transforms.output.claim import ClaimHeldError, OutputClaim
FileSystems.set_options(PipelineOptions([]))
claim = OutputClaim(sys.argv[1], sys.argv[2])
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
try:
    claim.acquire()
except ClaimHeldError:
    print("refused")
else:
    print("won")
    time.sleep(1.5)  # held while the others decide
    claim.release()
"""


@pytest.mark.slow
def test_of_runs_claiming_one_s3_output_at_once_exactly_one_wins(s3_server, kinds):
    for round_ in range(3):
        out = f"s3://{BUCKET}/race-{round_}"
        start = time.time() + 3  # every process started and imported by then
        procs = [subprocess.Popen([sys.executable, "-c", RACE, out, f"run-{round_}-{i}", str(start)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
        results = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [r[1][-500:] for r in results]
        assert sorted(r[0].strip() for r in results) == ["refused", "refused", "won"], results
        assert lifecycle._relative_tree(out) == []  # the winner released, the others withdrew


@pytest.mark.slow
def test_a_run_is_refused_while_another_holds_the_s3_output_and_a_stale_claim_breaks_only_when_asked(
        s3_server, kinds):
    out = f"s3://{BUCKET}/claimed"
    holder = OutputClaim(out, "holder")
    holder.acquire()
    try:
        with pytest.raises(ClaimHeldError, match="in use by run holder"):
            OutputClaim(out, "second").acquire(break_stale=True)  # fresh: never broken
    finally:
        holder.release()
    elsewhere = ClaimInfo("elsewhere", "another-host", 4242, None, time.time())
    fs = s3_server.filesystem()
    for suffix, body in ((".json", elsewhere.to_bytes()), (".alive", b"{}")):
        with fs.open_output_stream(f"{BUCKET}/claimed/.claims/elsewhere{suffix}") as f:
            f.write(body)
    time.sleep(2.5)  # the store stamps objects to the second
    with pytest.raises(ClaimHeldError, match="probably crashed; pass --break-claim"):
        OutputClaim(out, "third", stale_after_seconds=1).acquire()
    late = OutputClaim(out, "third", stale_after_seconds=1)
    assert any("broke the claim" in note for note in late.acquire(break_stale=True))
    late.release()
    assert lifecycle._relative_tree(out) == []


@pytest.mark.slow
def test_sigkill_at_random_moments_of_an_s3_overwrite_leaves_exactly_the_old_or_the_new_output(kinds):
    local, texts, remote = kinds
    out = f"s3://{BUCKET}/killed"
    configs = {seed: write_config(local, f"killed-{seed}", remote["lc0"] + f"\nseed: {seed}", out)
               for seed in (1, 2)}
    contents = {}
    for seed in (1, 2):
        started = time.monotonic()
        done = run_shardmill("run", "--config", configs[seed], "--overwrite")
        run_seconds = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        contents[seed] = content(out)
    assert contents[1] != contents[2]
    current = 2
    rng = np.random.default_rng(27)
    # Half the moments anywhere in a run, half near its end, where the commit happens.
    moments = np.concatenate([rng.uniform(0.2, run_seconds, 3), rng.uniform(0.7, 1.05, 3) * run_seconds])
    killed = 0
    for moment in rng.permutation(moments):
        other = 3 - current
        proc = subprocess.Popen(shardmill_command("run", "--config", configs[other], "--overwrite"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(moment)
        proc.kill()
        proc.communicate(timeout=60)
        killed += proc.returncode == -signal.SIGKILL
        now = content(out)
        assert now in (contents[current], contents[other]), f"a mixed output after SIGKILL at {moment:.2f} s"
        current = 1 if now == contents[1] else 2
    assert killed >= 3  # most moments caught a run in flight
    done = run_shardmill("run", "--config", configs[1], "--overwrite")
    assert done.returncode == 0, done.stderr
    assert content(out) == contents[1] and leftovers(out) == []


# docs/operations.md's bound on failing against a store that does not answer: the probe's 12 s deadline plus the
# command's start (importing Beam: a few seconds on a busy machine).
UNREACHABLE_STORE_SECONDS = 30


@contextlib.contextmanager
def unreachable_store(behaviour: str):
    """The endpoint of an S3 store on loopback that does not answer: nothing listening (refusing), connections
    accepted and never answered (silent), or never completed (dropping)."""
    if behaviour == "refusing":
        yield f"http://127.0.0.1:{free_port()}"
        return
    if behaviour in STATUS_OF:
        with status_server(STATUS_OF[behaviour]) as address:
            yield f"http://{address}"
        return
    with silent_server(drop_connections=behaviour == "dropping") as address:
        yield f"http://{address}"


# Stores that answer, with what no later call would get past: a server error (Beam retried every call on it
# for minutes), access denied.
STATUS_OF = {"erroring": 503, "forbidding": 403}
WHAT_IT_SAYS = {"erroring": "answers HTTP 503 (a server error)", "forbidding": "refuses access (HTTP 403)"}


def aws_settings(endpoint: str) -> dict:
    """The environment that points AWS clients at endpoint."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def shardmill_against(endpoint: str, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """(seconds, result) of the shardmill command with AWS clients pointed at endpoint; a hang fails at 90 s."""
    started = time.monotonic()
    done = run_shardmill(*args, env=aws_settings(endpoint), timeout=90, memory_limit_bytes=3 << 30)
    return time.monotonic() - started, done


def assert_failed_in_one_line_naming_the_store(command: str, endpoint: str, seconds: float, done,
                                               behaviour: str = "silent") -> str:
    assert done.returncode == cli.EXIT_FAILED, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    last = lines[0]
    says = WHAT_IT_SAYS.get(behaviour, "does not answer: ")
    assert last.startswith(f"shardmill {command}: failed: StoreUnreachable: s3://{BUCKET} (endpoint {endpoint}) "
                           f"{says}"), last
    assert seconds < UNREACHABLE_STORE_SECONDS, (seconds, last)
    return last


# Every bucket a command names goes through the one probe: the input side meets every behaviour, the output side
# one store that waits and one that answers with a refusal (each case is a command's start-up, seconds of CI).
@pytest.mark.slow
@pytest.mark.parametrize("side, behaviour", [
    *(("input", behaviour) for behaviour in ("refusing", "silent", "dropping", "erroring", "forbidding")),
    ("output", "silent"), ("output", "forbidding")])
def test_a_run_with_an_s3_store_that_does_not_answer_or_will_not_serve_fails_within_the_bound_in_one_line(
        side, behaviour, lc0_dataset, tmp_path):
    out = tmp_path / "out"
    if side == "input":
        config = write_config(tmp_path, "run", f'input: "s3://{BUCKET}/lc0"', str(out))
    else:
        config = write_config(tmp_path, "run", f'input: "{lc0_dataset[0]}"', f"s3://{BUCKET}/out")
    with unreachable_store(behaviour) as endpoint:
        seconds, done = shardmill_against(endpoint, "run", "--config", config)
    assert_failed_in_one_line_naming_the_store("run", endpoint, seconds, done, behaviour)
    assert not out.exists() and os.listdir(tmp_path) == ["run.textproto"]  # nothing written


@pytest.mark.slow
@pytest.mark.parametrize("command, behaviour", [("count", "refusing"), ("count", "silent"), ("inspect", "silent"),
                                                ("dry run", "silent")])
def test_count_inspect_and_a_dry_run_with_an_s3_store_that_does_not_answer_fail_as_a_run_does(command, behaviour,
                                                                                               tmp_path):
    args = {"count": ["count", f"s3://{BUCKET}/lc0"], "inspect": ["inspect", f"s3://{BUCKET}/out"],
            "dry run": ["run", "--dry-run", "--config",
                        write_config(tmp_path, "dry", f'input: "s3://{BUCKET}/lc0"', str(tmp_path / "out"))]}
    with unreachable_store(behaviour) as endpoint:
        seconds, done = shardmill_against(endpoint, *args[command])
    last = assert_failed_in_one_line_naming_the_store(args[command][0], endpoint, seconds, done)
    assert "temporary files removed" not in last  # none of them writes any


def test_the_probe_of_stores_that_do_not_answer_ends_at_its_deadline_whatever_the_number_of_buckets(monkeypatch):
    monkeypatch.setattr(filesystem, "PROBE_READ_SECONDS", 60)  # each attempt alone would outlast the deadline
    monkeypatch.setattr(filesystem, "PROBE_DEADLINE_SECONDS", 2)
    with silent_server() as address:
        for key, value in aws_settings(f"http://{address}").items():
            monkeypatch.setenv(key, value)
        started = time.monotonic()
        with pytest.raises(filesystem.StoreUnreachable,
                           match=rf"^s3://a \(endpoint http://{address}\) does not answer: no answer within 2 s$"):
            filesystem.check_stores_reachable([f"s3://{name}/x" for name in "cbaa"])
        assert time.monotonic() - started < 4


@pytest.mark.slow
def test_a_run_over_the_error_budget_keeps_its_report_in_the_bucket_and_the_old_output(kinds, s3_server):
    local, _, remote = kinds
    out = f"s3://{BUCKET}/budget"
    assert cli.main(["run", "--config", write_config(local, "budget-ok", remote["lc0"], out)]) == 0
    before = content(out)
    strict = remote["lc0"].replace("max_error_fraction: 0.5", "max_error_fraction: 0.001") + "\nseed: 5"
    assert cli.main(["run", "--config", write_config(local, "budget-strict", strict, out), "--overwrite"]) == 1
    assert content(out) == before and leftovers(out) == []
    report = sorted(name.rsplit("/", 1)[-1] for name in lifecycle._relative_tree(out) if name.startswith(".rejected/"))
    assert report == ["errors.jsonl", "manifest.json"]
