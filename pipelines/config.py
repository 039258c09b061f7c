"""Loading and validating the JobConfig (proto/shardmill_config.proto).

Configs are text-format protobuf files. Validation rejects bad values before
any pipeline is built, with a message that names the field: the shared
fields here, the job kind's own section by its JobKind.
"""

from __future__ import annotations

import math

from google.protobuf import text_format

from shardmill.proto import shardmill_config_pb2 as config_pb2
from shardmill.core.errors import ConfigError  # noqa: F401 (the commands' name for it)
from shardmill.transforms.output.shard_count import MAX_SHARDS

JobConfig = config_pb2.JobConfig
TokenSplit = config_pb2.TokenSplit

# Top-level fields of earlier versions, and what replaced them.
_MOVED_FIELDS = {"index": "lc0 settings go inside lc0 { index { ... } }",
                 "chunk_pool": "lc0 settings go inside lc0 { chunk_pool { ... } }",
                 "record_format": "the job section (lc0, label_sampling or token_dataset) says what the records are"}


def parse_config(text: str, source: str = "<config>") -> JobConfig:
    """Parses text-format JobConfig; raises ConfigError naming the source on syntax errors.

    Two job sections (say label_sampling and token_dataset) are refused here:
    they are members of one oneof.
    """
    config = JobConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as err:
        message = str(err).rstrip(".")
        for field, replaced_by in _MOVED_FIELDS.items():
            if f'no field named "{field}"' in message:
                message += f": {replaced_by}"
        raise ConfigError(f"{source}: {message}") from None
    return config


def load_config(path: str) -> JobConfig:
    """Reads and parses a text-format JobConfig file (not yet validated)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror}") from None
    return parse_config(text, path)


def validate(config: JobConfig) -> JobConfig:
    """Raises ConfigError for the first invalid field; returns the config."""
    from shardmill.pipelines.jobs import job_kind

    kind = job_kind(config)
    if kind.input_suffixes is not None and not config.input:
        raise ConfigError("input: at least one input pattern is required (config or --input)")
    for i, pattern in enumerate(config.input):
        if not pattern.strip():
            raise ConfigError(f"input[{i}]: empty pattern")
    out = config.output
    if out.num_shards > MAX_SHARDS:
        raise ConfigError(f"output.num_shards: must be <= {MAX_SHARDS}, got {out.num_shards}")
    if out.target_shard_bytes < 1 << 20:
        raise ConfigError(f"output.target_shard_bytes: must be >= 1 MiB, got {out.target_shard_bytes}")
    if not 1 <= out.row_group_bytes <= 1 << 30:
        raise ConfigError(f"output.row_group_bytes: must be in 1..2^30, got {out.row_group_bytes}")
    if not 1 <= out.zstd_level <= 22:
        raise ConfigError(f"output.zstd_level: must be in 1..22, got {out.zstd_level}")
    if out.HasField("zstd_level") and out.codec != config_pb2.ZSTD:
        raise ConfigError(f"output.zstd_level: applies to codec ZSTD only; codec is "
                          f"{config_pb2.ShardCodec.Name(out.codec)}")
    if out.shuffle_memory_bytes > 1 << 50:
        raise ConfigError(f"output.shuffle_memory_bytes: must be in 0..2^50, got {out.shuffle_memory_bytes}")
    if not 1 <= out.keep_generations <= 100:
        raise ConfigError(f"output.keep_generations: must be in 1..100, got {out.keep_generations}")
    fraction = config.max_error_fraction
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ConfigError(f"max_error_fraction: must be in [0, 1], got {fraction}")
    kind.validate(config)
    return config
