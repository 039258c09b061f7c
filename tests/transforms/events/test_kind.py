"""The label kind's launcher side: its plan's shard count from the input's inflated rows."""

import bz2
import gzip

import pyarrow as pa
import pytest

from shardmill.pipelines.config import parse_config, validate
from shardmill.pipelines.jobs import kind_named
from shardmill.transforms.events import inflate, plan as labels_plan
from shardmill.transforms.events.formats import ASSUMED_INFLATION
from tests.support.local_files import local_open


def _rows(count: int, pad: int) -> bytes:
    """CSV rows of `pad` repeated bytes each: text that compresses about as far as pad says (~100x at 1000)."""
    return b"id,clicked,pad\n" + b"".join(b"%d,%d,%s\n" % (i, i % 50 == 0, b"pq" * (pad // 2)) for i in range(count))


def _compress(data: bytes, codec: str) -> bytes:
    if codec == "gzip":
        return gzip.compress(data, compresslevel=1)
    if codec == "bz2":
        return bz2.compress(data, compresslevel=1)  # 100 kB blocks: a head of a quarter holds whole ones
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, codec) as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


def _shards(tmp_path, name: str, files: dict[str, bytes]) -> int:
    folder = tmp_path / name
    folder.mkdir()
    for file, data in files.items():
        (folder / file).write_bytes(data)
    config = validate(parse_config(
        'input: "unused" label_sampling { label_column: "clicked" } output { target_shard_bytes: 1048576 }'))
    return kind_named("labels").plan(config, [str(folder)]).num_shards


@pytest.mark.parametrize("codec, suffix", [("gzip", ".gz"), ("zstd", ".zst")])
@pytest.mark.parametrize("head", ["whole", "a quarter"])
def test_a_highly_compressible_log_gets_as_many_shards_as_its_plain_twin(tmp_path, monkeypatch, codec, suffix,
                                                                        head):
    """A shard is sorted in memory: a log that inflates ~100x must not be sized by its bytes on disk times a
    typical ratio (8x put a 700 MB log in one shard). Measured whole (the file within the head read) and from a
    head of only part of it."""
    rows = _rows(8_000, 1000)  # 8 MB of rows
    packed = _compress(rows, codec)
    assert len(rows) / len(packed) > 50 and len(packed) < inflate.MEASURE_INPUT_BYTES
    if head == "a quarter":
        monkeypatch.setattr(inflate, "MEASURE_INPUT_BYTES", len(packed) // 4)
    plain = _shards(tmp_path, "plain", {"m.csv": rows})
    assert plain == -(-len(rows) // (1 << 20))
    assert abs(_shards(tmp_path, "packed", {f"m.csv{suffix}": packed}) - plain) <= 1


@pytest.mark.parametrize("codec, rows", [("gzip", _rows(8000, 1000)), ("zstd", _rows(8000, 1000)),
                                         ("bz2", _rows(300_000, 0))])  # (bz2 is slow on very repetitive text)
def test_a_heads_inflation_is_the_logs_exactly_when_whole_and_closely_from_a_part(codec, rows):
    """A part measures the log's start: off by how the stream starts (a first block without history) and what a
    block the head cuts held."""
    packed = _compress(rows, codec)
    assert inflate.inflation_of_head(packed, codec, whole=True) == len(rows) / len(packed)
    assert inflate.inflation_of_head(packed[: len(packed) // 4], codec, whole=False) == pytest.approx(
        len(rows) / len(packed), rel=0.2)
    assert inflate.inflation_of_head(b"id,clicked\n1,1\n", codec, whole=True) is None


def test_logs_beyond_the_measured_ones_take_their_codecs_largest_measured_ratio(tmp_path, monkeypatch):
    monkeypatch.setattr(labels_plan, "MEASURED_LOGS_PER_CODEC", 2)
    opened = []

    def opener(path):
        opened.append(path)
        return local_open(path)

    dense, sparse = _compress(_rows(2000, 1000), "gzip"), _compress(_rows(4000, 10), "gzip")
    files = {"a.csv.gz": dense, "b.csv.gz": sparse, "c.csv.gz": sparse[: len(sparse) // 2],
             "d.csv.zst": _compress(_rows(100, 10), "zstd"), "e.csv": b"id,clicked\n1,1\n"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    listed = [(str(tmp_path / name), len(data)) for name, data in files.items()]
    ratios = labels_plan.inflation_ratios(listed, opener)
    # The two largest gzip logs and the one zstd log are read, once each; the third gzip log takes the largest.
    assert sorted(opened) == [str(tmp_path / n) for n in ("a.csv.gz", "b.csv.gz", "d.csv.zst")]
    assert ratios[str(tmp_path / "a.csv.gz")] == pytest.approx(len(_rows(2000, 1000)) / len(dense))
    assert ratios[str(tmp_path / "b.csv.gz")] == pytest.approx(len(_rows(4000, 10)) / len(sparse))
    assert ratios[str(tmp_path / "c.csv.gz")] == ratios[str(tmp_path / "a.csv.gz")] > 50
    assert str(tmp_path / "e.csv") not in ratios


def test_a_log_that_cannot_be_measured_takes_the_assumed_ratio(tmp_path):
    (tmp_path / "x.csv.gz").write_bytes(b"id,clicked\n1,1\n" * 100)  # not gzip: the run dead-letters it
    listed = [(str(tmp_path / "x.csv.gz"), 1500), (str(tmp_path / "gone.csv.zst"), 10)]
    assert labels_plan.inflation_ratios(listed, local_open) == {
        str(tmp_path / "x.csv.gz"): ASSUMED_INFLATION, str(tmp_path / "gone.csv.zst"): ASSUMED_INFLATION}
    assert labels_plan.rows_bytes(listed + [("plain.csv", 7)], local_open) == (1500 + 10) * ASSUMED_INFLATION + 7


def test_measuring_a_bomb_inflates_a_bounded_amount(monkeypatch):
    monkeypatch.setattr(inflate, "MEASURE_OUTPUT_BYTES", 4 << 20)
    bomb = gzip.compress(b"\0" * (16 << 20), compresslevel=9)
    ratio = inflate.inflation_of_head(bomb, "gzip", whole=True)
    # Stopped after 4 MiB (the bytes it took to get there measure it), near deflate's 1032:1.
    assert 900 < ratio < 1100
