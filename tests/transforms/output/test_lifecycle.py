"""One output lifecycle: commits are atomic under crashes and signals, one run at a time, clean failures.

The subprocess tests run the real `shardmill` command, so a crash or hang of
the job can't take pytest down; every state they leave is checked with the
native reader (checksums on): exactly the old output or exactly the new one.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.native_ext import OrderOptions, OutputError, ReadOptions, ShardReader, load_manifest
from shardmill.pipelines import cli
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.common.discovery import expand_inputs
from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES
from shardmill.transforms.output import claim as claim_module
from shardmill.transforms.output import lifecycle
from shardmill.transforms.output.claim import ClaimHeldError, ClaimInfo, OutputClaim
from tests.datagen.shards import write_output
from tests.support.cli import interruptible, run_shardmill, shardmill_command

JOB = 'lc0 {{ chunk_pool {{ passes: {passes} position_count: 4 }} }}\noutput {{ num_shards: 3 }}\nmax_error_fraction: 0.5\n'


def write_config(path, directory, seed, passes=2):
    path.write_text(f'input: "{directory}"\nseed: {seed}\n' + JOB.format(passes=passes))
    return str(path)


def content(out):
    """What a reader sees in an output: the shards' checksums, after reading every row with checksums on."""
    manifest = load_manifest(str(out), verify_checksums=True)
    with ShardReader(str(out), batch_size=500, columns=["position"], read_options=ReadOptions(verify_checksums=True), order_options=OrderOptions(shuffle=False)) as reader:
        rows = sum(len(batch["position"]) for batch in reader)
    assert rows == sum(s["rows"] for s in manifest["shards"])
    return tuple(s["sha256"] for s in manifest["shards"])


def leftovers(out):
    """Files in the directory that its committed output does not name."""
    committed = lifecycle.read_committed(str(out))
    return [rel for rel in lifecycle._relative_tree(str(out)) if lifecycle._is_leftover(rel, committed, set())]


