"""The label-sampling job kind: its config section's checks and its hooks (plan.py, graph.py, shards.py,
report.py)."""

from __future__ import annotations

import logging
import math

from shardmill.core.errors import EXIT_BAD_INVOCATION, ConfigError, ShardmillError
from shardmill.transforms.events.formats import EVENT_SUFFIXES, arrow_type
from shardmill.transforms.job import JobKind

_LOG = logging.getLogger(__name__)


class NoTargetsError(ShardmillError, ValueError):
    """An EXACT run whose input holds no target: it would keep ratio x 0 non-targets, an empty output."""

    exit_code = EXIT_BAD_INVOCATION


class LabelsKind(JobKind):
    name = "labels"
    package = "shardmill.transforms.events"
    config_field = "label_sampling"
    record_format = "events"
    description = "label-sample event logs (Parquet, CSV/TSV, JSON lines) into shuffled rows"
    input_suffixes = EVENT_SUFFIXES

    def validate(self, config) -> None:
        from shardmill.transforms.events.plan import label_mode

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
        from shardmill.transforms.events.plan import plan_labels

        return plan_labels(config, inputs)

    def transform(self, config, plan, paths):
        from shardmill.transforms.events.graph import LabelJob

        return LabelJob(plan, paths)

    def shard_format(self, config, plan):
        from shardmill.transforms.events.shards import EventShardFormat

        return EventShardFormat(plan.spec.ratio, plan.spec.mode)

    def describe(self, manifest):
        return f"events, label column {manifest['label_column']!r}"

    def check_outcome(self, config, manifest):
        """A run without targets: EXACT is refused (it would commit nothing but an empty output), the other
        modes commit with a warning (here and in the summary)."""
        from shardmill.transforms.events.report import no_targets

        problem = no_targets(manifest, tuple(config.label_sampling.target_values) or ("1",))
        if problem is None:
            return
        if manifest["stats"]["label_sampling"]["mode"] == "EXACT":
            raise NoTargetsError(f"label_sampling: {problem}: EXACT keeps ratio x targets = 0 non-targets, so there is "
                                 "nothing to commit (check label_column and target_values)")
        _LOG.warning("label_sampling: %s", problem)


KIND = LabelsKind()
