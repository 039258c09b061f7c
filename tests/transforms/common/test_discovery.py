"""Discovery over overlapping inputs: each file read once and each skipped file counted once, whatever the
input patterns and their order."""

import json
import os

import pytest

from shardmill.pipelines import cli
from tests.datagen.lc0 import gzip_bytes, make_game_records


@pytest.mark.slow
def test_a_skipped_file_is_counted_once_however_the_inputs_overlap(tmp_path, capsys):
    game = gzip_bytes(make_game_records(3, 5).tobytes())
    data = tmp_path / "data"
    (data / "loose").mkdir(parents=True)
    (data / "top.gz").write_bytes(game)
    (data / "loose" / "game.gz").write_bytes(game)
    (data / "loose" / ".partial.gz").write_bytes(game[:10])
    (data / "loose" / "notes.txt").write_text("hi")
    summaries = []
    for inputs in ([data, data / "loose"], [data / "loose", data], [data / "loose", data, data / "loose"]):
        assert cli.main(["count", *map(str, inputs), "--json"]) == 0
        summaries.append(json.loads(capsys.readouterr().out)["summary"])
    for summary in summaries:
        assert summary["skipped_files"] == {"hidden": 1, "other_suffix": 1}, summary
        assert summary["chunks"] == 2


def write_hostile_event_logs(data):
    """Three supported event logs beside five of other suffixes (2,000 of the 2,700 records) and two non-data
    files."""
    import bz2
    import gzip
    import lzma

    def csv(n):
        return ("id,clicked\n" + "".join(f"{i},{int(i % 5 == 0)}\n" for i in range(n))).encode()

    data.mkdir()
    (data / "a.csv").write_bytes(csv(300))
    (data / "f.jsonl").write_bytes(b"".join(b'{"id": %d, "clicked": %d}\n' % (i, i % 5 == 0) for i in range(200)))
    (data / "g.csv.gz").write_bytes(gzip.compress(csv(200)))
    (data / "B.CSV.GZ").write_bytes(gzip.compress(csv(400)))
    (data / "e.Csv").write_bytes(csv(400))
    (data / "d.csv.gzip").write_bytes(gzip.compress(csv(400)))
    (data / "c.csv.xz").write_bytes(lzma.compress(csv(400)))
    (data / "h.csv.lz4").write_bytes(bz2.compress(csv(400)))  # any bytes: the suffix is what is judged
    (data / "README.md").write_text("what these logs are")
    (data / "_SUCCESS").write_text("")


def test_suffixes_match_whatever_their_case_and_unreadable_data_is_a_dead_letter(tmp_path):
    from shardmill.transforms.common.discovery import list_input
    from shardmill.transforms.events.formats import EVENT_SUFFIXES

    write_hostile_event_logs(tmp_path / "data")
    events = list(list_input(str(tmp_path / "data"), EVENT_SUFFIXES))
    assert sorted(os.path.basename(e[1]) for e in events if e[0] == "file") == [
        "B.CSV.GZ", "a.csv", "e.Csv", "f.jsonl", "g.csv.gz"]
    dead = {os.path.basename(e[1].path): e[1] for e in events if e[0] == "dead"}
    assert sorted(dead) == ["c.csv.xz", "d.csv.gzip", "h.csv.lz4"]
    assert {(d.stage, d.reason, d.records) for d in dead.values()} == {("discover", "unsupported_suffix", -1)}
    assert dead["c.csv.xz"].bytes == (tmp_path / "data" / "c.csv.xz").stat().st_size  # the budget weighs its bytes
    assert dead["c.csv.xz"].detail == (
        "'c.csv.xz': .csv data ending in .xz, which this job does not read (it reads .csv, .csv.gz, .csv.zst, "
        ".csv.bz2); convert or rename it, or move it out of the input")
    assert sorted((e[1], os.path.basename(e[2])) for e in events if e[0] == "skip") == [
        ("hidden", "_SUCCESS"), ("other_suffix", "README.md")]


@pytest.mark.parametrize("name, data", [
    ("events.jsonl.1", True), ("games.tar.bak", True), ("x.zip", True), ("x.parquet.gz", True),
    ("README.md", False), ("notes.txt", False), ("x.csv.md5", False), ("LICENSE", False)])
def test_a_file_is_data_when_compressed_or_a_data_name_with_one_more_suffix(name, data):
    from shardmill.transforms.common.discovery import unsupported_data
    from shardmill.transforms.events.formats import EVENT_SUFFIXES

    assert (unsupported_data(f"/in/{name}", EVENT_SUFFIXES + (".tar",)) is not None) == data


def test_an_input_holding_only_unreadable_data_names_it(tmp_path):
    from shardmill.transforms.common.discovery import InputError, expand_inputs
    from shardmill.transforms.events.formats import EVENT_SUFFIXES

    (tmp_path / "c.csv.xz").write_bytes(b"x")
    with pytest.raises(InputError, match=r"holds data of suffixes the job does not read, e\.g\. '.*/c\.csv\.xz'"):
        expand_inputs([str(tmp_path)], EVENT_SUFFIXES)


