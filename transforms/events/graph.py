"""The label-sampling job's graph: event logs in, label-sampled rows spilled per shard.

discover → partitions (files, or record-aligned ranges of large ones, named
by their path below the inputs' root) → per partition: read, sample
(ITERATIVE/ADAPTIVE one pass; EXACT after two label-only passes, a priority
histogram with the counts and then the cut's bucket; TWO_PASS after one
label-only count pass) → spill per-shard batches. The partitions' schemas are
unified into the output's (transforms/events/schema.py) before any shard is
written. WriteShardedOutput does the rest.
"""

from __future__ import annotations

import dataclasses
import logging

import apache_beam as beam
import numpy as np

from shardmill.transforms.common.dead_letter import DeadLetter
from shardmill.transforms.common.discovery import ERRORS, SOURCE_STATS, DiscoverFiles
from shardmill.transforms.common.keyed_hash import fingerprint
from shardmill.transforms.common.known_values import known_value
from shardmill.transforms.common.progress import ProgressLog, record_total
from shardmill.transforms.common.spill import write_spill
from shardmill.transforms.events.formats import EVENT_SUFFIXES, compression_of, format_of
from shardmill.transforms.events.partition_sampling import (exact_bucket, exact_label_counts, exact_rows, one_pass_rows,
                                                            partition_stats, shard_batches, two_pass_rows)
from shardmill.transforms.events.partitions import EventRange, common_root, split_file
from shardmill.transforms.events.plan import LabelPlan, LabelSpec
from shardmill.transforms.events.readers import event_blocks, scan_events
from shardmill.transforms.events.sampling import exact_cut, exact_keep_count, exact_threshold
from shardmill.transforms.events.schema import PartitionSchema, unify_schemas
from shardmill.transforms.job import JobOutputs
from shardmill.transforms.output.lifecycle import RunPaths

_LOG = logging.getLogger(__name__)
STATS = "stats"
SCHEMAS = "schemas"


def _label_pass(part: EventRange, spec: LabelSpec) -> tuple[str, str, tuple, PartitionSchema | None]:
    """The two-pass modes' first pass over a partition: (group, partition name, label counts, the schema its
    rows are written with or None). Counts: EXACT (targets, histogram of the non-targets' priorities),
    TWO_PASS (targets, non-targets)."""
    labels = spec.read(part, labels_only=True)
    if spec.mode == "EXACT":
        counts = exact_label_counts(labels, spec.seed)
    else:
        is_target = labels.target_mask()
        counts = int(is_target.sum()), int((~is_target).sum())
    return spec.group(part), part.name, counts, _written_schema(part, spec, len(labels.is_target))


def _written_schema(part: EventRange, spec: LabelSpec, records: int) -> PartitionSchema | None:
    """The schema the Sample step reports for a partition, read as cheaply as its format allows: a Parquet
    file's footer (a run of no row groups: the same columns, hive columns and checks); a text log parsed, as
    its types are inferred from every value. None when its read leaves it out whole (nothing is written)."""
    if format_of(part.path) == "parquet":
        read = spec.read(dataclasses.replace(part, end_group=part.first_group))
    else:
        read = scan_events(part, spec.options)  # a compressed log: its mask and its blocks' types, no rows held
    schema = read.schema if read.block_rows else read.table.schema if read.table.num_columns else None
    return None if schema is None else PartitionSchema(part.name, part.path, records, schema)


def _left_out(event_schema, unwritten: list[str]) -> frozenset[str]:
    """Partitions whose rows are not written: left out for their schema, or whole by the full read though
    their labels were read (a repeated column name the label-only read doesn't see)."""
    return frozenset(event_schema.rejected) | frozenset(unwritten)


def _counted(label_pass, left_out: frozenset[str]) -> list:
    """(group, counts) of a partition whose rows are written: only those count toward a cut (EXACT's
    threshold, TWO_PASS's rate), or the run misses its ratio by what the others held."""
    group, name, counts, _ = label_pass
    return [] if name in left_out else [(group, counts)]


def _sum_pairs(pairs):
    pairs = list(pairs)
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


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


def _exact_cut(group_totals, ratio: float):
    group, (targets, histogram) = group_totals
    non_targets = 0 if histogram is None else int(histogram.sum())
    return group, exact_cut(histogram, exact_keep_count(targets, non_targets, ratio)) if non_targets else None


