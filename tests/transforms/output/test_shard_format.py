"""The shard writer's codecs: each config codec becomes its Parquet codec, is recorded in the manifest, and every
reader (shardmill's, pyarrow, polars, DuckDB) reads it; zstd level 1 stays the default, byte for byte."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardmill.core.output_contract import MANIFEST_NAME
from shardmill.native_ext import OrderOptions, ShardReader, load_manifest
from shardmill.pipelines import cli
from shardmill.pipelines.config import parse_config
from shardmill.transforms.output.manifest import describe_compression
from shardmill.transforms.output.shard_format import ShardCompression, encode_shard, write_shard_file
from tests.pipelines.test_job_contract import write_inputs

# The config's codec, the manifest's entry, and the codec Parquet's own metadata names (as DuckDB reports it).
CODECS = [
    ("ZSTD", {"codec": "zstd", "level": 1}, "ZSTD"),
    ("LZ4_RAW", {"codec": "lz4_raw"}, "LZ4_RAW"),
    ("SNAPPY", {"codec": "snappy"}, "SNAPPY"),
    ("UNCOMPRESSED", {"codec": "uncompressed"}, "UNCOMPRESSED"),
]


def _table(n=5000):
    rng = np.random.default_rng(3)
    frames = np.repeat(rng.integers(0, 4, (n, 1), dtype=np.uint8), 64, axis=1)
    return pa.table({"frame": pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), n, [None, pa.py_buffer(frames)]),
                     "id": np.arange(n), "source": [f"s{i % 7}" for i in range(n)]})


def _parquet_codecs(path) -> set[str]:
    duckdb = pytest.importorskip("duckdb")
    return {c for (c,) in duckdb.sql(f"select distinct compression from parquet_metadata('{path}')").fetchall()}


def test_every_config_codec_has_its_parquet_codec():
    from shardmill.proto import shardmill_config_pb2 as config_pb2
    from shardmill.transforms.output.shard_format import PYARROW_CODECS

    assert [name.lower() for name in config_pb2.ShardCodec.keys()] == list(PYARROW_CODECS)
    assert [name for name, _, _ in CODECS] == config_pb2.ShardCodec.keys()


@pytest.mark.parametrize("name, entry, parquet_codec", CODECS)
def test_each_config_codec_is_written_as_its_parquet_codec_and_reads_back(name, entry, parquet_codec, tmp_path):
    compression = ShardCompression.of(parse_config(f"output {{ codec: {name} }}").output)
    assert compression.manifest_entry() == entry
    table = _table()
    written = write_shard_file(str(tmp_path / "s.parquet"), "s.parquet", table, 1000, compression)
    # LZ4_RAW, never the deprecated Hadoop-framed LZ4 (pyarrow's own metadata calls both "LZ4").
    assert _parquet_codecs(tmp_path / "s.parquet") == {parquet_codec}
    assert written["row_groups"] == [1000] * 5
    assert pq.read_table(tmp_path / "s.parquet").replace_schema_metadata(None).equals(table)


def test_the_default_compression_is_zstd_level_1_with_the_bytes_it_always_wrote():
    config = parse_config("")
    assert ShardCompression.of(config.output) == ShardCompression() == ShardCompression("zstd", 1)
    table = _table()
    data = encode_shard(table, 1000, ShardCompression(), use_dictionary=["source"])
    # What the writer encoded before the codec was a choice: zstd at the config's level.
    sink = pa.BufferOutputStream()
    pq.write_table(pq.read_table(pa.BufferReader(data)), sink, row_group_size=1000, compression="zstd",
                   compression_level=1, use_dictionary=["source"])
    assert data.to_pybytes() == sink.getvalue().to_pybytes()
    level = ShardCompression.of(parse_config("output { zstd_level: 7 }").output)
    assert level == ShardCompression("zstd", 7) and level.write_options() == {"compression": "zstd",
                                                                              "compression_level": 7}


@pytest.mark.parametrize("codec, level, message", [
    ("lz4", None, "codec 'lz4': one of zstd, lz4_raw, snappy, uncompressed"),
    ("snappy", 3, "codec 'snappy': a level goes with zstd"),
    ("zstd", None, "codec 'zstd': a level goes with zstd, and zstd needs one"),
])
def test_a_codec_parquet_does_not_name_or_a_level_without_zstd_is_refused(codec, level, message):
    with pytest.raises(ValueError, match=message):
        ShardCompression(codec, level)


def test_inspect_describes_the_recorded_codec_and_an_older_manifest_without_one():
    assert describe_compression({"compression": {"codec": "zstd", "level": 3}}) == "zstd level 3"
    assert describe_compression({"compression": {"codec": "lz4_raw"}}) == "lz4_raw"
    assert describe_compression({}) == "zstd (level not recorded)"


def _run(directory, name, text, codec, capsys, tag=""):
    out = directory / f"out-{name}-{codec}{tag}"
    config = directory / f"{name}-{codec}{tag}.textproto"
    config.write_text(text + f'\noutput {{ path: "{out}" num_shards: 2 codec: {codec} }}\n')
    assert cli.main(["run", "--config", str(config)]) == 0, capsys.readouterr().err
    return out


def _rows(values) -> list:
    """Each row as bytes (fixed-width columns, which the reader serves as numpy rows) or as Python (the rest)."""
    if isinstance(values, pa.Array) and pa.types.is_integer(values.type):
        values = values.to_numpy()
    if isinstance(values, np.ndarray):
        return [row.tobytes() for row in values.reshape(len(values), -1)]
    return values.to_pylist()


def _check_every_reader_reads(out, parquet_codec, columns):
    """pyarrow, ShardReader (native and Arrow columns), polars and DuckDB read the same rows."""
    duckdb = pytest.importorskip("duckdb")
    polars = pytest.importorskip("polars")
    manifest = load_manifest(str(out), verify_checksums=True)
    expected = pa.concat_tables(pq.read_table(out / s["path"]) for s in manifest["shards"]).combine_chunks()
    assert expected.num_rows == sum(s["rows"] for s in manifest["shards"]) > 0
    for shard in manifest["shards"]:
        assert _parquet_codecs(out / shard["path"]) == {parquet_codec}
    with ShardReader(str(out), batch_size=97, columns=columns, order_options=OrderOptions(seed=4)) as reader:
        seen = 0
        for batch in reader:
            rows = pa.array(batch["record_index"])
            for column in columns:
                assert _rows(batch[column]) == _rows(expected.column(column).take(rows).combine_chunks()), column
            seen += len(batch["record_index"])
    assert seen == expected.num_rows
    assert polars.read_parquet(f"{out}/*.parquet").to_arrow().cast(expected.schema).equals(expected)
    assert duckdb.sql(f"select count(*) from read_parquet('{out}/*.parquet')").fetchall() == [(expected.num_rows,)]
    return manifest


@pytest.fixture(scope="module")
def kind_inputs(lc0_dataset, tmp_path_factory):
    directory = tmp_path_factory.mktemp("codecs")
    return directory, write_inputs(directory, lc0_dataset[0])


# Served columns per kind: lc0's fixed-width frames through the native path, the labels' strings (url) and the
# tokens' lists through the reader's Arrow columns.
KIND_COLUMNS = {"lc0": ["frame", "position"], "labels": ["id", "url"], "tokens": ["tokens"]}


@pytest.mark.slow
@pytest.mark.parametrize("name, codec, entry, parquet_codec",
                         [("lc0", *c) for c in CODECS] + [("labels", *CODECS[1]), ("labels", *CODECS[2]),
                                                          ("tokens", *CODECS[3]), ("tokens", *CODECS[1])])
def test_every_kind_writes_the_configured_codec_and_every_reader_reads_it(name, codec, entry, parquet_codec,
                                                                          kind_inputs, capsys):
    directory, texts = kind_inputs
    out = _run(directory, name, texts[name], codec, capsys)
    manifest = _check_every_reader_reads(out, parquet_codec, KIND_COLUMNS[name])
    assert manifest["compression"] == entry
    capsys.readouterr()
    assert cli.main(["inspect", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(", " + describe_compression(manifest))


@pytest.mark.slow
def test_an_output_whose_manifest_predates_the_codec_is_read_and_inspected(kind_inputs, capsys):
    directory, texts = kind_inputs
    out = _run(directory, "lc0", texts["lc0"], "ZSTD", capsys, tag="-older")
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    del manifest["compression"]
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert "compression" not in _check_every_reader_reads(out, "ZSTD", KIND_COLUMNS["lc0"])
    capsys.readouterr()
    assert cli.main(["inspect", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(", zstd (level not recorded)")
