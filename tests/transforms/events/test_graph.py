"""Label sampling end to end: three formats in, every mode, exact counts, dead letters, determinism."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from shardmill.native_ext import OrderOptions, load_manifest
from shardmill.pipelines import cli
from shardmill.pipelines.config import ConfigError, parse_config, validate
from shardmill.pipelines.run_job import run_job
from shardmill.transforms.common.discovery import expand_inputs
from shardmill.transforms.common.keyed_hash import fingerprint
from shardmill.transforms.events.formats import EVENT_SUFFIXES, EventReadOptions
from shardmill.transforms.events.readers import read_events
from shardmill.transforms.events.sampling import exact_keep_count, exact_priorities
from tests.pipelines.test_run_job import MULTI_PROCESSING, file_digests, read_errors
from tests.support.stats import binomial_pmf

pytestmark = pytest.mark.slow  # every test here runs a job


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
    return run_job(config, expand_inputs([directory], EVENT_SUFFIXES), str(out),
                   PipelineOptions(list(beam_args))).manifest


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
    manifest = run_job(config, expand_inputs([directory], EVENT_SUFFIXES), str(tmp_path), PipelineOptions([])).manifest
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
    with ShardReader(str(tmp_path), batch_size=64, columns=["clicked", "_row"], order_options=OrderOptions(seed=1)) as reader:
        batches = list(reader)
    clicked = [int(x) for b in batches for x in b["clicked"]]
    assert len(clicked) == sum(s["rows"] for s in manifest["shards"])
    assert sum(clicked) == truth["targets"]


# ---- logs as they really arrive ---------------------------------------------------


def run_config(inputs, out, label_sampling, num_shards=2):
    config = validate(parse_config(
        "".join(f'input: "{item}"\n' for item in inputs) +
        f'seed: 3\nmax_error_fraction: 0.9\noutput {{ num_shards: {num_shards} }}\n'
        f'label_sampling {{ {label_sampling} }}'))
    return run_job(config, expand_inputs(inputs, EVENT_SUFFIXES), str(out), PipelineOptions([])).manifest


def test_exact_keeps_the_k_smallest_priorities_of_the_whole_run(event_logs, tmp_path):
    directory, truth = event_logs
    manifest = run(directory, tmp_path, "EXACT")
    priorities = {}
    for name in ("day1.csv", "day2.jsonl", "day3.parquet"):
        part = read_events(os.path.join(directory, name), EventReadOptions("clicked"))
        is_target = part.target_mask()
        keys = exact_priorities(is_target, 3, fingerprint(name))
        priorities.update({(name, row): keys[row] for row in np.flatnonzero(~is_target)})
    keep = exact_keep_count(truth["targets"], truth["non_targets"], 4)
    expected = set(sorted(priorities, key=priorities.get)[:keep])
    rows = read_rows(tmp_path, manifest)
    kept = {(p, r) for p, r, c in zip(rows["_partition"].to_pylist(), rows["_row"].to_pylist(),
                                      rows["clicked"].to_pylist()) if int(c) == 0}
    assert kept == expected


def test_files_with_one_basename_in_two_folders_are_independent_partitions(tmp_path):
    rng = np.random.default_rng(8)
    clicks = (rng.random(20_000) < 0.05).astype(int)
    text = "id,clicked\n" + "".join(f"{i},{c}\n" for i, c in enumerate(clicks))
    for day in ("2026-11-01", "2026-11-02"):
        (tmp_path / "logs" / day).mkdir(parents=True)
        (tmp_path / "logs" / day / "part-0.csv").write_text(text)  # the same rows: only the names differ
    manifest = run_config([str(tmp_path / "logs")], tmp_path / "out",
                          'label_column: "clicked" ratio: 4 mode: EXACT')
    rows = read_rows(tmp_path / "out", manifest)
    kept = {}
    for p, r, c in zip(rows["_partition"].to_pylist(), rows["_row"].to_pylist(), rows["clicked"].to_pylist()):
        if int(c) == 0:
            kept.setdefault(p, set()).add(r)
    assert sorted(kept) == ["2026-11-01/part-0.csv", "2026-11-02/part-0.csv"]
    # Independent keyed draws keep a row in both files with probability q^2; the same draws would keep
    # every row kept in one file in the other too (overlap = |kept| ~ 4,000 here).
    non_targets = int((clicks == 0).sum())
    q = 4 * 2 * int(clicks.sum()) / (2 * non_targets)
    pmf = binomial_pmf(non_targets, q * q)
    low, high = np.searchsorted(np.cumsum(pmf), [1e-6, 1 - 1e-6])
    overlap = len(kept["2026-11-01/part-0.csv"] & kept["2026-11-02/part-0.csv"])
    assert low <= overlap <= high, (low, overlap, high)


def test_type_drift_is_unified_where_lossless_and_dead_letters_the_file_where_not(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(100)))
    (logs / "b.csv").write_text("id,clicked\n" + "".join(f"x{i},{i % 2}\n" for i in range(50)))
    pq.write_table(pa.table({"id": pa.array(range(100), pa.int32()), "clicked": [i % 2 for i in range(100)],
                             "extra": [0.5] * 100}), logs / "c.parquet")
    manifest = run_config([str(logs)], tmp_path / "out", 'label_column: "clicked" ratio: 1 mode: ADAPTIVE',
                          num_shards=3)
    errors = read_errors(tmp_path / "out", manifest)
    assert [(os.path.basename(e["path"]), e["reason"]) for e in errors] == [("b.csv", "schema_conflict")]
    assert "column 'id' is string here but int64 in the output" in errors[0]["detail"]
    schemas = {str(pq.read_schema(os.path.join(tmp_path / "out", s["path"])).remove_metadata())
               for s in manifest["shards"]}
    assert len(schemas) == 1
    rows = read_rows(tmp_path / "out", manifest)
    assert rows.schema.field("id").type == pa.int64() and "b.csv" not in set(rows["_partition"].to_pylist())
    assert rows.schema.field("extra").type == pa.float64()
    accounting = manifest["stats"]["accounting"]
    assert accounting["partitions_left_out"] == 1 and accounting["records_written"] == rows.num_rows
    assert [p["partition"] for p in manifest["stats"]["label_sampling"]["partitions"]] == ["a.csv", "c.parquet"]


def test_a_nested_label_column_is_a_dead_letter_not_a_crash(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.csv").write_text("id,clicked\n1,1\n2,0\n")
    pq.write_table(pa.table({"id": [1], "clicked": [[1, 2]]}), logs / "nested.parquet")
    for mode in ("EXACT", "TWO_PASS"):
        manifest = run_config([str(logs)], tmp_path / mode, f'label_column: "clicked" ratio: 1 mode: {mode}')
        errors = read_errors(tmp_path / mode, manifest)
        assert [(os.path.basename(e["path"]), e["reason"]) for e in errors] == [
            ("nested.parquet", "unsupported_label_type")]
        assert manifest["stats"]["label_sampling"]["targets"] == 1


def test_headerless_tsv_in_the_article_layout_runs_as_written(tmp_path):
    rng = np.random.default_rng(21)
    clicks = (rng.random(20_000) < 0.03).astype(int)
    path = tmp_path / "train.tsv"
    path.write_text("".join(f"{c}\t{i % 97}\t{i % 13}\t68fd1e64\t{i:08x}\n" for i, c in enumerate(clicks)))
    manifest = run_config([str(path)], tmp_path / "out",
                          'label_column: "is_click" ratio: 2 mode: EXACT max_partition_bytes: 100000 '
                          'column_names: ["is_click", "i1", "i2", "c1", "c2"] column_types { key: "c2" value: "string" }')
    stats = manifest["stats"]
    assert stats["accounting"]["records_read"] == 20_000 and not read_errors(tmp_path / "out", manifest)
    assert stats["label_sampling"]["targets"] == clicks.sum()
    assert stats["label_sampling"]["non_targets_out"] == 2 * clicks.sum()
    assert len(stats["label_sampling"]["partitions"]) > 3
    rows = read_rows(tmp_path / "out", manifest)
    assert rows.schema.field("c2").type == pa.string() and rows.column_names[:5] == ["is_click", "i1", "i2", "c1", "c2"]


def test_the_summary_names_files_read_whole_and_partitions_left_out(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "stray.csv").write_text("id,note,clicked\n" + "".join(f'{i},say "hi",{i % 2}\n' for i in range(300)))
    (logs / "drift.csv").write_text("id,note,clicked\n1,x,1\n")
    (logs / "more.csv").write_text("id,note,clicked\n" + "".join(f"{i},{i},{i % 2}\n" for i in range(10)))
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nmax_error_fraction: 0.9\n'
                      'label_sampling { label_column: "clicked" ratio: 1 max_partition_bytes: 1000 }\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "files read whole, not split (a quote inside an unquoted field): stray.csv" in out
    assert "partitions left out 1" in out


def test_compressed_logs_in_a_folder_run_like_the_plain_ones_and_the_summary_says_they_are_read_whole(
        tmp_path, capsys):
    import gzip

    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    for day in range(3):
        rows = "".join(f'{day * 1000 + i},"n\n{i}",{int(i % 7 == 0)}\n' for i in range(400))
        text = "id,note,clicked\n" + rows + "x,y\n"
        (plain / f"part-{day}.csv").write_text(text)
        (packed / f"part-{day}.csv").write_bytes(gzip.compress(text.encode()))
        (packed / f"part-{day}.csv").rename(packed / f"part-{day}.csv.gz")
    outputs = {}
    for name, directory in (("plain", plain), ("packed", packed)):
        config = tmp_path / f"{name}.textproto"
        config.write_text(f'input: "{directory}"\nseed: 5\noutput {{ num_shards: 2 }}\nmax_error_fraction: 0.1\n'
                          'label_sampling { label_column: "clicked" ratio: 100 }\n')  # keeps every row
        assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / f"out-{name}")]) == 0
        outputs[name] = capsys.readouterr().out
        manifest = load_manifest(str(tmp_path / f"out-{name}"))
        outputs[name + "_rows"] = read_rows(str(tmp_path / f"out-{name}"), manifest).drop_columns(["_partition"])
    assert outputs["plain_rows"].num_rows > 100
    assert outputs["packed_rows"].sort_by("id").to_pydict() == outputs["plain_rows"].sort_by("id").to_pydict()
    assert ("files read whole, not split (gzip-compressed: a compressed stream is read whole): part-0.csv.gz, "
            "part-1.csv.gz, part-2.csv.gz") in outputs["packed"]
    assert "malformed_row 3" in outputs["packed"]


def test_a_label_column_no_file_has_is_a_config_error_before_any_pipeline(tmp_path, capsys, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(3):
        (logs / f"part-{i}.csv").write_text("id,user,clicked\n1,a,1\n2,b,0\n")
    (logs / "part-9.jsonl.gz").write_bytes(__import__("gzip").compress(b'{"id": 1, "clicked": 1}\n'))
    from shardmill.transforms.events import readers

    probed = []
    original = readers.column_names
    monkeypatch.setattr("shardmill.transforms.events.plan.column_names",
                        lambda path, *a, **k: probed.append(path) or original(path, *a, **k))
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "click" }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "label_sampling.label_column: no column 'click' in any input file (" in err
    assert "has: id, user, clicked)" in err or "has: id, clicked)" in err
    assert not (tmp_path / "o").exists() and len(probed) == 4
    # A column some files have: the run goes on (the others are dead letters), reading one head to know.
    probed.clear()
    config.write_text(f'input: "{logs}"\nmax_error_fraction: 1\nlabel_sampling {{ label_column: "user" }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 0
    assert len(probed) >= 1 and "missing_label_column 1" in capsys.readouterr().out


def test_the_error_budget_counts_the_records_a_lost_file_held(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = np.random.default_rng(1)  # random values: bytes grow with rows, as in real logs
    pq.write_table(pa.table({"x": rng.random(100), "clicked": [i % 2 for i in range(100)]}), logs / "good.parquet")
    big = logs / "big.parquet"
    pq.write_table(pa.table({"x": rng.random(1000), "clicked": [i % 2 for i in range(1000)]}), big)
    big.write_bytes(big.read_bytes()[:-100])  # truncated: unreadable, its records unknown
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nmax_error_fraction: 0.2\nlabel_sampling {{ label_column: "clicked" }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 1
    assert "of the input was bad" in capsys.readouterr().err
    report = json.loads(next((tmp_path / "o" / ".rejected").glob("*manifest.json")).read_text())
    acc = report["stats"]["accounting"]
    # The lost file is estimated from its bytes at the good file's records per byte: far more than one record.
    assert 500 < acc["records_lost"] == acc["records_lost_estimated"] < 1500 and acc["error_fraction"] > 0.5


def test_a_file_without_the_label_column_counts_its_rows_against_the_budget(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(100)))
    (logs / "b.csv").write_text("id,other\n" + "".join(f"{i},1\n" for i in range(300)))
    manifest = run_config([str(logs)], tmp_path / "o", 'label_column: "clicked" ratio: 1')
    acc = manifest["stats"]["accounting"]
    assert acc["records_lost"] == 300 and acc["records_lost_estimated"] == 0
    assert acc["error_fraction"] == pytest.approx(300 / 400)


def test_hive_folders_become_typed_columns_unified_across_files(tmp_path):
    logs = tmp_path / "logs"
    layout = {"dt=2026-11-01/country=de/hour=1": 3, "dt=2026-11-01/country=fr/hour=2.5": 2,
              "dt=2026-11-02/country=__HIVE_DEFAULT_PARTITION__/hour=3": 4, "dt=2026-11-02/country=a%2Fb/hour=4": 1}
    for folder, rows in layout.items():
        (logs / folder).mkdir(parents=True)
        (logs / folder / "part-0.csv").write_text("id,clicked,country_own\n" +
                                                 "".join(f"{i},1,x\n" for i in range(rows)))
    manifest = run_config([str(logs)], tmp_path / "o", 'label_column: "clicked" ratio: 1 hive_partitioning: true')
    table = read_rows(str(tmp_path / "o"), manifest)
    # hour: int64 in 8 rows, double in 2: no lossless type for both (int64 -> double can round), so the
    # type most rows have wins and the other file is left out as a schema conflict, as for any column.
    assert table.schema.field("dt").type == pa.string() and table.schema.field("hour").type == pa.int64()
    rows = sorted(set(zip(table["dt"].to_pylist(), table["country"].to_pylist(), table["hour"].to_pylist())),
                  key=lambda r: r[2])
    assert rows == [("2026-11-01", "de", 1), ("2026-11-02", None, 3), ("2026-11-02", "a/b", 4)]
    assert table.num_rows == 8
    errors = read_errors(str(tmp_path / "o"), manifest)
    assert [(e["reason"], e["records"]) for e in errors] == [("schema_conflict", 2)]
    assert "column 'hour' is double here but int64" in errors[0]["detail"]
    without = run_config([str(logs)], tmp_path / "o2", 'label_column: "clicked" ratio: 1')
    assert "dt" not in read_rows(str(tmp_path / "o2"), without).column_names


@pytest.fixture()
def two_days(tmp_path):
    """dt=2026-11-01: two files, 40 targets among 500 rows; dt=2026-11-02: one file, 100 among 500."""
    logs = tmp_path / "logs"
    for folder, name, rows, every in [("dt=2026-11-01", "part-0.csv", 300, 10), ("dt=2026-11-01", "part-1.csv", 200, 20),
                                      ("dt=2026-11-02", "part-0.csv", 500, 5)]:
        (logs / folder).mkdir(parents=True, exist_ok=True)
        (logs / folder / name).write_text("id,clicked\n" + "".join(f"{i},{int(i % every == 0)}\n" for i in range(rows)))
    return logs


def kept_per_day(out, manifest):
    table = read_rows(str(out), manifest)
    return {day: sum(1 for d, c in zip(table["dt"].to_pylist(), table["clicked"].to_pylist()) if d == day and not c)
            for day in ("2026-11-01", "2026-11-02")}


@pytest.mark.slow
def test_partition_by_holds_the_exact_ratio_within_each_hive_group(two_days, tmp_path):
    hive = 'label_column: "clicked" ratio: 2 mode: EXACT hive_partitioning: true max_partition_bytes: 500'
    grouped = run_config([str(two_days)], tmp_path / "o", hive + ' partition_by: "dt"')
    assert kept_per_day(tmp_path / "o", grouped) == {"2026-11-01": 80, "2026-11-02": 200}  # round(2 x targets)
    groups = grouped["stats"]["label_sampling"]["groups"]
    assert {g: (s["targets"], s["non_targets_out"]) for g, s in groups.items()} == {
        "dt=2026-11-01": (40, 80), "dt=2026-11-02": (100, 200)}
    assert len(grouped["stats"]["label_sampling"]["partitions"]) > 3  # files were split into ranges
    whole = run_config([str(two_days)], tmp_path / "o2", hive)
    kept = kept_per_day(tmp_path / "o2", whole)
    assert sum(kept.values()) == 280 and kept["2026-11-01"] > 100  # one group: day 1's 460 non-targets weigh more
    assert "groups" not in whole["stats"]["label_sampling"]


@pytest.mark.slow
def test_partition_by_holds_the_two_pass_rate_within_each_hive_group(two_days, tmp_path):
    manifest = run_config([str(two_days)], tmp_path / "o", 'label_column: "clicked" ratio: 2 mode: TWO_PASS '
                          'hive_partitioning: true partition_by: "dt"')
    kept = kept_per_day(tmp_path / "o", manifest)
    # Each non-target of day d is kept with rate 2 * targets_d / non_targets_d: Binomial(non_targets_d, rate).
    for day, (targets, non_targets) in {"2026-11-01": (40, 460), "2026-11-02": (100, 400)}.items():
        rate = 2 * targets / non_targets
        sigma = (non_targets * rate * (1 - rate)) ** 0.5
        assert abs(kept[day] - 2 * targets) <= 4 * sigma, (day, kept[day])
    # One group would keep day 1's non-targets at 280 / 860: 150 expected, 8 sigma from 80.
    assert kept["2026-11-01"] < 80 + 4 * (460 * 0.174 * 0.826) ** 0.5


@pytest.mark.parametrize("settings, message", [
    ('mode: EXACT partition_by: "dt"', "needs hive_partitioning: true"),
    ('hive_partitioning: true partition_by: "dt"', "mode ADAPTIVE holds it per file"),
    ('mode: EXACT hive_partitioning: true partition_by: "dt" partition_by: "dt"', "must be distinct"),
])
def test_partition_by_is_refused_where_it_cannot_hold(settings, message):
    with pytest.raises(ConfigError, match=message):
        validate(parse_config(f'input: "x"\nlabel_sampling {{ label_column: "c" {settings} }}'))


@pytest.mark.slow
def test_a_partition_by_key_in_no_folder_is_a_config_error(two_days, tmp_path):
    with pytest.raises(ConfigError, match=r"no input file is below a country=\.\.\. folder \(hive keys found: dt\)"):
        run_config([str(two_days)], tmp_path / "o",
                   'label_column: "clicked" mode: EXACT hive_partitioning: true partition_by: "country"')


def test_empty_and_null_hive_folders_unify_with_their_keys_other_values_in_whole_and_range_reads(tmp_path):
    logs = tmp_path / "logs"
    layout = {"dt=1_000/hour=1": 30, "dt=1_000/hour=": 20, "dt=2026-11-01/hour=2": 30,
              "dt=2026-11-01/hour=__HIVE_DEFAULT_PARTITION__": 20}
    for folder, rows in layout.items():
        (logs / folder).mkdir(parents=True)
        (logs / folder / "part-0.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(rows)))
    outputs = {}
    for max_bytes in (268435456, 40):
        config = validate(parse_config(  # the default error budget: a schema conflict would reject the run
            f'input: "{logs}"\noutput {{ num_shards: 1 }}\nlabel_sampling {{ label_column: "clicked" ratio: 100 '
            f'hive_partitioning: true max_partition_bytes: {max_bytes} }}'))
        out = tmp_path / f"o{max_bytes}"
        manifest = run_job(config, expand_inputs([str(logs)], EVENT_SUFFIXES), str(out), PipelineOptions([])).manifest
        assert not read_errors(str(out), manifest) and manifest["stats"]["accounting"]["records_written"] == 100
        table = read_rows(str(out), manifest)
        assert table.schema.field("dt").type == pa.string() and table.schema.field("hour").type == pa.int64()
        outputs[max_bytes] = sorted(zip(table["dt"].to_pylist(), table["hour"].to_pylist(), table["id"].to_pylist()),
                                    key=str)
    assert outputs[40] == outputs[268435456]
    assert {(dt, hour) for dt, hour, _ in outputs[40]} == {("1_000", 1), ("1_000", None), ("2026-11-01", 2),
                                                           ("2026-11-01", None)}


@pytest.fixture()
def logs_with_a_file_left_out(tmp_path):
    """a.csv and c.csv (integer ids): 200 targets among 4,000 rows; b.csv, left out whole by its read or its
    schema, holds 200 targets among 400 rows: counted in a cut it would raise TWO_PASS's rate to 0.2 and move
    EXACT's threshold, both far from what the written rows need."""
    def write(variant):
        logs = tmp_path / f"logs-{variant}"
        logs.mkdir()
        for name, rows in (("a.csv", 2000), ("c.csv", 2000)):
            (logs / name).write_text("id,clicked\n" + "".join(f"{i},{int(i % 20 == 0)}\n" for i in range(rows)))
        header, value = {"schema_conflict": ("id,clicked", "x{}"), "duplicate_columns": ("id,id,clicked", "{},{}")}[
            variant]
        (logs / "b.csv").write_text(f"{header}\n" + "".join(f"{value.format(i, i)},{i % 2}\n" for i in range(400)))
        return logs
    return write


