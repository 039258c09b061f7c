"""The label-sampling job: event logs in, label-sampled rows spilled per shard.

discover → partitions (files, or record-aligned ranges of large ones, named
by their path below the inputs' root) → per partition: read, sample
(ITERATIVE/ADAPTIVE one pass; EXACT after two label-only passes, a priority
histogram with the counts and then the cut's bucket; TWO_PASS after one
label-only count pass) → spill per-shard batches. The partitions' schemas are
unified into the output's (transforms/event_schema.py) before any shard is
written. WriteShardedOutput does the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardmill.pipelines.config import LABEL_MODE_NAMES, JobConfig
from shardmill.pipelines.inputs import EVENT_SUFFIXES
from shardmill.transforms.discovery import list_input, skipped_files
from shardmill.transforms.event_schema import PartitionSchema, conform, unify_schemas
from shardmill.transforms.event_sources import EventRange, EventReadOptions, common_root, read_events, split_file
from shardmill.transforms.index_transforms import SOURCE_STATS, DiscoverFiles
from shardmill.transforms.keyed_hash import fingerprint
from shardmill.transforms.label_partition import (
    IDENTITY_COLUMNS,
    exact_bucket,
    exact_label_counts,
    exact_rows,
    one_pass_rows,
    partition_stats,
    shard_batches,
    two_pass_rows,
)
from shardmill.transforms.label_sampling import exact_cut, exact_keep_count, exact_threshold
from shardmill.transforms.manifest import count_reasons
from shardmill.transforms.output_lifecycle import RunPaths
from shardmill.transforms.shard_writer import event_shard_table
from shardmill.transforms.sharded_output import ShardFormat
from shardmill.transforms.spill import write_spill

_LOG = logging.getLogger(__name__)
ERRORS = "errors"
STATS = "stats"
SCHEMAS = "schemas"


@dataclasses.dataclass(frozen=True)
class LabelSpec:
    """The label-sampling settings as plain values (protos don't pickle to workers)."""

    options: EventReadOptions
    ratio: float
    mode: str
    seed: int
    max_partition_bytes: int

    @classmethod
    def of(cls, config: JobConfig) -> "LabelSpec":
        labels = config.label_sampling
        options = EventReadOptions(labels.label_column, tuple(labels.target_values) or ("1",),
                                   tuple(labels.column_names), tuple(sorted(labels.column_types.items())))
        return cls(options, labels.ratio, LABEL_MODE_NAMES[labels.mode], config.seed, labels.max_partition_bytes)

    @property
    def label_column(self) -> str:
        return self.options.label_column

    def read(self, part: EventRange, labels_only: bool = False):
        return read_events(part, self.options, labels_only=labels_only)


def _label_counts(part: EventRange, spec: LabelSpec) -> tuple[int, int]:
    is_target = spec.read(part, labels_only=True).target_mask()
    return int(is_target.sum()), int((~is_target).sum())


def _sum_pairs(pairs):
    pairs = list(pairs)
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def _label_histogram(part: EventRange, spec: LabelSpec) -> tuple[int, np.ndarray]:
    return exact_label_counts(spec.read(part, labels_only=True), spec.seed)


class _SumHistograms(beam.CombineFn):
    """(targets, priority histogram) summed over partitions; the accumulator is one histogram."""

    def create_accumulator(self):
        return 0, None

    def add_input(self, accumulator, element):
        targets, histogram = accumulator
        return targets + element[0], element[1].copy() if histogram is None else histogram + element[1]

    def merge_accumulators(self, accumulators):
        total = self.create_accumulator()
        for accumulator in accumulators:
            if accumulator[1] is not None:
                total = self.add_input(total, accumulator)
        return total

    def extract_output(self, accumulator):
        return accumulator


def _exact_cut(totals, ratio: float):
    targets, histogram = totals
    non_targets = 0 if histogram is None else int(histogram.sum())
    return exact_cut(histogram, exact_keep_count(targets, non_targets, ratio)) if non_targets else None


def _bucket_priorities(part: EventRange, cut, spec: LabelSpec) -> np.ndarray:
    if cut is None:
        return np.zeros(0, np.uint64)
    return exact_bucket(spec.read(part, labels_only=True), cut[0], spec.seed)


def _threshold(bucket_priorities: list[np.ndarray], cut) -> int | None:
    return None if cut is None else exact_threshold(bucket_priorities, cut[1])


class _SampleFileFn(beam.DoFn):
    """Reads one event file (a partition), samples it, spills its per-shard batches."""

    def __init__(self, spec: LabelSpec, paths: RunPaths, num_shards: int):
        self._spec = spec
        self._paths = paths
        self._num_shards = num_shards

    def process(self, event_range, totals=None, threshold=None):
        spec = self._spec
        part = spec.read(event_range)
        for dead in part.dead_letters:
            yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())
        if part.table.num_columns:
            yield beam.pvalue.TaggedOutput(SCHEMAS, PartitionSchema(part.name, part.path, part.table.num_rows,
                                                                    part.table.schema))
        if spec.mode in ("ITERATIVE", "ADAPTIVE"):
            rows = one_pass_rows(part, spec.ratio, spec.mode, spec.seed)
        elif spec.mode == "EXACT":
            rows = exact_rows(part, threshold, spec.seed)
        else:
            targets, non_targets = totals
            rate = min(1.0, spec.ratio * targets / non_targets) if non_targets else 0.0
            rows = two_pass_rows(part, rate, spec.seed)
        stats = partition_stats(part, rows)
        if event_range.not_split:
            stats["not_split"] = event_range.not_split
        yield beam.pvalue.TaggedOutput(STATS, {"partition": stats})
        name = f"events-{fingerprint(event_range.path):016x}-{event_range.index:05d}.arrow"
        self._paths.check_live()
        yield from write_spill(f"{self._paths.spill_dir}/{name}",
                               shard_batches(part, rows, spec.seed, self._num_shards))


