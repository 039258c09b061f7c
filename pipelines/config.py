"""Loading and validating the JobConfig (proto/shardmill_config.proto).

Configs are text-format protobuf files. Validation rejects bad values before
any pipeline is built, with a message that names the field.
"""

from __future__ import annotations

import math

from google.protobuf import text_format

from shardmill.proto import shardmill_config_pb2 as config_pb2
from shardmill.transforms.event_sources import arrow_type

JobConfig = config_pb2.JobConfig
TokenSplit = config_pb2.TokenSplit

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
    if config.HasField("token_dataset"):
        tokens = config.token_dataset
        if bool(tokens.path_prefix) == bool(tokens.blend):
            raise ConfigError("token_dataset: exactly one of path_prefix (one corpus) and blend (corpora with "
                              "weights) is required")
        for i, corpus in enumerate(tokens.blend):
            if not corpus.path_prefix:
                raise ConfigError(f"token_dataset.blend[{i}].path_prefix: required")
            if not (math.isfinite(corpus.weight) and corpus.weight > 0):
                raise ConfigError(f"token_dataset.blend[{i}].weight: must be finite and > 0, got {corpus.weight}")
        if tokens.blend and not tokens.HasField("num_samples"):
            raise ConfigError("token_dataset.num_samples: required with a blend (Megatron blends by weight only "
                              "for a requested size)")
        if tokens.HasField("split"):
            from shardmill.transforms.megatron_blend import SplitError, parse_split, split_matrix

            try:
                bookends = split_matrix(parse_split(tokens.split))
            except SplitError as err:
                raise ConfigError(f"token_dataset.split: {err}") from None
            if bookends[tokens.use_split] is None:
                raise ConfigError(f"token_dataset.use_split: the {TokenSplit.Name(tokens.use_split)} split of "
                                  f"{tokens.split!r} is empty")
        if tokens.seq_length < 2:
            raise ConfigError(f"token_dataset.seq_length: must be >= 2, got {tokens.seq_length}")
        if tokens.HasField("num_samples") and tokens.num_samples < 1:
            raise ConfigError("token_dataset.num_samples: must be >= 1 when set")
        if tokens.HasField("hanse_sampling_threshold") and tokens.hanse_sampling_threshold < 1:
            raise ConfigError("token_dataset.hanse_sampling_threshold: must be >= 1 when set")
        if not (math.isfinite(tokens.hanse_sampling_gamma) and tokens.hanse_sampling_gamma >= 0):
            raise ConfigError("token_dataset.hanse_sampling_gamma: must be finite and >= 0")
        require_input = False
    if require_input and not config.input:
        raise ConfigError("input: at least one input pattern is required (config or --input)")
    for i, pattern in enumerate(config.input):
        if not pattern.strip():
            raise ConfigError(f"input[{i}]: empty pattern")
    if not 1 << 20 <= config.index.max_chunk_bytes <= 1 << 32:
        raise ConfigError(f"index.max_chunk_bytes: must be in 1 MiB..4 GiB, got {config.index.max_chunk_bytes}")
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
    if not 1 <= pool.passes <= 1_000_000:
        raise ConfigError(f"chunk_pool.passes: must be in 1..1000000, got {pool.passes}")
    if pool.HasField("position_count") and not 1 <= pool.position_count <= 1_000_000:
        raise ConfigError(f"chunk_pool.position_count: must be in 1..1000000 when set, got {pool.position_count}")
    out = config.output
    if out.num_shards > 100_000:
        raise ConfigError(f"output.num_shards: must be <= 100000, got {out.num_shards}")
    if out.target_shard_bytes < 1 << 20:
        raise ConfigError(f"output.target_shard_bytes: must be >= 1 MiB, got {out.target_shard_bytes}")
    if not 1 <= out.row_group_bytes <= 1 << 30:
        raise ConfigError(f"output.row_group_bytes: must be in 1..2^30, got {out.row_group_bytes}")
    if not 1 <= out.zstd_level <= 22:
        raise ConfigError(f"output.zstd_level: must be in 1..22, got {out.zstd_level}")
    fraction = config.max_error_fraction
    if not (math.isfinite(fraction) and 0 <= fraction <= 1):
        raise ConfigError(f"max_error_fraction: must be in [0, 1], got {fraction}")
    if config.HasField("label_sampling"):
        labels = config.label_sampling
        if not labels.label_column:
            raise ConfigError("label_sampling.label_column: required")
        if not (math.isfinite(labels.ratio) and labels.ratio > 0):
            raise ConfigError(f"label_sampling.ratio: must be a finite number > 0, got {labels.ratio}")
        if labels.max_partition_bytes < 1:
            raise ConfigError("label_sampling.max_partition_bytes: must be >= 1")
        names = list(labels.column_names)
        if len(set(names)) != len(names) or "" in names:
            raise ConfigError(f"label_sampling.column_names: must be distinct and non-empty, got {names}")
        if names and labels.label_column not in names:
            raise ConfigError(f"label_sampling.column_names: has no label column {labels.label_column!r}")
        for column, alias in labels.column_types.items():
            if names and column not in names:
                raise ConfigError(f"label_sampling.column_types: {column!r} is not in column_names")
            try:
                arrow_type(alias)
            except ValueError as err:
                raise ConfigError(f"label_sampling.column_types[{column!r}]: {err}") from None
    return config


LABEL_MODE_NAMES = {
    config_pb2.LABEL_SAMPLING_MODE_UNSPECIFIED: "ADAPTIVE",
    config_pb2.ITERATIVE: "ITERATIVE",
    config_pb2.ADAPTIVE: "ADAPTIVE",
    config_pb2.EXACT: "EXACT",
    config_pb2.TWO_PASS: "TWO_PASS",
}


def sampling_params(config: JobConfig):
    """The chunk-sampling kernel's parameters from a validated config."""
    from shardmill.transforms.chunk_sampling import SamplingParams

    pool = config.chunk_pool
    return SamplingParams(
        seed=config.seed,
        passes=pool.passes,
        position_count=pool.position_count,
        threshold=pool.hanse_sampling_threshold,
        gamma=pool.hanse_sampling_gamma if pool.HasField("hanse_sampling_threshold") else 1.0,
        pool_size=pool.chunk_pool_size,
    )


def count_method(config: JobConfig) -> str:
    """The index count method as the kernel's name for it."""
    return COUNT_METHOD_NAMES[config.index.count_method]