@pytest.mark.parametrize("variant", ["schema_conflict", "duplicate_columns"])
@pytest.mark.parametrize("mode", ["EXACT", "TWO_PASS"])
def test_a_file_left_out_counts_toward_no_cut(logs_with_a_file_left_out, tmp_path, mode, variant):
    logs = logs_with_a_file_left_out(variant)
    manifest = run_config([str(logs)], tmp_path / "o", f'label_column: "clicked" ratio: 2 mode: {mode}')
    assert [e["reason"] for e in read_errors(tmp_path / "o", manifest)] == [variant]
    stats = manifest["stats"]["label_sampling"]
    targets, non_targets = 200, 3800  # of a.csv and c.csv, the files written
    rows = read_rows(tmp_path / "o", manifest)
    kept = sum(1 for c in rows["clicked"].to_pylist() if not c)
    assert (stats["targets"], stats["non_targets_in"], stats["non_targets_out"]) == (targets, non_targets, kept)
    assert set(rows["_partition"].to_pylist()) == {"a.csv", "c.csv"}
    assert [p["partition"] for p in stats["partitions"]] == ["a.csv", "c.csv"]
    acc = manifest["stats"]["accounting"]
    assert (acc["records_read"], acc["records_lost"], acc["partitions_left_out"]) == (4400, 400, 1)
    assert acc["partitions_left_out_by_reason"] == {variant: 1} and acc["error_fraction"] == 400 / 4400
    if mode == "EXACT":  # exactly round(ratio x targets) of the written rows
        assert kept == 400 and stats["achieved_ratio"] == 2
    else:  # each non-target kept with rate 2 x 200 / 3,800: Binomial(3,800, rate); bounds at 1e-6 each side
        pmf = binomial_pmf(non_targets, 2 * targets / non_targets)
        low, high = np.searchsorted(np.cumsum(pmf), [1e-6, 1 - 1e-6])
        assert low <= kept <= high, (low, kept, high)  # about 330..475; counting b.csv would give about 760