@pytest.fixture(scope="module")
def outputs(lc0_dataset, tmp_path_factory):
    """Two configs (seeds 1 and 2) and the content each gives."""
    directory, _ = lc0_dataset
    base = tmp_path_factory.mktemp("lifecycle")
    configs, contents = {}, {}
    for seed in (1, 2):
        configs[seed] = write_config(base / f"seed{seed}.textproto", directory, seed, passes=6)
        done = run_shardmill("run", "--config", configs[seed], "--output", str(base / f"ref{seed}"))
        assert done.returncode == 0, done.stderr
        contents[seed] = content(base / f"ref{seed}")
    assert contents[1] != contents[2]
    return configs, contents, base


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_exactly_the_old_or_the_new_output(outputs, tmp_path):
    configs, contents, base = outputs
    out = tmp_path / "out"
    shutil.copytree(base / "ref1", out)
    current = 1
    started = time.monotonic()
    full = run_shardmill("run", "--config", configs[2], "--output", str(out / ".." / "timing"))
    run_seconds = time.monotonic() - started
    assert full.returncode == 0, full.stderr
    rng = np.random.default_rng(2026)
    # Half the moments anywhere in a run, half near its end, where the commit happens.
    moments = np.concatenate([rng.uniform(0.1, run_seconds, 4), rng.uniform(0.75, 1.1, 4) * run_seconds])
    seen = set()
    for moment in rng.permutation(moments):
        other = 3 - current
        proc = subprocess.Popen(shardmill_command("run", "--config", configs[other], "--output", out, "--overwrite"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(moment)
        proc.kill()
        _, err = proc.communicate(timeout=60)
        now = content(out)
        assert now in (contents[current], contents[other]), f"a mixed output after SIGKILL at {moment:.2f} s"
        seen.add(proc.returncode)
        current = 1 if now == contents[1] else 2
    assert -signal.SIGKILL in seen  # most moments caught a run in flight
    done = run_shardmill("run", "--config", configs[1], "--output", str(out), "--overwrite")
    assert done.returncode == 0, done.stderr
    assert content(out) == contents[1] and leftovers(out) == []
    assert not os.path.exists(out / ".claim.json")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_run_with_one_line_removes_its_files_and_keeps_the_old_output(outputs, tmp_path, sig):
    configs, contents, base = outputs
    out = tmp_path / "out"
    shutil.copytree(base / "ref1", out)
    interrupted = 0
    for moment in (0.8, 1.6, 2.4):
        proc = subprocess.Popen(shardmill_command("run", "--config", configs[2], "--output", out, "--overwrite"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
        time.sleep(moment)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        if proc.returncode in (0, -sig):  # the run had committed already (the signal came after main returned)
            assert content(out) == contents[2] and leftovers(out) == []
            shutil.rmtree(out)
            shutil.copytree(base / "ref1", out)
            continue
        interrupted += 1
        assert proc.returncode == 3, err
        assert "Traceback" not in err
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"shardmill run: interrupted ({sig.name})") and "previous output" in last
        assert content(out) == contents[1]
        assert leftovers(out) == [] and not os.path.exists(out / ".claim.json")
    assert interrupted >= 1


# A label run whose shard writing sleeps: the signal arrives while a write thread is deep in a shard.
_STUCK_RUN = """
import sys, time
from shardmill.transforms.events import shards
table, cue = shards.EventShardFormat.table, sys.argv[2]
def stuck(self, *args, **kwargs):
    open(cue, "w").close()  # the test's cue: a write thread is in the step
    time.sleep(300)
    return table(self, *args, **kwargs)
shards.EventShardFormat.table = stuck
from shardmill.pipelines.cli import entry
sys.argv = ["shardmill", "run", "--config", sys.argv[1]]
entry()
"""


@pytest.mark.slow
def test_a_signal_ends_the_run_at_once_while_a_shard_write_is_busy(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("id,clicked\n1,1\n2,0\n")
    out = tmp_path / "out"
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\noutput {{ path: "{out}" }}\nlabel_sampling {{ label_column: "clicked" }}\n')
    cue = tmp_path / "writing"
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_RUN, str(config), str(cue)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not cue.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cue.exists(), "the run never reached its shard write"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 20, "the process outlived its run by the stuck step"
    assert proc.returncode == 3 and err.strip().splitlines()[-1].startswith("shardmill run: interrupted (SIGTERM)")
    assert not os.path.exists(out / ".claim.json")


@pytest.mark.slow
def test_a_second_run_on_the_same_output_is_refused_naming_the_first(outputs, lc0_dataset, tmp_path):
    configs, contents, base = outputs
    directory, _ = lc0_dataset
    slow = write_config(tmp_path / "slow.textproto", directory, 2, passes=40)
    out = tmp_path / "out"
    first = subprocess.Popen(shardmill_command("run", "--config", slow, "--output", out),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    # Stopped once its claim is written, not merely created: an empty claim names no holder (the second run
    # then says "contended", rightly refused but not what this test pins).
    while not (os.path.exists(out / ".claim.json") and os.path.getsize(out / ".claim.json") > 0) \
            and time.monotonic() < deadline:
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # holds the claim for as long as the second run needs
    try:
        second = run_shardmill("run", "--config", configs[1], "--output", str(out), "--overwrite")
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.returncode == 2, second.stderr
    line = second.stderr.strip().splitlines()[-1]
    assert "is in use by run" in line and f"pid {first.pid}" in line and "started" in line
    assert first.wait(timeout=300) == 0, first.stderr.read()
    content(out)
    assert leftovers(out) == []


@pytest.mark.slow
def test_the_claim_of_a_dead_process_is_broken_by_the_next_run(outputs, tmp_path):
    configs, contents, base = outputs
    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    info = ClaimInfo("crashed-run", ClaimInfo.for_this_process("x").host, int(dead.stdout), None, time.time())
    os.makedirs(out / ".staging-crashed-run" / "spill")
    (out / ".staging-crashed-run" / "spill" / "task.arrow").write_bytes(b"partial")
    (out / ".claim.json").write_bytes(info.to_bytes())
    done = run_shardmill("run", "--config", configs[1], "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert "broke the claim of a crashed run" in done.stderr
    assert "found an unfinished run crashed-run" in done.stderr
    assert content(out) == contents[1] and leftovers(out) == []


def other_host_claim(out, age_seconds):
    os.makedirs(out, exist_ok=True)
    info = ClaimInfo("elsewhere", "another-host", 4242, None, time.time() - age_seconds)
    (out / ".claim.json").write_bytes(info.to_bytes())
    os.utime(out / ".claim.json", (time.time() - age_seconds,) * 2)


@pytest.mark.slow
def test_a_stale_claim_of_another_host_is_broken_only_when_asked(outputs, tmp_path):
    configs, contents, base = outputs
    out = tmp_path / "out"
    other_host_claim(out, age_seconds=3600)
    refused = run_shardmill("run", "--config", configs[1], "--output", str(out))
    assert refused.returncode == 2
    assert "another-host" in refused.stderr and "--break-claim" in refused.stderr
    done = run_shardmill("run", "--config", configs[1], "--output", str(out), "--break-claim")
    assert done.returncode == 0, done.stderr
    assert content(out) == contents[1]


def test_a_fresh_claim_of_another_host_is_not_broken_even_when_asked(tmp_path):
    other_host_claim(tmp_path, age_seconds=1)
    claim = OutputClaim(str(tmp_path), "mine")
    with pytest.raises(ClaimHeldError, match="in use by run elsewhere .host another-host, pid 4242"):
        claim.acquire(break_stale=True)


def test_a_claim_in_the_older_format_is_respected_and_broken_when_its_process_is_gone(tmp_path):
    info = ClaimInfo("older-version", "another-host", 4242, None, time.time())
    (tmp_path / "_claim.json").write_bytes(info.to_bytes())
    with pytest.raises(ClaimHeldError, match="in use by run older-version"):
        OutputClaim(str(tmp_path), "mine").acquire(break_stale=True)
    assert os.listdir(tmp_path) == ["_claim.json"]  # ours is withdrawn
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = ClaimInfo("older-version", info.for_this_process("x").host, int(dead.stdout), None, time.time())
    (tmp_path / "_claim.json").write_bytes(gone.to_bytes())
    claim = OutputClaim(str(tmp_path), "mine")
    assert any("its process is gone" in note for note in claim.acquire())
    assert os.listdir(tmp_path) == [".claim.json"]
    claim.release()


@pytest.fixture
def listing_protocol(monkeypatch):
    """Claims on this local disk taken as on an object store: through the listing protocol."""
    monkeypatch.setattr(claim_module, "is_local", lambda path: False)


@pytest.mark.parametrize("local", [True, False], ids=["exclusive-create", "listing-protocol"])
def test_claims_exclude_each_other_and_release_idempotently(tmp_path, local, monkeypatch):
    if not local:
        monkeypatch.setattr(claim_module, "is_local", lambda path: False)
    first = OutputClaim(str(tmp_path), "run-a")
    second = OutputClaim(str(tmp_path), "run-b")
    first.acquire()
    with pytest.raises(ClaimHeldError, match="in use by run run-a"):
        second.acquire()
    first.check_held()
    first.release()
    first.release()
    second.acquire()
    second.start_heartbeat()
    second.beat()
    second.release()
    assert os.listdir(tmp_path / ".claims" if not local else tmp_path) == []


def test_listing_protocol_orders_claims_by_the_stores_timestamp(tmp_path, listing_protocol):
    late = OutputClaim(str(tmp_path), "b-late")
    early = OutputClaim(str(tmp_path), "z-early")
    early.acquire()
    # A claim written after another loses whatever its name, and withdraws.
    with pytest.raises(ClaimHeldError, match="z-early"):
        late.acquire()
    assert sorted(os.listdir(tmp_path / ".claims")) == ["z-early.alive", "z-early.json"]


def test_listing_protocol_breaks_a_dead_processes_claim(tmp_path, listing_protocol):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    os.makedirs(tmp_path / ".claims")
    info = ClaimInfo("gone", ClaimInfo.for_this_process("x").host, int(dead.stdout), None, time.time())
    (tmp_path / ".claims" / "gone.json").write_bytes(info.to_bytes())
    notes = OutputClaim(str(tmp_path), "next").acquire()
    assert any("broke the claim" in n for n in notes)
    assert sorted(os.listdir(tmp_path / ".claims")) == ["next.alive", "next.json"]


class Crash(BaseException):
    """A process death at a chosen filesystem mutation (BaseException: nothing on the way catches it)."""


@pytest.fixture(scope="module")
def staged_overwrite(lc0_dataset, tmp_path_factory):
    """An output holding seed 1, and a finished but uncommitted run of seed 2 staged in it."""
    directory, _ = lc0_dataset
    out = tmp_path_factory.mktemp("staged") / "out"
    config = validate(parse_config(f'input: "{directory}"\nseed: 1\nmax_error_fraction: 0.5\n'
                                   'lc0 { chunk_pool { position_count: 3 } }\noutput { num_shards: 4 overwrite: true }'))
    inputs = expand_inputs(list(config.input), LC0_INPUT_SUFFIXES)
    run_job(config, inputs, str(out), PipelineOptions([]))
    old = content(out)
    config.seed = 2
    staged = {}
    real_commit = lifecycle.commit

    def hold(paths, previous, keep_generations=1):
        staged["paths"] = paths
        raise Crash()

    lifecycle.commit, real_discard = hold, lifecycle.discard
    lifecycle.discard = lambda paths: None
    try:
        with pytest.raises(Crash):
            run_job(config, inputs, str(out), PipelineOptions([]))
    finally:
        lifecycle.commit, lifecycle.discard = real_commit, real_discard
    return out, staged["paths"], old


def count_mutations(monkeypatch, limit):
    """Makes the limit-th filesystem mutation (rename, remove, rmtree) crash; returns the counter."""
    count = [0]

    def counted(real):
        def mutate(*args, **kwargs):
            count[0] += 1
            if count[0] == limit:
                raise Crash()
            return real(*args, **kwargs)
        return mutate

    for module, name in ((os, "rename"), (os, "remove"), (shutil, "rmtree")):
        monkeypatch.setattr(module, name, counted(getattr(module, name)))
    return count


@pytest.mark.slow
def test_a_crash_at_every_step_of_the_commit_leaves_the_old_or_the_new_output(staged_overwrite, tmp_path,
                                                                               monkeypatch):
    source, paths, old = staged_overwrite
    with monkeypatch.context() as m:
        out = tmp_path / "full"
        shutil.copytree(source, out)
        steps = count_mutations(m, limit=0)
        lifecycle.commit(lifecycle.RunPaths(str(out), paths.run_id, paths.generation),
                         lifecycle.read_committed(str(out)))
    new = content(out)
    assert new != old and leftovers(out) == []
    outcomes = set()
    for limit in range(1, steps[0] + 1):
        out = tmp_path / f"crash{limit}"
        shutil.copytree(source, out)
        run_paths = lifecycle.RunPaths(str(out), paths.run_id, paths.generation)
        with monkeypatch.context() as m:
            count_mutations(m, limit)
            with pytest.raises(Crash):
                lifecycle.commit(run_paths, lifecycle.read_committed(str(out)))
        seen = content(out)
        assert seen in (old, new), f"mixed output after a crash at mutation {limit}"
        outcomes.add(seen)
        left = leftovers(out)
        notes = lifecycle.clean_leftovers(str(out), lifecycle.read_committed(str(out)))
        assert content(out) == seen and leftovers(out) == []
        assert bool(notes) == bool(left)  # the next run says what it removed
    assert outcomes == {old, new}


@pytest.mark.slow
def test_an_output_that_is_a_file_is_refused_before_any_work(outputs, tmp_path):
    configs, _, _ = outputs
    (tmp_path / "file").write_text("x")
    for target, message in ((tmp_path / "file", "is a file, not a directory"),
                            (tmp_path / "file" / "sub", "which is a file, not a directory")):
        done = run_shardmill("run", "--config", configs[1], "--output", str(target))
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_an_output_inside_an_input_is_refused(outputs, lc0_dataset, tmp_path):
    configs, _, _ = outputs
    directory, _ = lc0_dataset
    done = run_shardmill("run", "--config", configs[1], "--output", os.path.join(directory, "out"))
    assert done.returncode == 2 and "inside input" in done.stderr
    assert not os.path.exists(os.path.join(directory, "out"))


def mount_tmpfs(path, options):
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def mount(name, options):
        path = tmp_path / name
        mount_tmpfs(path, options)
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.slow
def test_a_read_only_output_is_refused_before_any_work(outputs, tmpfs):
    configs, _, _ = outputs
    read_only = tmpfs("ro", "ro,size=1m")
    done = run_shardmill("run", "--config", configs[1], "--output", str(read_only / "out"))
    assert done.returncode == 2, done.stderr
    assert "cannot write there (Read-only file system)" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_full_disk_is_found_before_any_work(outputs, tmpfs):
    configs, _, _ = outputs
    full = tmpfs("full", "size=64k")
    with open(full / "filler", "wb") as f:
        try:
            f.write(b"\0" * (1 << 20))
        except OSError:
            pass
    done = run_shardmill("run", "--config", configs[1], "--output", str(full / "out"))
    assert done.returncode == 2, done.stderr
    assert "No space left on device" in done.stderr and "Traceback" not in done.stderr
    assert not os.path.exists(full / "out")


@pytest.mark.slow
def test_a_disk_filling_up_during_the_run_fails_cleanly_and_keeps_the_old_output(outputs, tmpfs, lc0_dataset):
    configs, contents, base = outputs
    directory, _ = lc0_dataset
    disk = tmpfs("small", "size=600k")
    out = disk / "out"
    shutil.copytree(base / "ref1", out)
    used = sum(os.path.getsize(os.path.join(r, n)) for r, _, names in os.walk(out) for n in names)
    assert used < 500_000, "the old output must fit with room for the new run's first bytes"
    big = write_config(disk.parent / "big.textproto", directory, 2, passes=40)
    done = run_shardmill("run", "--config", big, "--output", str(out), "--overwrite")
    assert done.returncode == 3, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "failed:" in last and "No space left on device" in last and "Traceback" not in done.stderr
    assert content(out) == contents[1] and leftovers(out) == []


@pytest.mark.slow
def test_a_run_over_the_error_budget_leaves_the_previous_output_intact(outputs, lc0_dataset, tmp_path):
    configs, contents, base = outputs
    directory, _ = lc0_dataset
    out = tmp_path / "out"
    shutil.copytree(base / "ref1", out)
    strict = tmp_path / "strict.textproto"
    strict.write_text(f'input: "{directory}"\nseed: 2\nmax_error_fraction: 0.01\n')
    done = run_shardmill("run", "--config", str(strict), "--output", str(out), "--overwrite")
    assert done.returncode == 1
    assert content(out) == contents[1] and leftovers(out) == []
    report = json.loads((out / ".rejected" / "manifest.json").read_text())
    errors = (out / ".rejected" / "errors.jsonl").read_text().splitlines()
    assert report["errors"]["count"] == len(errors) > 0
    # The next committed run removes the stale report.
    assert run_shardmill("run", "--config", configs[2], "--output", str(out), "--overwrite").returncode == 0
    assert not os.path.exists(out / ".rejected") and content(out) == contents[2]


@pytest.mark.slow
def test_pandas_pyarrow_polars_and_duckdb_read_the_directory_during_a_run(outputs, tmp_path):
    pd = pytest.importorskip("pandas")
    duckdb = pytest.importorskip("duckdb")
    polars = pytest.importorskip("polars")
    import pyarrow.dataset as ds

    configs, contents, base = outputs
    out = tmp_path / "out"
    shutil.copytree(base / "ref1", out)
    manifest = load_manifest(str(out))
    rows = sum(s["rows"] for s in manifest["shards"])
    # A run in flight: its claim, staged shards and spills sit beside the committed output.
    (out / ".claim.json").write_text("{}")
    os.makedirs(out / ".staging-run" / "spill")
    pq.write_table(pa.table({"x": [1]}), out / ".staging-run" / "g000002-shard-00000-of-00001.parquet")
    (out / ".staging-run" / "spill" / "task.arrow").write_bytes(b"spill")
    positions = sorted(pd.read_parquet(out, columns=["position"])["position"])
    assert len(positions) == rows
    assert ds.dataset(str(out)).count_rows() == rows
    assert pq.read_table(str(out)).num_rows == rows
    assert polars.read_parquet(f"{out}/*.parquet").height == rows
    assert duckdb.sql(f"select count(*) from read_parquet('{out}/*.parquet')").fetchall() == [(rows,)]
    expected = sorted(p for s in manifest["shards"] for p in pq.read_table(out / s["path"])["position"].to_pylist())
    assert positions == expected


@pytest.mark.slow
def test_dry_run_builds_every_job_kind_and_checks_its_inputs(lc0_dataset, tmp_path, capsys, monkeypatch):
    from tests.datagen.megatron import write_indexed_dataset

    directory, _ = lc0_dataset
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    events = tmp_path / "events"
    events.mkdir()
    (events / "day.csv").write_text("id,clicked\n1,0\n2,1\n")
    write_indexed_dataset(str(tmp_path / "corpus"), [np.arange(30, dtype=np.uint16)] * 5, np.uint16)
    configs = {
        "lc0": f'input: "{directory}"',
        "labels": f'input: "{events}"\nlabel_sampling {{ label_column: "clicked" }}',
        "tokens": f'token_dataset {{ path_prefix: "{tmp_path / "corpus"}" seq_length: 8 }}',
    }
    for kind, text in configs.items():
        config = tmp_path / f"{kind}.textproto"
        config.write_text(text + f'\noutput {{ path: "{tmp_path / kind}" }}\n')
        assert cli.main(["run", "--config", str(config), "--dry-run"]) == 0, capsys.readouterr().err
        assert f"dry run: {kind} job" in capsys.readouterr().out
        assert not os.path.exists(tmp_path / kind)  # nothing written
        assert os.listdir(temp) == []  # nor left in the temporary directory (Beam makes one per pipeline)
    missing = tmp_path / "missing.textproto"
    missing.write_text(f'token_dataset {{ path_prefix: "{tmp_path / "nope"}" seq_length: 8 }}\n'
                       f'output {{ path: "{tmp_path / "o"}" }}')
    assert cli.main(["run", "--config", str(missing), "--dry-run"]) == 2
    assert "nope.bin: no such file" in capsys.readouterr().err
    no_csv = tmp_path / "nocsv.textproto"
    no_csv.write_text(f'input: "{directory}"\nlabel_sampling {{ label_column: "c" }}\noutput {{ path: "{tmp_path}/o" }}')
    assert cli.main(["run", "--config", str(no_csv), "--dry-run"]) == 2
    assert "matches no .parquet, .csv" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("version, names", [
    (1, ["manifest.json", "shard-00000-of-00002.parquet", "shard-00001-of-00002.parquet"]),
    (2, ["_manifest.json", "g000001-shard-00000-of-00002.parquet", "g000001-shard-00001-of-00002.parquet"]),
])
def test_the_reader_reads_older_formats_and_an_overwrite_replaces_them(outputs, tmp_path, version, names):
    configs, contents, _ = outputs
    out = tmp_path / "old"
    manifest = write_output(str(out), [30, 20], row_group_rows=8, format_version=version)
    if version == 2:
        os.makedirs(out / "_g000001")
        (out / "_g000001" / "errors.jsonl").write_text("")
        manifest["errors"] = {"path": "_g000001/errors.jsonl", "count": 0}
        (out / "_manifest.json").write_text(json.dumps(manifest))
        names = ["_g000001"] + names
    assert sorted(os.listdir(out)) == names
    with ShardReader(str(out), batch_size=64, columns=["id"], order_options=OrderOptions(shuffle=False)) as reader:
        assert sorted(int(i) for b in reader for i in b["id"]) == list(range(50))
    assert manifest["format_version"] == version
    refused = run_shardmill("run", "--config", configs[1], "--output", str(out))
    assert refused.returncode == 2 and "--overwrite" in refused.stderr
    done = run_shardmill("run", "--config", configs[1], "--output", str(out), "--overwrite")
    assert done.returncode == 0, done.stderr
    assert content(out) == contents[1] and leftovers(out) == []
    assert not set(names) & set(os.listdir(out)) and load_manifest(str(out))["format_version"] == 3


def test_a_commit_cut_short_after_the_new_format_manifest_shows_the_new_output(tmp_path):
    out = tmp_path / "o"
    write_output(str(out), [30, 20], row_group_rows=8, format_version=2)
    old = sorted(os.listdir(out))
    new = write_output(str(tmp_path / "new"), [10], row_group_rows=8)
    new["shards"][0]["path"] = "g000002-shard-00000-of-00001.parquet"
    new["generation"] = 2
    shutil.copy(tmp_path / "new" / "g000001-shard-00000-of-00001.parquet", out / new["shards"][0]["path"])
    (out / ".manifest.json").write_text(json.dumps(new))  # the commit point; the old files are still there
    assert load_manifest(str(out))["generation"] == 2
    with ShardReader(str(out), batch_size=64, columns=["id"]) as reader:
        assert sorted(int(i) for b in reader for i in b["id"]) == list(range(10))
    committed = lifecycle.read_committed(str(out))
    assert committed.manifest_name == ".manifest.json" and sorted(leftovers(out)) == old
    lifecycle.clean_leftovers(str(out), committed)
    assert sorted(os.listdir(out)) == [".manifest.json", "g000002-shard-00000-of-00001.parquet"]


@pytest.mark.slow
def test_the_manifest_has_the_same_fields_for_every_job_kind(outputs, tmp_path):
    _, _, base = outputs
    manifest = load_manifest(str(base / "ref1"))
    for field in ("format_version", "shardmill_version", "job_kind", "generation", "record_format", "record",
                  "schema", "seed", "config", "num_shards", "shards", "errors", "stats"):
        assert field in manifest
    assert [f["name"] for f in manifest["schema"]] == ["frame", "source", "chunk", "use_count", "position"]
    assert set(manifest["shards"][0]) == {"path", "rows", "row_groups", "bytes", "sha256"}


def test_a_missing_manifest_is_refused_by_the_reader(tmp_path):
    with pytest.raises(OutputError, match="no .manifest.json"):
        load_manifest(str(tmp_path))


def test_listing_protocol_claims_stamped_in_one_second_of_the_store_do_not_both_win(tmp_path, listing_protocol,
                                                                                    monkeypatch):
    # S3 stamps objects to the second. A claim that listed before another became visible saw itself alone and won;
    # the other, written in the same second, saw both, broke the tie by name and won too.
    real_match = claim_module.FileSystems.match

    def match_stamped_to_the_second(patterns):
        results = real_match(patterns)
        for result in results:
            for meta in result.metadata_list:
                meta.last_updated_in_seconds = float(int(meta.last_updated_in_seconds))
        return results

    monkeypatch.setattr(claim_module.FileSystems, "match", match_stamped_to_the_second)
    while time.time() % 1 > 0.3:  # both claims written early in one second
        time.sleep(0.05)
    first = OutputClaim(str(tmp_path), "z-first")
    first.acquire()
    with pytest.raises(ClaimHeldError, match="z-first"):
        OutputClaim(str(tmp_path), "a-second").acquire()  # its name sorts first: a tie would be its win
    first.release()
