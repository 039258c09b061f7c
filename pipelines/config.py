"""Loading and validating the JobConfig (proto/shardmill_config.proto).

Configs are text-format protobuf files. Validation rejects bad values before
any pipeline is built, with a message that names the field.
"""

from __future__ import annotations

import math

from google.protobuf import text_format

from shardmill.proto import shardmill_config_pb2 as config_pb2

JobConfig = config_pb2.JobConfig

COUNT_METHOD_NAMES = {
    config_pb2.COUNT_METHOD_UNSPECIFIED: "scan",
    config_pb2.TRAILER: "trailer",
    config_pb2.SCAN: "scan",
    config_pb2.DECOMPRESS: "decompress",
}


class ConfigError(ValueError):
    """An invalid job configuration; the message names the file and/or field."""


def parse_config(text: str, source: str = "<config>") -> JobConfig:
    """Parses text-format JobConfig; raises ConfigError naming the source on syntax errors."""
    config = JobConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as err:
        raise ConfigError(f"{source}: {err}") from None
    return config


def load_config(path: str) -> JobConfig:
    """Reads and parses a text-format JobConfig file (not yet validated)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"cannot read config {path}: {err.strerror}") from None
    return parse_config(text, path)


def validate(config: JobConfig, require_input: bool = True) -> JobConfig:
    """Raises ConfigError for the first invalid field; returns the config."""
    if require_input and not config.input:
        raise ConfigError("input: at least one input pattern is required (config or --input)")
    for i, pattern in enumerate(config.input):
        if not pattern.strip():
            raise ConfigError(f"input[{i}]: empty pattern")
    version = config.index.lc0_version
    if version and version not in (3, 4, 5, 6, 7):
        raise ConfigError(f"index.lc0_version: {version} is not an lc0 version (3..7, or 0 for any)")
    pool = config.chunk_pool
    if pool.HasField("chunk_pool_size") and pool.chunk_pool_size < 1:
        raise ConfigError("chunk_pool.chunk_pool_size: must be >= 1 when set")
    if pool.HasField("hanse_sampling_threshold") and pool.hanse_sampling_threshold < 1:
        raise ConfigError("chunk_pool.hanse_sampling_threshold: must be >= 1 when set")
    gamma = pool.hanse_sampling_gamma
    if not math.isfinite(gamma) or gamma < 0:
        raise ConfigError(f"chunk_pool.hanse_sampling_gamma: must be finite and >= 0, got {gamma}")
    return config


def count_method(config: JobConfig) -> str:
    """The index count method as the kernel's name for it."""
    return COUNT_METHOD_NAMES[config.index.count_method]