@pytest.mark.parametrize("mode", ["ADAPTIVE", "EXACT"])
def test_partitions_read_and_left_out_whole_are_counted_read_and_left_out_whatever_the_reason(tmp_path, capsys,
                                                                                              mode):
    """Every partition left out after its rows were read (its schema, a repeated column name, no label column)
    counts its records read and lost, and itself left out, in the manifest and the summary."""
    import gzip

    logs = tmp_path / "logs"
    logs.mkdir()
    rows = lambda ids, n: "".join(f"{ids.format(i)},{int(i % 10 == 0)},{i}\n" for i in range(n))  # noqa: E731
    (logs / "a.csv").write_text("id,clicked,x\n" + rows("{}", 3000))
    (logs / "b.csv").write_text("id,clicked,x\n" + rows("s{}", 500))  # string ids: a schema conflict
    (logs / "c.csv").write_text("id,clicked,id\n" + rows("{}", 400))
    (logs / "d.csv.gz").write_bytes(gzip.compress(("id,other,x\n" + rows("{}", 300)).encode()))
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nmax_error_fraction: 0.9\nlabel_sampling {{ label_column: "clicked" '
                      f'ratio: 2 mode: {mode} }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 0
    manifest = load_manifest(str(tmp_path / "o"))
    acc = manifest["stats"]["accounting"]
    assert (acc["records_read"], acc["records_lost"], acc["records_lost_estimated"]) == (4200, 1200, 0)
    assert acc["partitions"] == 4 and acc["partitions_left_out"] == 3
    assert acc["partitions_left_out_by_reason"] == {"duplicate_columns": 1, "missing_label_column": 1,
                                                    "schema_conflict": 1}
    assert acc["error_fraction"] == 1200 / 4200
    assert [p["partition"] for p in manifest["stats"]["label_sampling"]["partitions"]] == ["a.csv"]
    assert ("partitions left out 3, read but not written: duplicate_columns 1, missing_label_column 1, "
            "schema_conflict 1 (column types that can't be unified); see the errors") in capsys.readouterr().out


def test_a_compressed_log_that_fails_its_second_pass_is_counted_read_and_left_out(tmp_path, monkeypatch):
    import gzip

    from shardmill.transforms.events import graph, record_ends

    monkeypatch.setattr(record_ends, "STREAM_BLOCK_BYTES", 4096)  # the log is read in blocks, twice

    def changed(*args, **kwargs):
        raise ValueError("block 0 reads 3 rows now, 400 before")
        yield

    monkeypatch.setattr(graph, "event_blocks", changed)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(1000)))
    (logs / "b.csv.gz").write_bytes(gzip.compress(("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(1000)))
                                                  .encode()))
    manifest = run_config([str(logs)], tmp_path / "o", 'label_column: "clicked" ratio: 1')
    acc = manifest["stats"]["accounting"]
    assert [(e["reason"], e["records"]) for e in read_errors(tmp_path / "o", manifest)] == [("unreadable", 1000)]
    assert (acc["records_read"], acc["records_lost"], acc["partitions_left_out"]) == (2000, 1000, 1)
    assert acc["partitions_left_out_by_reason"] == {"unreadable": 1} and acc["error_fraction"] == 0.5
    assert [p["partition"] for p in manifest["stats"]["label_sampling"]["partitions"]] == ["a.csv"]


def test_a_hive_group_wholly_left_out_has_no_cut_and_the_others_keep_theirs(tmp_path):
    logs = tmp_path / "logs"
    for folder, name, ids in (("dt=1", "a.csv", "{}"), ("dt=1", "c.csv", "{}"), ("dt=2", "b.csv", "x{}")):
        (logs / folder).mkdir(parents=True, exist_ok=True)
        (logs / folder / name).write_text(
            "id,clicked\n" + "".join(f"{ids.format(i)},{int(i % 20 == 0)}\n" for i in range(2000 if ids == "{}" else 100)))
    for mode in ("EXACT", "TWO_PASS"):
        manifest = run_config([str(logs)], tmp_path / mode, f'label_column: "clicked" ratio: 2 mode: {mode} '
                              'hive_partitioning: true partition_by: "dt"')
        assert [e["reason"] for e in read_errors(tmp_path / mode, manifest)] == ["schema_conflict"]
        groups = manifest["stats"]["label_sampling"]["groups"]
        assert list(groups) == ["dt=1"] and groups["dt=1"]["targets"] == 200
        if mode == "EXACT":
            assert groups["dt=1"]["non_targets_out"] == 400


# ---- compressed logs: streamed, and a lost one priced by what it held ---------------------------------------------


def test_a_compressed_log_lost_part_way_counts_the_records_read_from_it(tmp_path, capsys):
    import gzip
    import zlib

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(20_000)))
    repetitive = gzip.compress(("id,clicked\n" + "0,0\n1,1\n" * 100_000).encode())
    (logs / "big.csv.gz").write_bytes(repetitive[:-100])  # truncated: its member can't be checked
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "clicked" }}\n')  # the default budget
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 1
    assert "of the input was bad" in capsys.readouterr().err
    report = json.loads(next((tmp_path / "o" / ".rejected").glob("*manifest.json")).read_text())
    acc = report["stats"]["accounting"]
    # Priced by the records read from it before the cut and the one it cut (not by its few compressed bytes at
    # the plain file's records per byte: ~1,200).
    before_cut = zlib.decompressobj(31).decompress(repetitive[:-100]).count(b"\n") - 1  # the header is no record
    assert before_cut > 150_000
    assert acc["records_lost"] == before_cut + 1 and acc["records_lost_estimated"] == 0
    assert acc["error_fraction"] > 0.85


