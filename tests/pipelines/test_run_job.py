"""`shardmill run` end to end: correct records, balanced accounting, identical bytes everywhere."""

import hashlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.native_ext import load_manifest
from shardmill.pipelines import cli
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.run_job import OutputExistsError, cancel_unfinished, one_line, run_job
from shardmill.transforms.common.discovery import expand_inputs
from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES
from tests.datagen.lc0 import make_game_records

MULTI_PROCESSING = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def job_config(directory, extra=""):
    # The dataset holds every kind of bad chunk on purpose: a quarter of what is met.
    return validate(parse_config(f'input: "{directory}"\nseed: 5\nmax_error_fraction: 0.5\n{extra}'))


def run(config, out_dir, beam_args=(), patterns=None):
    patterns = patterns or expand_inputs(list(config.input), LC0_INPUT_SUFFIXES)
    return run_job(config, patterns, str(out_dir), PipelineOptions(list(beam_args))).manifest


def file_digests(out_dir):
    """Every file of an output directory by relative path (the manifest without its timings)."""
    digests = {}
    for root, _, names in os.walk(out_dir):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                data = f.read()
            if name in (".manifest.json", "manifest.json"):  # the output's and its generation's copy: timings
                # differ between runs, nothing else may
                manifest = json.loads(data)
                del manifest["stats"]["timings"]
                data = json.dumps(manifest, sort_keys=True).encode()
            digests[os.path.relpath(path, out_dir)] = hashlib.sha256(data).hexdigest()
    return digests


def read_errors(out_dir, manifest):
    with open(os.path.join(out_dir, manifest["errors"]["path"])) as f:
        return [json.loads(line) for line in f]


def read_rows(out_dir, manifest):
    tables = [pq.read_table(os.path.join(out_dir, s["path"])) for s in manifest["shards"]]
    return [t.to_pylist() for t in tables]


SAMPLED = "lc0 { chunk_pool { passes: 3 position_count: 5 hanse_sampling_threshold: 100 } }\noutput { num_shards: 3 }"


@pytest.fixture(scope="module")
def sampled_run(lc0_dataset, tmp_path_factory):
    directory, truth = lc0_dataset
    out = tmp_path_factory.mktemp("sampled")
    manifest = run(job_config(directory, SAMPLED), out)
    return out, manifest, truth


@pytest.mark.slow
def test_every_output_frame_is_the_planned_record_of_its_chunk(sampled_run):
    out, manifest, truth = sampled_run
    games = {(c.sort_key, c.chunk): c for c in truth.good}
    seen = set()
    for rows in read_rows(out, manifest):
        for row in rows:
            game = games[(row["source"], row["chunk"])]
            records = make_game_records(game.game_seed, game.num_records)
            assert row["frame"] == records[row["position"]].tobytes()
            seen.add((row["source"], row["chunk"], row["use_count"], row["position"]))
    assert len(seen) == manifest["stats"]["accounting"]["records_written"]  # no record twice


