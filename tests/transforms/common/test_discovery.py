"""Discovery over overlapping inputs: each file read once and each skipped file counted once, whatever the
input patterns and their order."""

import json

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
