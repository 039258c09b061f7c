"""The label-sampling job kind: its config section, plan, shards, summary and plots."""

from __future__ import annotations

import difflib
import logging
import math

from shardmill.transforms.events.formats import (ASSUMED_INFLATION, EVENT_SUFFIXES, arrow_type, compression_of,
                                                 format_of)
from shardmill.transforms.job import ConfigError, JobKind

_LOG = logging.getLogger(__name__)

# What makes a label output smaller, for a plan refused for its size.
WRITE_LESS = "lower label_sampling.ratio"
# Columns named in a message about a file's header (wide logs have tens of thousands).
SHOWN_COLUMNS = 30


class NoTargetsError(ValueError):
    """An EXACT run whose input holds no target: it would keep ratio x 0 non-targets, an empty output."""


def _shown(names: list[str]) -> str:
    return ", ".join(names[:SHOWN_COLUMNS]) + (f", ... ({len(names):,} columns)" if len(names) > SHOWN_COLUMNS else "")


def check_label_in_files(files: list[str], inputs: list[str], options) -> None:
    """check_label_column, saying so when the label is only a hive folder key: folders never supply the label.

    A folder's value is one per file, so a label from folders makes every file all targets or all
    non-targets, which the one-pass modes (sampling each file on its own) can't hold a ratio over."""
    from shardmill.transforms.events.job import check_label_column
    from shardmill.transforms.events.partitions import common_root, relative_name
    from shardmill.transforms.events.readers import hive_values

    try:
        check_label_column(files, options)
    except ConfigError:
        root = common_root(inputs)
        label = options.label_column
        folder = next((path for path in files if label in dict(hive_values(relative_name(path, root)))), None)
        if folder is None:
            raise
        raise ConfigError(f"label_sampling.label_column: no input file has a column {label!r}, only hive folders "
                          f"{label}=... ({folder}): the label must be a column of the files, folders can't supply "
                          "it") from None


def check_column_types(files: list[str], options, opener=None) -> None:
    """ConfigError when a column_types key names no column of any CSV/TSV input file (their header rows, up to
    MAX_PROBED_FILES readable files, read until every key is found).

    Arrow ignores a declared type whose column a file lacks: a misspelt key would leave its column inferred
    unseen (and a file inferring another type is left out as a schema conflict, found after the run). A key
    that some files have is fine (columns come and go). With column_names, validate checks the keys."""
    import pyarrow as pa

    from shardmill.transforms.events.job import MAX_PROBED_FILES
    from shardmill.transforms.events.readers import column_names

    if not options.column_types or options.column_names:
        return
    missing = [name for name, _ in options.column_types]
    text_files = [path for path in files if format_of(path) in ("csv", "tsv")]
    if not text_files:
        raise ConfigError(f"label_sampling.column_types: declares column types of CSV/TSV files ({missing[0]!r}, ...), "
                          "but no input file is CSV/TSV (Parquet and JSON lines carry their own types)")
    found: dict[str, None] = {}
    probed = 0
    for path in text_files:
        try:
            names = column_names(path, options, opener)
        except (OSError, ValueError, pa.ArrowException):
            continue  # the run dead-letters it
        found.update(dict.fromkeys(names))
        missing = [name for name in missing if name not in found]
        probed += 1
        if not missing or probed >= MAX_PROBED_FILES:
            break
    if missing and probed:
        which = "any CSV/TSV input file" if probed < MAX_PROBED_FILES else f"the first {probed:,} CSV/TSV input files"
        close = difflib.get_close_matches(missing[0], list(found), n=1)
        raise ConfigError(f"label_sampling.column_types: no column {missing[0]!r} in {which}"
                          + (f" (did you mean {close[0]!r}?)" if close else "")
                          + f"; columns found: {_shown(list(found))}")


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


# Compressed logs of one codec whose inflation the launcher measures, the largest first: the others take the
# largest ratio measured for their codec, so a launcher listing 10^5 logs still reads a few MiB.
MEASURED_LOGS_PER_CODEC = 32