def _run_limited(config, limit_gib: float = 3, timeout: int = 600):
    """`shardmill run` in a subprocess with its address space capped; (its result, its peak RSS in MiB).

    The cap keeps a run that would hold a log whole from taking the machine; it is no measure itself (Arrow's
    allocator reserves address space by the GiB), the peak RSS is."""
    import resource
    import subprocess
    import sys

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (int(limit_gib * (1 << 30)),) * 2)

    # The run's own high-water mark (VmHWM), not its ru_maxrss: that one also holds the pytest worker's RSS
    # from the moment this subprocess was forked from it until it exec'd (the kernel folds the old image's
    # peak in at exec), so a worker grown to 870 MiB by earlier tests made every run here "peak" at 870 MiB.
    run = ("import re, resource, sys; from shardmill.pipelines import cli; "
           "code = cli.main(['run', '--config', sys.argv[1]]); "
           "own = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
           "print('peak_rss_kib', max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(code)")
    # Freed pages returned at once: the command's purge delay keeps them a moment for speed, and how long a
    # moment is under a loaded CPU would make the peak a measure of scheduling, not of what the run holds.
    env = {**os.environ, "MIMALLOC_PURGE_DELAY": "0"}
    result = subprocess.run([sys.executable, "-c", run, str(config)], capture_output=True, text=True,
                            timeout=timeout, preexec_fn=cap, cwd="/", env=env)
    peaks = [int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("peak_rss_kib ")]
    return result, (peaks[0] >> 10 if peaks else -1)