@pytest.mark.slow
def test_data_of_other_suffixes_is_not_lost_silently(tmp_path, capsys):
    """The hostile case: three supported logs and five of other suffixes no longer exit 0 with "errors 0"."""
    data = tmp_path / "data"
    write_hostile_event_logs(data)
    config = tmp_path / "job.textproto"
    sampling = 'label_sampling { label_column: "clicked" ratio: 2 }'
    config.write_text(f'input: "{data}"\nseed: 1\noutput {{ num_shards: 1 }}\n{sampling}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "out")]) == 1  # the error budget
    out = capsys.readouterr().out
    assert "errors 3: unsupported_suffix 3" in out
    assert "skipped 2 file(s): 1 hidden (e.g. .../data/_SUCCESS), 1 other suffix (e.g. .../data/README.md)" in out
    rejected = [json.loads(line) for line in (tmp_path / "out" / ".rejected" / "errors.jsonl").read_text().splitlines()]
    assert sorted(os.path.basename(d["path"]) for d in rejected) == ["c.csv.xz", "d.csv.gzip", "h.csv.lz4"]

    config.write_text(f'input: "{data}"\nseed: 1\nmax_error_fraction: 1\noutput {{ num_shards: 1 }}\n{sampling}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "out")]) == 0  # tolerated
    acc = json.loads((tmp_path / "out" / ".manifest.json").read_text())["stats"]["accounting"]
    assert acc["records_read"] == 1500  # B.CSV.GZ and e.Csv are read as their lower-case suffixes are
    assert acc["errors_by_reason"] == {"unsupported_suffix": 3} and acc["records_lost"] > 0
    assert acc["files_skipped"] == {"hidden": 1, "not_regular": 0, "other_suffix": 1}
    assert acc["files_skipped_examples"] == {"hidden": [str(data / "_SUCCESS")], "other_suffix": [str(data / "README.md")]}


@pytest.mark.slow
def test_an_lc0_run_reads_upper_case_suffixes_and_prints_its_skipped_files(tmp_path, capsys):
    game = gzip_bytes(make_game_records(3, 5).tobytes())
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.gz").write_bytes(game)
    (data / "B.GZ").write_bytes(game)
    (data / "c.gz.xz").write_bytes(game)
    (data / "notes.txt").write_text("hi")
    config = tmp_path / "job.textproto"
    config.write_text(f'input: "{data}"\nseed: 1\nmax_error_fraction: 1\noutput {{ num_shards: 1 }}\n')
    assert cli.main(["run", "--config", str(config), "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 file(s): 1 other suffix (e.g. .../data/notes.txt)" in out
    acc = json.loads((tmp_path / "out" / ".manifest.json").read_text())["stats"]["accounting"]
    assert acc["chunks_indexed"] == 2 and acc["errors_by_reason"] == {"unsupported_suffix": 1}


@pytest.mark.parametrize("name, reads", [("y.gzip", ".gz, .tar"), ("z.tar.xz", ".tar"), ("x.zip", ".gz, .tar")])
def test_an_lc0_unsupported_suffix_names_only_the_suffixes_read_not_the_compressed_archives_refused(name, reads):
    """lc0 lists `.tar.gz` and `.tgz` only to refuse them (compressed_archive): a message saying what it reads
    leaves them out."""
    from shardmill.transforms.common.discovery import unsupported_data
    from shardmill.transforms.lc0.kind import LC0_INPUT_SUFFIXES

    assert f"which this job does not read (it reads {reads});" in unsupported_data(f"/in/{name}", LC0_INPUT_SUFFIXES)


def test_an_input_naming_no_file_where_the_step_runs_fails_the_step_naming_it(tmp_path):
    # The launcher found a file for this input; the host listing it (a runner's worker with its own disk) finds
    # none. Before, the job went on with no files and committed an empty output with exit 0.
    import apache_beam as beam

    from shardmill.core.errors import InputError
    from shardmill.pipelines.runner import local_runner
    from shardmill.transforms.common.discovery import DiscoverFiles

    there = tmp_path / "launchers-disk"
    there.mkdir()
    (there / "a.gz").write_bytes(gzip_bytes(make_game_records(6, 3)))
    gone = tmp_path / "not-on-this-host"
    options = beam.options.pipeline_options.PipelineOptions()
    with pytest.raises(Exception) as raised:
        with beam.Pipeline(runner=local_runner(options), options=options) as p:
            _ = p | DiscoverFiles([str(there), str(gone)], (".gz",))
    assert isinstance(raised.value, InputError) or "InputError" in str(raised.value)
    assert f"input {str(gone)!r}: names no file on the host running this step" in str(raised.value)
    assert "gs:// or s3://" in str(raised.value)