def _bucket_priorities(part: EventRange, cuts: dict, spec: LabelSpec,
                       left_out: frozenset[str] = frozenset()) -> tuple[str, np.ndarray]:
    group = spec.group(part)
    if part.name in left_out or cuts[group] is None:
        return group, np.zeros(0, np.uint64)
    return group, exact_bucket(spec.read(part, labels_only=True), cuts[group][0], spec.seed)


def _threshold(group_buckets, cuts: dict) -> tuple[str, int | None]:
    group, bucket_priorities = group_buckets
    cut = cuts.get(group)  # None too for a group whose partitions are all left out
    return group, None if cut is None else exact_threshold(list(bucket_priorities), cut[1])


class _SampleFileFn(beam.DoFn):
    """Reads one event file (a partition), samples it, spills its per-shard batches."""

    def __init__(self, spec: LabelSpec, paths: RunPaths, num_shards: int):
        self._spec = spec
        self._paths = paths
        self._num_shards = num_shards
        self._progress = ProgressLog(paths.progress_dir)

    def process(self, event_range, totals=None, thresholds=None):
        spec = self._spec
        group = spec.group(event_range)
        part = spec.scan(event_range)
        for dead in part.dead_letters:
            yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())
        if spec.mode in ("ITERATIVE", "ADAPTIVE"):
            rows = one_pass_rows(part, spec.ratio, spec.mode, spec.seed)
        elif spec.mode == "EXACT":
            rows = exact_rows(part, thresholds.get(group), spec.seed)  # a group wholly left out has no cut
        else:
            targets, non_targets = totals.get(group, (0, 0))
            rate = min(1.0, spec.ratio * targets / non_targets) if non_targets else 0.0
            rows = two_pass_rows(part, rate, spec.seed)
        refs, schema = [], part.table.schema if part.table.num_columns else None
        if part.block_rows:  # a compressed log in blocks: its rows read again, block by block
            schema = part.schema
            try:
                refs = self._spill_blocks(event_range, part, rows)
            except Exception as err:  # noqa: BLE001  (the file changed or broke between the passes)
                yield beam.pvalue.TaggedOutput(ERRORS, DeadLetter(
                    part.path, "read", "unreadable", f"{err} (second pass; the file is left out)",
                    records=len(part.is_target)).to_dict())
                part = dataclasses.replace(part, is_target=part.is_target.slice(0, 0), left_out="unreadable",
                                           left_out_records=len(part.is_target))
                rows, schema = rows[:0], None
        stats = partition_stats(part, rows)
        if part.left_out:  # read, then left out whole: its records count as read (and, by its dead letter, lost)
            stats.update(records=part.left_out_records, left_out=part.left_out)
        if spec.partition_by:
            stats["group"] = group
        self._progress.record("sample", partitions=1, records=stats["records"], bytes=max(event_range.size, 0))
        if event_range.not_split:
            stats["not_split"] = event_range.not_split
        # Bytes that gave records: the run's records per byte, which prices a file lost with its records unknown.
        stats["bytes"] = max(event_range.size, 0) if stats["records"] else 0
        yield beam.pvalue.TaggedOutput(STATS, {"partition": stats})
        if schema is not None:
            yield beam.pvalue.TaggedOutput(SCHEMAS, PartitionSchema(part.name, part.path, stats["records"], schema))
        if part.block_rows:
            yield from refs
            return
        self._paths.check_live()
        yield from write_spill(self._spill_path(event_range), shard_batches(part, rows, spec.seed, self._num_shards))

    def _spill_path(self, event_range: EventRange, block: int = -1) -> str:
        name = f"events-{fingerprint(event_range.path):016x}-{event_range.index:05d}"
        return f"{self._paths.spill_dir}/{name}{'' if block < 0 else f'-{block:06d}'}.arrow"

    def _spill_blocks(self, event_range: EventRange, scan, rows: np.ndarray) -> list:
        """A compressed log's emitted rows spilled block by block (one spill file each); their refs, handed on
        only once every block is spilled."""
        emitted = np.sort(rows)  # block order; a shard's rows are sorted by order key when it is written
        refs = []
        for index, block in enumerate(event_blocks(event_range, self._spec.options, scan)):
            lo, hi = np.searchsorted(emitted, [block.first_row, block.first_row + block.table.num_rows])
            batches = shard_batches(block, emitted[lo:hi], self._spec.seed, self._num_shards)
            self._paths.check_live()
            refs.extend(write_spill(self._spill_path(event_range, index), batches))
        return refs


def _partitions(found: tuple, limit: int, root: str) -> list[EventRange]:
    ranges = split_file(found[0], found[1], limit, root=root)
    if ranges[0].not_split and not compression_of(found[0]):  # compressed files are read whole by design
        _LOG.warning("%s: read whole, not split: %s", found[0], ranges[0].not_split)
    return ranges