@pytest.mark.slow
def test_the_peak_measured_is_the_runs_own_not_the_test_process_it_was_forked_from(tmp_path):
    """A test process holding 1 GiB starts a small run: its peak is the run's (~200 MiB), not 1 GiB."""
    held = b"\x01" * (1 << 30)  # resident: every page written
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(100)))
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\noutput {{ path: "{tmp_path / "o"}" }}\nlabel_sampling {{ label_column: "clicked" }}\n')
    result, peak_mib = _run_limited(config, limit_gib=4)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(held) == 1 << 30 and 0 < peak_mib < 600


def _write_gzip_csv(path, rows: int) -> None:
    """id,user,clicked rows (a click every 97) gzip-compressed a block at a time, never whole in memory."""
    import zlib

    deflate = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as f:
        f.write(deflate.compress(b"id,user,clicked\n"))
        for first in range(0, rows, 1 << 16):
            ids = range(first, min(rows, first + (1 << 16)))
            f.write(deflate.compress("".join(f"{i},user-{i % 50_000:05d}-{'x' * 40},{int(i % 97 == 0)}\n"
                                             for i in ids).encode()))
        f.write(deflate.flush())


@pytest.mark.slow
def test_a_compressed_log_of_300_mb_is_read_whole_in_flat_memory(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    rows = 4_500_000  # ~300 MB inflated
    _write_gzip_csv(logs / "events.csv.gz", rows)
    out = tmp_path / "o"
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\noutput {{ path: "{out}" }}\nlabel_sampling {{ label_column: "clicked" }}\n')
    result, peak_mib = _run_limited(config)
    assert result.returncode == 0, result.stderr[-2000:]
    acc = load_manifest(str(out))["stats"]["accounting"]
    assert acc["records_read"] == rows and acc["records_lost"] == 0
    # Read in 16 MiB blocks: ~450 MiB here (a run holding the text whole peaked at 1,130 MiB).
    assert peak_mib < 800


@pytest.mark.slow
def test_a_log_compressed_over_100x_is_kept_in_shards_of_its_inflated_size(tmp_path):
    """300 MB of rows in 2.6 MB of gzip, all kept: sized by its bytes on disk times a typical 8, it was one shard
    (sorted in memory: 1,180 MiB peak here, and a 700 MB log failed a 4 GiB run); measured, ten of 32 MiB."""
    import zlib

    logs = tmp_path / "logs"
    logs.mkdir()
    rows, pad = 300_000, "p" * 1000
    deflate = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(logs / "m.csv.gz", "wb") as f:
        f.write(deflate.compress(b"id,clicked,pad\n"))
        for first in range(0, rows, 10_000):
            f.write(deflate.compress("".join(f"{i},{int(i % 50 == 0)},{pad}\n"
                                             for i in range(first, first + 10_000)).encode()))
        f.write(deflate.flush())
    out = tmp_path / "o"
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\noutput {{ path: "{out}" target_shard_bytes: 33554432 }}\n'
                      'label_sampling { label_column: "clicked" ratio: 1000 }\n')
    result, peak_mib = _run_limited(config)
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = load_manifest(str(out))
    assert manifest["num_shards"] == 10 and manifest["stats"]["accounting"]["records_written"] == rows
    assert peak_mib < 800  # ~440 MiB here