def _measured_inflation(path: str, size: int, codec: str, opener) -> float | None:
    """Inflated bytes per byte of one compressed log, from its head (one read); None when it can't be read."""
    from shardmill.transforms.events.inflate import MEASURE_INPUT_BYTES, inflation_of_head

    try:
        with opener(path) as f:
            head = f.read(MEASURE_INPUT_BYTES)
        return inflation_of_head(head, codec, whole=len(head) < MEASURE_INPUT_BYTES or len(head) == size)
    except Exception:  # noqa: BLE001  (untrusted input: an unreadable log is the run's dead letter, not the plan's)
        return None


def inflation_ratios(files: list[tuple[str, int]], opener=None) -> dict[str, float]:
    """Inflated bytes per byte on disk of each compressed log (path -> ratio): measured on the
    MEASURED_LOGS_PER_CODEC largest of each codec; the others, and those that can't be read, take the largest
    ratio measured for their codec, or ASSUMED_INFLATION when none could be."""
    from shardmill.transforms.common.filesystem import default_opener

    by_codec: dict[str, list[tuple[str, int]]] = {}
    for path, size in files:
        codec = compression_of(path)
        if codec:
            by_codec.setdefault(codec, []).append((path, size))
    ratios = {}
    for codec, logs in sorted(by_codec.items()):
        largest = sorted(logs, key=lambda log: (-log[1], log[0]))[:MEASURED_LOGS_PER_CODEC]
        measured = {path: _measured_inflation(path, size, codec, opener or default_opener) for path, size in largest}
        measured = {path: ratio for path, ratio in measured.items() if ratio is not None}
        fallback = max(measured.values(), default=ASSUMED_INFLATION)
        _LOG.info("%s logs inflate up to %.1fx (measured on %d of %d; %s for the others)", codec, fallback,
                  len(measured), len(logs), "the largest ratio" if measured else "assumed")
        ratios.update({path: measured.get(path, fallback) for path, _ in logs})
    return ratios


def rows_bytes(files: list[tuple[str, int]], opener=None) -> int:
    """The size the input's rows take once read: a compressed log's bytes on disk times its measured inflation
    (a shard is sorted in memory, so a log sized by its compressed bytes, or by a typical ratio it exceeds,
    would overfill one)."""
    ratios = inflation_ratios(files, opener)
    return math.ceil(sum(size * ratios.get(path, 1) for path, size in files))


class LabelsKind(JobKind):
    name = "labels"
    package = "shardmill.transforms.events"
    config_field = "label_sampling"
    record_format = "events"
    description = "label-sample event logs (Parquet, CSV/TSV, JSON lines) into shuffled rows"
    input_suffixes = EVENT_SUFFIXES

    def validate(self, config) -> None:
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
        from shardmill.transforms.events.job import LabelPlan, check_partition_by, input_files
        from shardmill.transforms.output.shard_count import ShardSizing, shard_count

        files = input_files(inputs)
        spec = label_spec(config)
        check_label_in_files([path for path, _ in files], inputs, spec.options)
        check_column_types([path for path, _ in files], spec.options)
        check_partition_by([path for path, _ in files], inputs, spec.partition_by)
        input_bytes = sum(size for _, size in files)
        num_shards = shard_count(rows_bytes(files), ShardSizing.of(config.output), WRITE_LESS)
        return LabelPlan(spec, tuple(inputs), num_shards, input_bytes)

    def transform(self, config, plan, paths):
        from shardmill.transforms.events.job import LabelJob

        return LabelJob(plan, paths)

    def shard_format(self, config, plan):
        from shardmill.transforms.events.shards import EventShardFormat

        return EventShardFormat(plan.spec.ratio, plan.spec.mode)

    def describe(self, manifest):
        return f"events, label column {manifest['label_column']!r}"

    def check_outcome(self, config, manifest):
        """A run without targets: EXACT is refused (it would commit nothing but an empty output), the other
        modes commit with a warning (here and in the summary)."""
        from shardmill.transforms.events.summary import no_targets

        problem = no_targets(manifest, tuple(config.label_sampling.target_values) or ("1",))
        if problem is None:
            return
        if manifest["stats"]["label_sampling"]["mode"] == "EXACT":
            raise NoTargetsError(f"label_sampling: {problem}: EXACT keeps ratio x targets = 0 non-targets, so there is "
                                 "nothing to commit (check label_column and target_values)")
        _LOG.warning("label_sampling: %s", problem)


KIND = LabelsKind()
