"""Label sampling end to end: three formats in, every mode, exact counts, dead letters, determinism."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.pipelines import cli
from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.inputs import EVENT_SUFFIXES, expand_inputs
from shardmill.pipelines.run_job import run_job
from tests.test_run_job import MULTI_PROCESSING, file_digests, read_errors


@pytest.fixture(scope="module")
def event_logs(tmp_path_factory):
    """Three partitions of very different click densities, one per format, one malformed CSV row."""
    directory = tmp_path_factory.mktemp("events")
    rng = np.random.default_rng(12)
    dense = (rng.random(600) < 0.2).astype(int)
    lines = ["id,user,clicked"] + [f"{i},u{i % 7},{c}" for i, c in enumerate(dense)]
    lines.insert(50, "broken,row")  # line 51 of the file
    (directory / "day1.csv").write_text("\n".join(lines) + "\n")
    sparse = (rng.random(3000) < 0.01).astype(int)
    (directory / "day2.jsonl").write_text("".join(json.dumps({"id": i, "clicked": int(c)}) + "\n"
                                                  for i, c in enumerate(sparse)))
    medium = (rng.random(1500) < 0.05).astype(int)
    pq.write_table(pa.table({"id": np.arange(1500), "clicked": medium}), directory / "day3.parquet")
    truth = {"targets": int(dense.sum() + sparse.sum() + medium.sum()),
             "non_targets": int((dense == 0).sum() + (sparse == 0).sum() + (medium == 0).sum())}
    return str(directory), truth


def run(directory, out, mode, ratio=4, beam_args=()):
    config = validate(parse_config(
        f'input: "{directory}"\nseed: 3\noutput {{ num_shards: 3 }}\n'
        f'label_sampling {{ label_column: "clicked" target_values: "1" ratio: {ratio} mode: {mode} }}'))
    return run_job(config, expand_inputs([directory], EVENT_SUFFIXES), str(out), PipelineOptions(list(beam_args)))


def read_rows(out, manifest):
    return pa.concat_tables([pq.read_table(os.path.join(out, s["path"])) for s in manifest["shards"]],
                            promote_options="permissive")


@pytest.mark.parametrize("mode", ["ITERATIVE", "ADAPTIVE", "EXACT", "TWO_PASS"])
def test_every_mode_keeps_all_targets_and_reports_its_ratio(event_logs, tmp_path, mode):
    directory, truth = event_logs
    manifest = run(directory, tmp_path, mode)
    stats = manifest["stats"]["label_sampling"]
    assert stats["targets"] == truth["targets"] and stats["non_targets_in"] == truth["non_targets"]
    rows = read_rows(tmp_path, manifest)
    labels = np.array([int(x) for x in rows["clicked"].to_pylist()])
    assert (labels == 1).sum() == truth["targets"]
    assert (labels == 0).sum() == stats["non_targets_out"]
    assert {"id", "clicked", "_partition", "_row"} <= set(rows.column_names)
    assert len(stats["partitions"]) == 3
    if mode == "EXACT":
        assert stats["non_targets_out"] == round(4 * truth["targets"]) and stats["ratio_error"] == 0


def test_malformed_rows_are_dead_lettered_with_their_line(event_logs, tmp_path):
    directory, _ = event_logs
    manifest = run(directory, tmp_path, "ADAPTIVE")
    errors = read_errors(tmp_path, manifest)
    assert [(os.path.basename(e["path"]), e["reason"], e["member"]) for e in errors] == [
        ("day1.csv", "malformed_row", "line 51")]


def test_label_job_is_identical_with_two_worker_processes(event_logs, tmp_path):
    directory, _ = event_logs
    run(directory, tmp_path / "a", "EXACT")
    run(directory, tmp_path / "b", "EXACT", beam_args=MULTI_PROCESSING)
    assert file_digests(tmp_path / "a") == file_digests(tmp_path / "b")


def test_cli_runs_label_sampling_and_inspect_reports_it(event_logs, tmp_path, capsys):
    directory, truth = event_logs
    config = tmp_path / "labels.textproto"
    config.write_text(f'input: "{directory}"\nmax_error_fraction: 0.5\n'
                      'label_sampling { label_column: "clicked" ratio: 2 mode: EXACT }\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "label sampling EXACT: ratio requested 2, achieved 2.0000" in out
    assert cli.main(["inspect", str(tmp_path / "o")]) == 0
    assert f"targets     {truth['targets']:>14,}" in capsys.readouterr().out


def test_large_files_become_several_partitions_and_exact_stays_exact(event_logs, tmp_path):
    directory, truth = event_logs
    config = validate(parse_config(
        f'input: "{directory}"\nseed: 3\noutput {{ num_shards: 2 }}\n'
        'label_sampling { label_column: "clicked" ratio: 3 mode: EXACT max_partition_bytes: 4000 }'))
    manifest = run_job(config, expand_inputs([directory], EVENT_SUFFIXES), str(tmp_path), PipelineOptions([]))
    stats = manifest["stats"]["label_sampling"]
    names = [p["partition"] for p in stats["partitions"]]
    assert any(n.startswith("day1.csv#") for n in names) and any(n.startswith("day2.jsonl#") for n in names)
    assert stats["targets"] == truth["targets"] and stats["non_targets_out"] == 3 * truth["targets"]
    rows = read_rows(tmp_path, manifest)
    keys = list(zip(rows["_partition"].to_pylist(), rows["_row"].to_pylist()))
    assert len(set(keys)) == len(keys)


def test_the_native_reader_serves_a_label_sampling_output(event_logs, tmp_path):
    from shardmill.native_ext import ShardReader

    directory, truth = event_logs
    manifest = run(directory, tmp_path, "EXACT", ratio=2)
    with ShardReader(str(tmp_path), batch_size=64, columns=["clicked", "_row"], seed=1) as reader:
        batches = list(reader)
    clicked = [int(x) for b in batches for x in b["clicked"]]
    assert len(clicked) == sum(s["rows"] for s in manifest["shards"])
    assert sum(clicked) == truth["targets"]
