"""The label job's plan, made on the launcher before the output is touched: the settings the workers take
(LabelSpec), the checks that read only the input files' heads (a label column no file has, column_types or
partition_by keys naming nothing), and the shard count, from the rows' size once inflated.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math

import pyarrow as pa

from shardmill.core.errors import ConfigError
from shardmill.proto import shardmill_config_pb2 as config_pb2
from shardmill.transforms.common.discovery import list_input
from shardmill.transforms.common.filesystem import default_opener
from shardmill.transforms.events.formats import (ASSUMED_INFLATION, EVENT_SUFFIXES, EventReadOptions, compression_of,
                                                 format_of)
from shardmill.transforms.events.inflate import MEASURE_INPUT_BYTES, inflation_of_head
from shardmill.transforms.events.partitions import EventRange, common_root, relative_name
from shardmill.transforms.events.readers import HIVE_NULL, column_names, hive_values, read_events, scan_events
from shardmill.transforms.output.shard_count import ShardSizing, shard_count

_LOG = logging.getLogger(__name__)

# What makes a label output smaller, for a plan refused for its size.
WRITE_LESS = "lower label_sampling.ratio"
# Columns named in a message about a file's header (wide logs have tens of thousands).
SHOWN_COLUMNS = 30


@dataclasses.dataclass(frozen=True)
class LabelSpec:
    """The label-sampling settings as plain values (protos don't pickle to workers)."""

    options: EventReadOptions
    ratio: float
    mode: str
    seed: int
    max_partition_bytes: int
    partition_by: tuple[str, ...] = ()  # hive keys grouping the input for EXACT / TWO_PASS

    def group(self, part: EventRange) -> str:
        """The group whose ratio a range's rows count toward: its values of the partition_by keys ("": all)."""
        if not self.partition_by:
            return ""
        values = dict(hive_values(part.relative))
        return "/".join(f"{key}={HIVE_NULL if values.get(key) is None else values[key]}" for key in self.partition_by)

    @property
    def label_column(self) -> str:
        return self.options.label_column

    def read(self, part: EventRange, labels_only: bool = False):
        return read_events(part, self.options, labels_only=labels_only)

    def scan(self, part: EventRange):
        """The partition whole, or a compressed log's first pass (its mask; event_blocks reads its rows)."""
        return scan_events(part, self.options)


@dataclasses.dataclass(frozen=True)
class LabelPlan:
    """What the launcher decided: the settings, the inputs and the shard count."""

    spec: LabelSpec
    inputs: tuple[str, ...]
    num_shards: int
    input_bytes: int = 0  # of every event file the inputs name (progress: the sample stage's total)


def input_files(inputs: list[str]) -> list[tuple[str, int]]:
    """(path, bytes) of every event file the inputs name, in listing order."""
    return [(event[1], event[2]) for item in inputs for event in list_input(item, EVENT_SUFFIXES)
            if event[0] == "file"]


# Files whose heads are read on the launcher to find the label column before any pipeline runs.
MAX_PROBED_FILES = 1000


def check_label_column(files: list[str], options: EventReadOptions, opener=None) -> None:
    """ConfigError when no file (of the first MAX_PROBED_FILES readable ones) has the label column.

    Reads only heads, and stops at the first file that has it; a column missing from some files only
    stays their dead letter. Unreadable files are left to the run, which dead-letters them."""

    first, probed = None, 0
    for path in files:
        try:
            names = column_names(path, options, opener)
        except (OSError, ValueError, pa.ArrowException):
            continue
        if options.label_column in names:
            return
        first = first or (path, names)
        probed += 1
        if probed >= MAX_PROBED_FILES:
            break
    if first is not None:
        which = "any input file" if probed < MAX_PROBED_FILES else f"the first {probed:,} input files"
        raise ConfigError(f"label_sampling.label_column: no column {options.label_column!r} in {which} "
                          f"({first[0]} has: {', '.join(first[1]) or 'no columns'})")


def check_partition_by(files: list[str], inputs: list[str], keys: tuple[str, ...]) -> None:
    """ConfigError when a partition_by key is in no input file's folders."""

    if not keys:
        return
    root = common_root(inputs)
    found = {key for path in files for key, _ in hive_values(relative_name(path, root))}
    missing = [key for key in keys if key not in found]
    if missing:
        raise ConfigError(f"label_sampling.partition_by: no input file is below a {missing[0]}=... folder "
                          f"(hive keys found: {', '.join(sorted(found)) or 'none'})")


def _shown(names: list[str]) -> str:
    return ", ".join(names[:SHOWN_COLUMNS]) + (f", ... ({len(names):,} columns)" if len(names) > SHOWN_COLUMNS else "")


def check_label_in_files(files: list[str], inputs: list[str], options) -> None:
    """check_label_column, saying so when the label is only a hive folder key: folders never supply the label.

    A folder's value is one per file, so a label from folders makes every file all targets or all
    non-targets, which the one-pass modes (sampling each file on its own) can't hold a ratio over."""
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
    mode = labels_config.mode
    return "ADAPTIVE" if mode == config_pb2.LABEL_SAMPLING_MODE_UNSPECIFIED else config_pb2.LabelSamplingMode.Name(mode)


def label_spec(config):
    """The label-sampling settings as the workers take them."""
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


def plan_labels(config, inputs: list[str]) -> LabelPlan:
    """The plan of a validated config: its input files checked for what it names, and the shard count."""
    files = input_files(inputs)
    spec = label_spec(config)
    check_label_in_files([path for path, _ in files], inputs, spec.options)
    check_column_types([path for path, _ in files], spec.options)
    check_partition_by([path for path, _ in files], inputs, spec.partition_by)
    input_bytes = sum(size for _, size in files)
    num_shards = shard_count(rows_bytes(files), ShardSizing.of(config.output), WRITE_LESS)
    return LabelPlan(spec, tuple(inputs), num_shards, input_bytes)