@pytest.mark.slow
def test_records_written_are_uses_times_position_count_and_accounting_balances(sampled_run):
    out, manifest, truth = sampled_run
    acc = manifest["stats"]["accounting"]
    assert acc["balanced"]
    assert acc["records_written"] == acc["uses_written"] * 5 == sum(s["rows"] for s in manifest["shards"])
    assert acc["chunks_indexed"] == len(truth.expected_counts("scan"))
    assert manifest["num_shards"] == 3 and len(manifest["shards"]) == 3
    for shard in manifest["shards"]:
        path = os.path.join(out, shard["path"])
        assert os.path.getsize(path) == shard["bytes"]
        with open(path, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == shard["sha256"]
        assert sum(shard["row_groups"]) == shard["rows"]


def test_every_bad_chunk_is_in_errors_jsonl_with_its_reason(sampled_run):
    out, manifest, truth = sampled_run
    errors = {(os.path.basename(d["path"]), d["chunk"], d["reason"]) for d in read_errors(out, manifest)}
    expected = truth.expected_errors("scan")
    v5 = [c for c in truth.good if c.version == 5]
    expected |= {(c.sort_key, c.chunk, "wrong_version") for c in v5}  # the window is V6
    # The CRC-corrupt chunk passes SCAN indexing; if the plan used it, loading rejects it.
    crc = [b for b in truth.bad if b.needs_inflation]
    crc_errors = {(b.sort_key, b.chunk, "corrupt") for b in crc}
    assert expected <= errors and errors - expected <= crc_errors
    assert sum(manifest["stats"]["accounting"]["errors_by_reason"].values()) == len(errors)


@pytest.mark.slow
def test_corrupt_chunk_found_at_load_is_dead_lettered_and_counted(lc0_dataset, tmp_path):
    directory, truth = lc0_dataset
    manifest = run(job_config(directory, "lc0 { chunk_pool { position_count: 2 } }\noutput { num_shards: 2 }"), tmp_path)
    acc = manifest["stats"]["accounting"]
    assert acc["chunks_failed_at_load"] == 1 and acc["errors_by_stage"]["load"] == 1
    assert acc["balanced"]
    assert acc["records_written"] == 2 * acc["uses_written"]


@pytest.mark.slow
def test_trailer_miscount_is_caught_when_the_chunk_is_loaded(lc0_dataset, tmp_path):
    directory, truth = lc0_dataset
    config = job_config(directory, "lc0 { index { count_method: TRAILER } }\noutput { num_shards: 1 }")
    manifest = run(config, tmp_path)
    mismatches = [d for d in read_errors(tmp_path, manifest) if d["reason"] == "count_mismatch"]
    aligned_multi_member = [c for c in truth.good if c.trailer_records != c.num_records]
    assert len(mismatches) == len(aligned_multi_member) > 0
    assert manifest["stats"]["accounting"]["balanced"]


@pytest.mark.slow
def test_all_positions_without_sampling_writes_every_good_record_once(lc0_dataset, tmp_path):
    directory, truth = lc0_dataset
    manifest = run(job_config(directory, "lc0 { index { lc0_version: 6 count_method: DECOMPRESS } }"), tmp_path)
    good_v6 = sum(c.num_records for c in truth.good if c.version == 6)
    assert manifest["stats"]["accounting"]["records_written"] == good_v6
    rows = [r for rows in read_rows(tmp_path, manifest) for r in rows]
    assert len({(r["source"], r["chunk"], r["position"]) for r in rows}) == good_v6


@pytest.mark.slow
def test_chunk_pool_window_uses_only_the_newest_chunks(lc0_dataset, tmp_path):
    directory, truth = lc0_dataset
    config = job_config(directory, "lc0 { index { lc0_version: 6 } chunk_pool { chunk_pool_size: 5 position_count: 1 } }")
    manifest = run(config, tmp_path)
    acc = manifest["stats"]["accounting"]
    assert acc["chunks_used"] + acc["chunks_failed_at_load"] == 5
    newest = sorted((c.sort_key, c.chunk) for c in truth.good if c.version == 6)[-5:]
    used = {(r["source"], r["chunk"]) for rows in read_rows(tmp_path, manifest) for r in rows}
    assert used <= set(newest)


@pytest.mark.slow
def test_same_seed_gives_identical_bytes_in_process_and_with_two_worker_processes(
    lc0_dataset, sampled_run, tmp_path
):
    directory, _ = lc0_dataset
    out, _, _ = sampled_run
    run(job_config(directory, SAMPLED), tmp_path, MULTI_PROCESSING)
    assert file_digests(tmp_path) == file_digests(out)


@pytest.mark.slow
def test_input_order_does_not_change_the_output(lc0_dataset, sampled_run, tmp_path):
    directory, _ = lc0_dataset
    out, _, _ = sampled_run
    files = sorted(os.path.join(directory, n) for n in os.listdir(directory))
    run(job_config(directory, SAMPLED), tmp_path, patterns=list(reversed(files)))
    assert file_digests(tmp_path) == file_digests(out)


@pytest.mark.slow
def test_another_seed_gives_other_shards(lc0_dataset, sampled_run, tmp_path):
    directory, _ = lc0_dataset
    out, _, _ = sampled_run
    config = job_config(directory, SAMPLED)
    config.seed = 6
    run(config, tmp_path)
    name = "g000001-shard-00000-of-00003.parquet"
    assert file_digests(tmp_path)[name] != file_digests(out)[name]


@pytest.mark.slow
def test_existing_output_is_refused_unless_overwrite(lc0_dataset, sampled_run, tmp_path):
    directory, _ = lc0_dataset
    out, _, _ = sampled_run
    with pytest.raises(OutputExistsError, match="--overwrite"):
        run(job_config(directory, SAMPLED), out)
    config = job_config(directory, "output { num_shards: 1 overwrite: true }\nlc0 { chunk_pool { position_count: 1 } }")
    target = tmp_path / "again"
    run(job_config(directory, "output { num_shards: 2 }\nlc0 { chunk_pool { position_count: 1 } }"), target)
    manifest = run(config, target)
    assert sorted(n for n in os.listdir(target) if n.endswith(".parquet")) == ["g000002-shard-00000-of-00001.parquet"]
    assert manifest["num_shards"] == 1 and manifest["generation"] == 2
    assert sorted(os.listdir(target)) == [".g000002", ".manifest.json", "g000002-shard-00000-of-00001.parquet"]


@pytest.mark.slow
def test_row_groups_follow_row_group_bytes(lc0_dataset, tmp_path):
    directory, _ = lc0_dataset
    config = job_config(directory, "lc0 { index { lc0_version: 6 } }\noutput { num_shards: 2 row_group_bytes: 835600 }")
    manifest = run(config, tmp_path)
    for shard in manifest["shards"]:
        assert all(n == 100 for n in shard["row_groups"][:-1]) and shard["row_groups"][-1] <= 100


@pytest.mark.slow
def test_cli_run_prints_a_summary_and_inspect_reads_it(lc0_dataset, tmp_path, capsys):
    directory, _ = lc0_dataset
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{directory}"\n{SAMPLED}\nmax_error_fraction: 0.5\n')
    out = tmp_path / "out"
    assert cli.main(["run", "--config", str(config), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "records out" in printed and "accounting balances" in printed
    assert cli.main(["run", "--config", str(config), "--output", str(out)]) == 2  # exists
    assert "--overwrite" in capsys.readouterr().err
    png = tmp_path / "charts.png"
    assert cli.main(["inspect", str(out), "--plot", str(png)]) == 0
    assert "records in" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_run_over_the_error_budget_exits_1_commits_nothing_and_keeps_its_report(lc0_dataset, tmp_path, capsys):
    directory, _ = lc0_dataset
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{directory}"\nmax_error_fraction: 0.01\nlc0 {{ chunk_pool {{ position_count: 1 }} }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "max_error_fraction" in err and ".rejected" in err
    assert sorted(os.listdir(tmp_path / "o")) == [".rejected"]
    assert sorted(os.listdir(tmp_path / "o" / ".rejected")) == ["errors.jsonl", "manifest.json"]


def test_inspect_refuses_a_directory_without_manifest(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path)]) == 2
    assert "no .manifest.json" in capsys.readouterr().err


def one_position_job(lc0_dataset, tmp_path):
    """A config taking one position per game of the dataset, and the output it names."""
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{lc0_dataset[0]}"\nmax_error_fraction: 0.5\nlc0 {{ chunk_pool {{ position_count: 1 }} }}\n')
    return config, tmp_path / "out"


@pytest.mark.slow
def test_a_failure_after_the_commit_point_says_the_generation_was_committed(lc0_dataset, tmp_path, capsys,
                                                                              monkeypatch):
    from shardmill.transforms.output import claim as claim_module
    from shardmill.core.output_contract import MANIFEST_NAME

    config, out = one_position_job(lc0_dataset, tmp_path)
    released = claim_module.OutputClaim.release

    def release_fails(self):
        released(self)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(claim_module.OutputClaim, "release", release_fails)
    assert cli.main(["run", "--config", str(config), "--output", str(out)]) == 4
    captured = capsys.readouterr()
    assert f"generation 1 was committed to {out}; after the commit point: OSError" in captured.err
    assert "records out" in captured.out  # the summary, rendered before the commit
    assert (out / MANIFEST_NAME).exists() and load_manifest(str(out))["generation"] == 1


@pytest.mark.slow
def test_a_commit_that_fails_removing_the_previous_files_shows_the_summary_and_exits_4(lc0_dataset, tmp_path,
                                                                                        capsys, monkeypatch):
    from shardmill.transforms.output import lifecycle

    config, out = one_position_job(lc0_dataset, tmp_path)
    assert cli.main(["-q", "run", "--config", str(config), "--output", str(out)]) == 0
    capsys.readouterr()
    deleted = lifecycle._delete
    calls = []

    def first_delete_fails(base, names):
        calls.append(names)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return deleted(base, names)

    monkeypatch.setattr(lifecycle, "_delete", first_delete_fails)
    assert cli.main(["run", "--config", str(config), "--output", str(out), "--overwrite"]) == 4
    captured = capsys.readouterr()
    assert f"generation 2 was committed to {out}; after the commit point: OSError" in captured.err
    assert "records out" in captured.out  # the summary, rendered before the commit
    assert load_manifest(str(out))["generation"] == 2


@pytest.mark.slow
def test_a_summary_that_cannot_be_rendered_fails_the_run_before_the_commit(lc0_dataset, tmp_path, capsys,
                                                                           monkeypatch):
    from shardmill.transforms.lc0 import report

    config, out = one_position_job(lc0_dataset, tmp_path)
    monkeypatch.setattr(report, "render_summary", lambda manifest: manifest["no such field"])
    assert cli.main(["run", "--config", str(config), "--output", str(out)]) == 3
    assert "KeyError" in capsys.readouterr().err
    assert not os.path.exists(out / ".manifest.json") and [p for p in os.listdir(out) if not p.startswith(".")] == []


def test_config_strings_reach_into_sections_repeated_fields_and_maps():
    """The reachability probe's list: every string the config sets, a map's keys and values too (a map field
    crashed the walk, failing every label run that declared column_types)."""
    from shardmill.pipelines.config import parse_config
    from shardmill.pipelines.run_job import config_strings

    config = parse_config('input: "s3://logs/a" input: "b" output { path: "s3://out/x" } label_sampling { '
                          'label_column: "clicked" column_types { key: "id" value: "int64" } }')
    assert set(config_strings(config)) >= {"s3://logs/a", "b", "s3://out/x", "clicked", "id", "int64"}


# What PortableRunner raised for a run whose output is on the launcher's disk (captured from the shared-nothing
# cluster, `shardmill run -v`): the job's traceback, relaying the worker's as "RuntimeError: Traceback ...".
PORTABLE_LOCAL_OUTPUT_ERROR = (Path(__file__).parent / "relayed_errors" / "portable_runner_local_output.txt").read_text()


def test_one_line_of_a_portable_runner_failure_is_the_workers_innermost_error():
    line = one_line(RuntimeError(PORTABLE_LOCAL_OUTPUT_ERROR))
    assert line.startswith("RunCancelled: run 20261128T064127Z-6acff412"), line
    assert "Traceback" not in line and "\n" not in line


def test_one_line_finds_the_innermost_error_in_a_relayed_traceback_joined_by_semicolons():
    joined = "; ".join(line.strip() for line in PORTABLE_LOCAL_OUTPUT_ERROR.splitlines() if line.strip())
    assert one_line(RuntimeError(joined)).startswith("RunCancelled: run 20261128T064127Z-6acff412 was cancelled")
    relayed = ("Pipeline job-1 failed in state FAILED: Error running pipeline.; RuntimeError: Traceback (most recent "
               "call last):; File \"x.py\", line 3, in f; raise OSError(5, 'x'); OSError: [Errno 5] Input/output "
               "error: 's3://b/out/.staging-1/a.parquet' [while running 'Output/Write']")
    assert one_line(RuntimeError(relayed)) == ("OSError: [Errno 5] Input/output error: 's3://b/out/.staging-1/a.parquet' "
                                               "[while running 'Output/Write']")


def test_one_line_keeps_a_plain_errors_message_whole():
    assert one_line(ValueError("bad field; see the docs")) == "ValueError: bad field; see the docs"
    assert one_line(RuntimeError("ValueError: x; y")) == "ValueError: x; y"


class _RunnerResult:
    """A runner's PipelineResult as Dataflow's: state and cancel(), no job-service stub."""

    def __init__(self, state: str, cancel_error: Exception | None = None):
        self.state, self.cancel_error, self.cancelled = state, cancel_error, 0

    def cancel(self):
        self.cancelled += 1
        if self.cancel_error:
            raise self.cancel_error
        self.state = "CANCELLED"


def test_an_unfinished_job_is_cancelled_and_a_finished_one_left_alone():
    running, done = _RunnerResult("RUNNING"), _RunnerResult("FAILED")
    cancel_unfinished(running)
    cancel_unfinished(done)
    assert (running.cancelled, running.state, done.cancelled) == (1, "CANCELLED", 0)


def test_a_runner_that_cannot_cancel_is_logged_and_the_run_ends_as_it_would(caplog):
    result = _RunnerResult("RUNNING", RuntimeError("HttpForbiddenError: not allowed to cancel"))
    cancel_unfinished(result)
    assert "could not cancel the runner's job: HttpForbiddenError: not allowed to cancel" in caplog.text