def _partitions(found: tuple, limit: int, root: str) -> list[EventRange]:
    ranges = split_file(found[0], found[1], limit, root=root)
    if ranges[0].not_split:
        _LOG.warning("%s: larger than max_partition_bytes but read whole, not split: %s", found[0],
                     ranges[0].not_split)
    return ranges


def _summary(stats: list[dict], ratio: float, mode: str) -> dict:
    targets = sum(s["targets"] for s in stats)
    non_in = sum(s["non_targets_in"] for s in stats)
    non_out = sum(s["non_targets_out"] for s in stats)
    achieved = non_out / targets if targets else None
    return {
        "mode": mode,
        "requested_ratio": ratio,
        "targets": targets,
        "non_targets_in": non_in,
        "non_targets_out": non_out,
        "achieved_ratio": achieved,
        "ratio_error": None if achieved is None else achieved - ratio,
        "exact_target_count": exact_keep_count(targets, non_in, ratio),
        "partitions": sorted(stats, key=lambda s: s["partition"]),
    }


def _record(event_schema, label_column: str) -> dict:
    return {"record_format": "events", "label_column": label_column, "event_schema": event_schema}


class EventShardFormat(ShardFormat):
    job_kind = "labels"

    def __init__(self, ratio: float, mode: str):
        self._ratio = ratio
        self._mode = mode

    def table(self, batches, record):
        event_schema = record["event_schema"]
        conformed = []
        for batch in batches:
            table = pa.Table.from_batches([batch])
            if event_schema.rejected:
                table = table.filter(pc.invert(pc.is_in(table["_partition"],
                                                        pa.array(sorted(event_schema.rejected)))))
            conformed.append(conform(table, event_schema.schema))
        if not any(t.num_rows for t in conformed):
            empty = conform(pa.table({"_partition": pa.array([], pa.string()), "_row": pa.array([], pa.int64())}),
                            event_schema.schema)
            return empty.select([*event_schema.schema.names, *IDENTITY_COLUMNS])
        return event_shard_table([b for t in conformed if t.num_rows for b in t.to_batches()], IDENTITY_COLUMNS)

    def manifest_record(self, record):
        return {k: v for k, v in record.items() if k != "event_schema"}

    def finish_stats(self, parts, shards, dead_letters):
        rejected = {d["member"] for d in dead_letters if d["reason"] == "schema_conflict"}
        read = [p["partition"] for p in parts if "partition" in p]
        stats = [s for s in read if s["partition"] not in rejected]
        records = sum(s["records"] for s in read)
        return {
            "label_sampling": _summary(stats, self._ratio, self._mode),
            "accounting": {
                "partitions": len(read),
                "partitions_left_out": len(rejected),
                "files_not_split": sorted(s["partition"] for s in read if "not_split" in s),
                "files_skipped": skipped_files(parts),
                "records_read": records,
                "records_written": sum(s["rows"] for s in shards),
                "errors_by_reason": count_reasons(dead_letters),
                "error_fraction": len(dead_letters) / (records + len(dead_letters)) if records or dead_letters else 0.0,
            },
        }