@pytest.mark.slow
def test_a_bomb_holding_no_records_costs_one_record_not_the_run(tmp_path):
    import gzip

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.csv").write_text("id,clicked\n" + "".join(f"{i},{i % 2}\n" for i in range(2_000)))
    # Over 4 GiB of one unending line in ~4 MB: 66 gzip members of 64 MiB each.
    member = gzip.compress(b"x" * (64 << 20), compresslevel=9)
    with open(logs / "bomb.csv.gz", "wb") as f:
        f.write(gzip.compress(b"id,clicked\n"))
        for _ in range(66):
            f.write(member)
    out = tmp_path / "o"
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\noutput {{ path: "{out}" }}\nlabel_sampling {{ label_column: "clicked" }}\n')
    result, peak_mib = _run_limited(config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert peak_mib < 800
    manifest = load_manifest(str(out))
    acc = manifest["stats"]["accounting"]
    assert acc["records_read"] == 2_000 and acc["records_lost"] == 1 and acc["records_lost_estimated"] == 0
    assert [(e["reason"], e["member"]) for e in read_errors(str(out), manifest)] == [("over_long_record", "line 2")]


def test_a_run_without_targets_warns_and_exact_refuses_it(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("id,clicked\n" + "".join(f"{i},0\n" for i in range(300)))
    config = tmp_path / "c.textproto"
    for mode in ("ADAPTIVE", "TWO_PASS"):
        config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "clicked" ratio: 2 mode: {mode} }}\n')
        assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / mode)]) == 0
        out, err = capsys.readouterr()
        kept = load_manifest(str(tmp_path / mode))["stats"]["label_sampling"]["non_targets_out"]
        warning = (f"no targets: none of the 300 records read has a 'clicked' value in target_values; the output "
                   f"holds {kept:,} non-targets and no target")
        assert f"warning: {warning}" in out
        assert ("WARNING shardmill.transforms.events.kind: label_sampling: no targets: none of the 300 records read "
                "has a 'clicked' value in target_values ['1']; the output holds") in err  # the log
    config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "clicked" ratio: 2 mode: EXACT }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "exact")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("shardmill run: error: label_sampling: no targets: none of the 300 records read has a 'clicked' "
                       "value in target_values ['1']: EXACT keeps ratio x targets = 0 non-targets, so there is nothing "
                       "to commit (check label_column and target_values)")
    assert not list((tmp_path / "exact").glob("*manifest.json")) and not list((tmp_path / "exact").glob("*.parquet"))


