"""The JobConfig schema: text-format parsing, defaults, validation naming the field."""

import pytest

from shardmill.pipelines.config import ConfigError, load_config, parse_config, validate
from shardmill.transforms.lc0.plan import count_method


def test_defaults_of_an_empty_config():
    config = parse_config("")
    assert config.seed == 0
    assert config.lc0.chunk_pool.hanse_sampling_gamma == 1.0
    assert not config.lc0.chunk_pool.HasField("hanse_sampling_threshold")
    assert not config.lc0.chunk_pool.HasField("chunk_pool_size")
    assert count_method(config.lc0) == "scan"


def test_full_config_round_trips_from_a_file(tmp_path):
    path = tmp_path / "job.textproto"
    path.write_text(
        """
        input: "data/*.tar"
        input: "gs://bucket/more/"
        seed: 42
        lc0 {
          index { count_method: DECOMPRESS lc0_version: 6 }
          chunk_pool { chunk_pool_size: 500000 hanse_sampling_threshold: 150 hanse_sampling_gamma: 0.5 }
        }
        """
    )
    config = validate(load_config(str(path)))
    assert list(config.input) == ["data/*.tar", "gs://bucket/more/"]
    assert config.seed == 42 and count_method(config.lc0) == "decompress"
    assert config.lc0.chunk_pool.hanse_sampling_threshold == 150
    assert config.lc0.chunk_pool.hanse_sampling_gamma == 0.5
    assert config.lc0.chunk_pool.chunk_pool_size == 500000


def test_syntax_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.textproto"
    path.write_text('input: "x"\nlc0 { chunk_pool { no_such_field: 3 } }\n')
    with pytest.raises(ConfigError, match=r"bad\.textproto.*2.*no_such_field"):
        load_config(str(path))


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(str(tmp_path / "nope.textproto"))


@pytest.mark.parametrize(
    "text,field",
    [
        ("", "input"),
        ('input: "  "', r"input\[0\]"),
        ('input: "x" lc0 { index { lc0_version: 9 } }', "index.lc0_version"),
        ('input: "x" lc0 { chunk_pool { chunk_pool_size: 0 } }', "chunk_pool.chunk_pool_size"),
        ('input: "x" lc0 { chunk_pool { hanse_sampling_threshold: 0 } }', "chunk_pool.hanse_sampling_threshold"),
        ('input: "x" lc0 { chunk_pool { hanse_sampling_gamma: -1 } }', "chunk_pool.hanse_sampling_gamma"),
        ('input: "x" lc0 { chunk_pool { hanse_sampling_gamma: inf } }', "chunk_pool.hanse_sampling_gamma"),
        ('input: "x" lc0 { chunk_pool { hanse_sampling_gamma: nan } }', "chunk_pool.hanse_sampling_gamma"),
        ('input: "x" lc0 { index { cache_max_age_days: 0 } }', "index.cache_max_age_days"),
        ('input: "x" lc0 { index { cache: "ftp://host/cache" } }', "index.cache"),
        ('input: "x" output { codec: LZ4_RAW zstd_level: 3 }', "output.zstd_level: applies to codec ZSTD only"),
        ('input: "x" output { shuffle_memory_bytes: 2000000000000000 }', "output.shuffle_memory_bytes"),
    ],
)
def test_invalid_values_are_rejected_naming_the_field(text, field):
    with pytest.raises(ConfigError, match=field):
        validate(parse_config(text))


def test_gamma_zero_is_valid():
    validate(parse_config('input: "x" lc0 { chunk_pool { hanse_sampling_threshold: 10 hanse_sampling_gamma: 0 } }'))


def test_every_codec_and_a_zero_shuffle_budget_are_valid():
    for codec in ("ZSTD", "LZ4_RAW", "SNAPPY", "UNCOMPRESSED"):
        validate(parse_config(f'input: "x" output {{ codec: {codec} shuffle_memory_bytes: 0 }}'))
    validate(parse_config('input: "x" output { codec: ZSTD zstd_level: 9 }'))
