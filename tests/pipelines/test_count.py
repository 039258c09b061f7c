"""`shardmill count` (stages 1-2 on Beam): the same exact index on every local execution mode, and the CLI."""

import json
import os

import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.pipelines import cli
from shardmill.transforms.common.discovery import InputError, expand_inputs
from shardmill.pipelines.commands.count import run_count
from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES

MODES = {
    "in_process": [],
    "multi_processing_2": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}


def _counts(index_path):
    table = pq.read_table(index_path)
    return {(r["sort_key"], r["chunk"]): r["num_records"] for r in table.to_pylist()}, table


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_count_pipeline_matches_truth_on_each_execution_mode(lc0_dataset, tmp_path, mode):
    directory, truth = lc0_dataset
    result = run_count(
        expand_inputs([directory], LC0_INPUT_SUFFIXES), "scan", 0, PipelineOptions(MODES[mode]), str(tmp_path / "index.parquet")
    )
    counts, table = _counts(result.index_path)
    assert counts == truth.expected_counts("scan")
    # The index is written in chunk-identity order whatever the arrival order.
    keys = list(zip(table["sort_key"].to_pylist(), table["chunk"].to_pylist()))
    assert keys == sorted(keys)
    errors = {(os.path.basename(d["path"]), d["chunk"], d["reason"]) for d in result.dead_letters}
    assert errors == truth.expected_errors("scan")
    s = result.summary
    assert s.sources == len(truth.sources)
    assert s.chunks == len(counts) and s.records == sum(counts.values())
    assert s.error_count == len(truth.expected_errors("scan"))
    assert s.skipped_members == truth.skipped_members
    assert sum(s.histogram) == s.chunks


@pytest.mark.slow
def test_overlapping_patterns_index_each_file_once(lc0_dataset, tmp_path):
    directory, truth = lc0_dataset
    patterns = [f"{directory}/*.tar", f"{directory}/training-run1-*", f"{directory}/*.gz"]
    result = run_count(patterns, "trailer", 0, PipelineOptions([]), str(tmp_path / "i.parquet"))
    assert result.summary.sources == len(truth.sources)
    assert _counts(result.index_path)[0] == truth.expected_counts("trailer")


@pytest.mark.slow
def test_cli_count_prints_summary_and_lists_every_bad_chunk(lc0_dataset, tmp_path, capsys):
    directory, truth = lc0_dataset
    index_out, errors_out = str(tmp_path / "idx.parquet"), str(tmp_path / "errors.jsonl")
    code = cli.main(["count", directory, "--verify", "--index-out", index_out, "--errors-out", errors_out])
    out = capsys.readouterr().out
    assert code == 0
    assert f"chunks   {len(truth.good):>12,}" in out
    assert f"records  {sum(c.num_records for c in truth.good):>12,}" in out
    assert "records per chunk:" in out and "|" in out
    for bad in truth.bad:
        assert f"{bad.member}: {bad.reason}:" in out or f"{bad.sort_key}: {bad.reason}:" in out
    assert _counts(index_out)[0] == truth.expected_counts("decompress")
    with open(errors_out) as f:
        assert len(f.readlines()) == len(truth.bad)


@pytest.mark.slow
def test_cli_count_json_output(lc0_dataset, capsys):
    directory, truth = lc0_dataset
    assert cli.main(["count", directory, "--json", "--count-method", "trailer"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["chunks"] == len(truth.expected_counts("trailer"))
    assert len(report["errors"]) == len(truth.expected_errors("trailer"))


@pytest.mark.slow
def test_cli_count_uses_the_config_file(lc0_dataset, tmp_path, capsys):
    directory, truth = lc0_dataset
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{directory}"\nlc0 {{ index {{ lc0_version: 6 }} }}\n')
    assert cli.main(["count", "--config", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # The one V5 chunk is now a wrong_version error.
    assert report["summary"]["errors"]["wrong_version"] == 1
    assert report["summary"]["versions"] == {"6": len(truth.expected_counts("scan")) - 1}


def test_cli_rejects_an_input_that_matches_nothing(tmp_path, capsys):
    assert cli.main(["count", str(tmp_path / "nothing-*.tar")]) == 2
    assert "matches no .gz, .tar" in capsys.readouterr().err


def test_empty_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="matches no .gz, .tar"):
        expand_inputs([str(tmp_path)], LC0_INPUT_SUFFIXES)


def test_cli_rejects_an_invalid_config(tmp_path, capsys):
    config = tmp_path / "job.textproto"
    config.write_text('input: "x" lc0 { chunk_pool { hanse_sampling_gamma: -2 } }')
    assert cli.main(["count", "--config", str(config)]) == 2
    assert "hanse_sampling_gamma" in capsys.readouterr().err


def test_count_on_a_runners_workers_writes_its_report_under_the_temp_location_on_shared_storage():
    from shardmill.core.errors import UsageError
    from shardmill.pipelines.commands.count import count_work_dir

    portable = ["--runner=PortableRunner", "--job_endpoint=localhost:1"]
    with pytest.raises(UsageError, match=r"needs --temp_location on storage both they and this machine reach"):
        count_work_dir(PipelineOptions(portable), None, None)  # the launcher's own /tmp: no worker sees it
    with pytest.raises(UsageError, match=r"needs --temp_location .*got '/tmp/x'"):
        count_work_dir(PipelineOptions([*portable, "--temp_location=/tmp/x"]), None, None)
    shared = PipelineOptions([*portable, "--temp_location=s3://bucket/temp/"])
    with pytest.raises(UsageError, match=r"^--index-out /tmp/index.parquet: on a runner's workers"):
        count_work_dir(shared, "/tmp/index.parquet", None)
    assert count_work_dir(shared, None, "s3://bucket/errors.jsonl").startswith("s3://bucket/temp/shardmill-count-")