def test_a_label_column_only_in_hive_folders_is_refused_saying_folders_cannot_supply_it(tmp_path, capsys):
    logs = tmp_path / "logs"
    for clicked in (0, 1):
        (logs / f"clicked={clicked}").mkdir(parents=True)
        (logs / f"clicked={clicked}" / "part-0.csv").write_text("id,user\n1,a\n2,b\n")
    config = tmp_path / "c.textproto"
    config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "clicked" mode: EXACT hive_partitioning: true }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"shardmill run: error: label_sampling.label_column: no input file has a column 'clicked', only hive folders "
        f"clicked=... ({logs}/clicked=0/part-0.csv): the label must be a column of the files, folders can't supply it")
    assert not (tmp_path / "o").exists()


def test_a_column_types_key_naming_no_column_is_a_config_error_naming_the_columns_found(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("id,user,clicked\n1,a,1\n2,b,0\n")
    (logs / "b.csv").write_text("id,user,country,clicked\n1,a,de,1\n2,b,fr,0\n")  # a column that came later
    config = tmp_path / "c.textproto"
    for key, code in (("countyr", 2), ("country", 0)):
        config.write_text(f'input: "{logs}"\nlabel_sampling {{ label_column: "clicked" '
                          f'column_types {{ key: "{key}" value: "string" }} }}\n')
        assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / key)]) == code
    captured = capsys.readouterr()
    assert ("shardmill run: error: label_sampling.column_types: no column 'countyr' in any CSV/TSV input file "
            "(did you mean 'country'?); columns found: id, user, clicked, country") in captured.err
    pq.write_table(pa.table({"id": [1], "clicked": [1]}), tmp_path / "only.parquet")
    config.write_text(f'input: "{tmp_path / "only.parquet"}"\nlabel_sampling {{ label_column: "clicked" '
                      'column_types { key: "id" value: "string" } }\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "p")]) == 2
    assert ("label_sampling.column_types: declares column types of CSV/TSV files ('id', ...), but no input file is "
            "CSV/TSV (Parquet and JSON lines carry their own types)") in capsys.readouterr().err


def test_the_label_graph_stays_within_its_transform_count(event_logs):
    from tests.transforms.lc0.test_graph import leaf_transforms

    directory, _ = event_logs
    # 58 before the graph was condensed (Beam's cost is per transform; see the lc0 kind's test).
    assert leaf_transforms(f'input: "{directory}"\nlabel_sampling {{ label_column: "clicked" ratio: 3 }}',
                           expand_inputs([directory], EVENT_SUFFIXES)) <= 41