def default_num_shards(inputs: list[str], target_shard_bytes: int) -> int:
    """Input bytes / target: an upper bound on the output, known before any record is read."""
    total = sum(event[2] for item in inputs for event in list_input(item, EVENT_SUFFIXES) if event[0] == "file")
    return max(1, math.ceil(total / target_shard_bytes))


class LabelJob(beam.PTransform):
    """Event files → label-sampled rows spilled per shard (the WriteShardedOutput inputs)."""

    def __init__(self, config: JobConfig, inputs: list[str], paths: RunPaths):
        super().__init__()
        self._spec = LabelSpec.of(config)
        self._inputs = inputs
        self._paths = paths
        self._num_shards = config.output.num_shards or default_num_shards(inputs, config.output.target_shard_bytes)
        self.shard_format = EventShardFormat(self._spec.ratio, self._spec.mode)

    def expand(self, pbegin):
        spec = self._spec
        found = pbegin | "Discover" >> DiscoverFiles(self._inputs, EVENT_SUFFIXES)
        files = (
            found["batches"]
            | "Files" >> beam.FlatMap(lambda batch: batch)
            | "Partitions" >> beam.FlatMap(_partitions, spec.max_partition_bytes, common_root(self._inputs))
            | "Spread" >> beam.Reshuffle()
        )
        sample = _SampleFileFn(spec, self._paths, self._num_shards)
        side_inputs = {}
        if spec.mode == "TWO_PASS":
            totals = (
                files
                | "CountLabels" >> beam.Map(_label_counts, spec)
                | "Totals" >> beam.CombineGlobally(_sum_pairs)
            )
            side_inputs["totals"] = beam.pvalue.AsSingleton(totals)
        elif spec.mode == "EXACT":
            cut = (
                files
                | "LabelHistograms" >> beam.Map(_label_histogram, spec)
                | "Histogram" >> beam.CombineGlobally(_SumHistograms())
                | "Cut" >> beam.Map(_exact_cut, spec.ratio)
            )
            threshold = (
                files
                | "CutBucket" >> beam.Map(_bucket_priorities, beam.pvalue.AsSingleton(cut), spec)
                | "AllInBucket" >> beam.combiners.ToList()
                | "Threshold" >> beam.Map(_threshold, beam.pvalue.AsSingleton(cut))
            )
            side_inputs["threshold"] = beam.pvalue.AsSingleton(threshold)
        sampled = files | "Sample" >> beam.ParDo(sample, **side_inputs).with_outputs(ERRORS, STATS, SCHEMAS,
                                                                                      main="refs")
        event_schema = (
            sampled[SCHEMAS]
            | "AllSchemas" >> beam.combiners.ToList()
            | "UnifySchemas" >> beam.Map(unify_schemas)
        )
        return {
            "shard_refs": sampled["refs"],
            "num_shards": pbegin | "NumShards" >> beam.Create([self._num_shards]),
            "record": event_schema | "Record" >> beam.Map(_record, spec.label_column),
            "errors": (found[ERRORS], sampled[ERRORS],
                       event_schema | "SchemaErrors" >> beam.FlatMap(lambda s: [d.to_dict() for d in s.dead_letters]))
                      | "AllErrors" >> beam.Flatten(),
            "stats": (found[SOURCE_STATS], sampled[STATS]) | "AllStats" >> beam.Flatten(),
        }
