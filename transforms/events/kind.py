"""The label-sampling job kind: its config section, plan, shards, summary and plots."""

from __future__ import annotations

import math

from shardmill.transforms.events.formats import EVENT_SUFFIXES, arrow_type
from shardmill.transforms.job import JobKind

# What makes a label output smaller, for a plan refused for its size.
WRITE_LESS = "lower label_sampling.ratio"


def label_mode(labels_config) -> str:
    """The sampling mode's name (unset: ADAPTIVE)."""
    from shardmill.proto import shardmill_config_pb2 as config_pb2

    mode = labels_config.mode
    return "ADAPTIVE" if mode == config_pb2.LABEL_SAMPLING_MODE_UNSPECIFIED else config_pb2.LabelSamplingMode.Name(mode)


def label_spec(config):
    """The label-sampling settings as the workers take them."""
    from shardmill.transforms.events.formats import EventReadOptions
    from shardmill.transforms.events.job import LabelSpec

    labels = config.label_sampling
    options = EventReadOptions(labels.label_column, tuple(labels.target_values) or ("1",),
                               tuple(labels.column_names), tuple(sorted(labels.column_types.items())),
                               labels.hive_partitioning)
    return LabelSpec(options, labels.ratio, label_mode(labels), config.seed, labels.max_partition_bytes,
                     tuple(labels.partition_by))


class LabelsKind(JobKind):
    name = "labels"
    package = "shardmill.transforms.events"
    config_field = "label_sampling"
    record_format = "events"
    description = "label-sample event logs (Parquet, CSV/TSV, JSON lines) into shuffled rows"
    input_suffixes = EVENT_SUFFIXES

    def validate(self, config) -> None:
        from shardmill.pipelines.config import ConfigError

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
        keys = list(labels.partition_by)
        if keys:
            if len(set(keys)) != len(keys) or "" in keys:
                raise ConfigError(f"label_sampling.partition_by: must be distinct and non-empty, got {keys}")
            if not labels.hive_partitioning:
                raise ConfigError("label_sampling.partition_by: names hive keys, so it needs hive_partitioning: true")
            if label_mode(labels) not in ("EXACT", "TWO_PASS"):
                raise ConfigError(f"label_sampling.partition_by: holds the ratio per group in modes EXACT and "
                                  f"TWO_PASS; mode {label_mode(labels)} holds it per file")

    def plan(self, config, inputs, local_run=True):
        from shardmill.transforms.events.job import LabelPlan, check_label_column, check_partition_by, input_files
        from shardmill.transforms.output.shard_count import ShardSizing, shard_count

        files = input_files(inputs)
        spec = label_spec(config)
        check_label_column([path for path, _ in files], spec.options)
        check_partition_by([path for path, _ in files], inputs, spec.partition_by)
        input_bytes = sum(size for _, size in files)
        num_shards = shard_count(input_bytes, ShardSizing.of(config.output), WRITE_LESS)
        return LabelPlan(spec, tuple(inputs), num_shards, input_bytes)

    def transform(self, config, plan, paths):
        from shardmill.transforms.events.job import LabelJob

        return LabelJob(plan, paths)

    def shard_format(self, config, plan):
        from shardmill.transforms.events.shards import EventShardFormat

        return EventShardFormat(plan.spec.ratio, plan.spec.mode)

    def describe(self, manifest):
        return f"events, label column {manifest['label_column']!r}"


KIND = LabelsKind()