def _record(event_schema, label_column: str) -> dict:
    return {"record_format": "events", "label_column": label_column, "event_schema": event_schema}


class LabelJob(beam.PTransform):
    """Event files → label-sampled rows spilled per shard (JobOutputs)."""

    def __init__(self, plan: LabelPlan, paths: RunPaths):
        super().__init__()
        self._spec = plan.spec
        self._inputs = list(plan.inputs)
        self._paths = paths
        self._num_shards = plan.num_shards
        self._input_bytes = plan.input_bytes

    def expand(self, pbegin):
        spec = self._spec
        once = pbegin | "Once" >> beam.Impulse()
        _ = (once
             | "InputBytes" >> known_value(self._input_bytes)
             | "ReportInputBytes" >> beam.Map(record_total, ProgressLog(self._paths.progress_dir), "sample",
                                              "total_bytes"))
        found = pbegin | "Discover" >> DiscoverFiles(self._inputs, EVENT_SUFFIXES)
        files = (
            found["batches"]
            | "Files" >> beam.FlatMap(lambda batch: batch)
            | "Partitions" >> beam.FlatMap(_partitions, spec.max_partition_bytes, common_root(self._inputs))
            | "Spread" >> beam.Reshuffle()
        )
        sample = _SampleFileFn(spec, self._paths, self._num_shards)
        side_inputs = {}
        # The two-pass modes hold the ratio per group (spec.group: one group unless partition_by says).
        # Their cut counts only partitions whose rows are written, so the schemas are unified from the first
        # pass, before the cut; the shards are written with that schema.
        event_schema = None
        if spec.mode in ("TWO_PASS", "EXACT"):
            label_passes = files | "LabelPass" >> beam.Map(_label_pass, spec)
            event_schema = (
                label_passes
                | "PassSchemas" >> beam.FlatMap(lambda passed: [passed[3]] if passed[3] is not None else [])
                | "AllPassSchemas" >> beam.combiners.ToList()
                | "UnifyPassSchemas" >> beam.Map(unify_schemas)
            )
            unwritten = (label_passes
                         | "Unwritten" >> beam.FlatMap(lambda passed: [passed[1]] if passed[3] is None else [])
                         | "AllUnwritten" >> beam.combiners.ToList())
            left_out = beam.pvalue.AsSingleton(
                event_schema | "LeftOut" >> beam.Map(_left_out, beam.pvalue.AsSingleton(unwritten)))
            counted = label_passes | "Counted" >> beam.FlatMap(_counted, left_out)
        if spec.mode == "TWO_PASS":
            totals = counted | "Totals" >> beam.CombinePerKey(_sum_pairs)
            side_inputs["totals"] = beam.pvalue.AsDict(totals)
        elif spec.mode == "EXACT":
            cuts = (
                counted
                | "Histogram" >> beam.CombinePerKey(_SumHistograms())
                | "Cut" >> beam.Map(_exact_cut, spec.ratio)
            )
            thresholds = (
                files
                | "CutBucket" >> beam.Map(_bucket_priorities, beam.pvalue.AsDict(cuts), spec, left_out)
                | "AllInBucket" >> beam.GroupByKey()
                | "Threshold" >> beam.Map(_threshold, beam.pvalue.AsDict(cuts))
            )
            side_inputs["thresholds"] = beam.pvalue.AsDict(thresholds)
        sampled = files | "Sample" >> beam.ParDo(sample, **side_inputs).with_outputs(ERRORS, STATS, SCHEMAS,
                                                                                      main="refs")
        if event_schema is None:  # the one-pass modes: from the schemas the Sample step read
            event_schema = (
                sampled[SCHEMAS]
                | "AllSchemas" >> beam.combiners.ToList()
                | "UnifySchemas" >> beam.Map(unify_schemas)
            )
        return JobOutputs(
            shard_refs=sampled["refs"],
            num_shards=once | "NumShards" >> known_value(self._num_shards),
            record=event_schema | "Record" >> beam.Map(_record, spec.label_column),
            errors=(found[ERRORS], sampled[ERRORS],
                    event_schema | "SchemaErrors" >> beam.FlatMap(lambda s: [d.to_dict() for d in s.dead_letters]))
                   | "AllErrors" >> beam.Flatten(),
            stats=(found[SOURCE_STATS], sampled[STATS]) | "AllStats" >> beam.Flatten(),
        )
