"""The label-sampling job: event logs in, label-sampled rows spilled per shard.

discover → per file: read, sample (ITERATIVE/ADAPTIVE one pass; EXACT after
two label-only passes for the count and the global priority threshold;
TWO_PASS after one label-only count pass) → spill per-shard batches.
WriteShardedOutput does the rest.
"""

from __future__ import annotations

import dataclasses
import math

import apache_beam as beam

from shardmill.pipelines.config import LABEL_MODE_NAMES, JobConfig
from shardmill.pipelines.inputs import EVENT_SUFFIXES
from shardmill.transforms.discovery import list_input, skipped_files
from shardmill.transforms.index_transforms import SOURCE_STATS, DiscoverFiles
from shardmill.transforms.manifest import count_reasons
from shardmill.transforms.event_sources import EventRange, read_events, split_file
from shardmill.transforms.keyed_hash import fingerprint
from shardmill.transforms.label_partition import (
    IDENTITY_COLUMNS,
    exact_candidates,
    exact_rows,
    one_pass_rows,
    partition_stats,
    shard_batches,
    two_pass_rows,
)
from shardmill.transforms.label_sampling import exact_keep_count, exact_threshold
from shardmill.transforms.output_lifecycle import RunPaths
from shardmill.transforms.shard_writer import event_shard_table
from shardmill.transforms.sharded_output import ShardFormat
from shardmill.transforms.spill import write_spill

ERRORS = "errors"
STATS = "stats"


@dataclasses.dataclass(frozen=True)
class LabelSpec:
    """The label-sampling settings as plain values (protos don't pickle to workers)."""

    label_column: str
    target_values: tuple[str, ...]
    ratio: float
    mode: str
    seed: int
    max_partition_bytes: int

    @classmethod
    def of(cls, config: JobConfig) -> "LabelSpec":
        labels = config.label_sampling
        return cls(labels.label_column, tuple(labels.target_values) or ("1",), labels.ratio,
                   LABEL_MODE_NAMES[labels.mode], config.seed, labels.max_partition_bytes)

    def read(self, part: EventRange, labels_only: bool = False):
        return read_events(part, self.label_column, list(self.target_values), labels_only=labels_only)


def _label_counts(part: EventRange, spec: LabelSpec) -> tuple[int, int]:
    is_target = spec.read(part, labels_only=True).target_mask()
    return int(is_target.sum()), int((~is_target).sum())


def _candidates(part: EventRange, keep: int, spec: LabelSpec):
    return exact_candidates(spec.read(part, labels_only=True), keep, spec.seed)


def _sum_pairs(pairs):
    pairs = list(pairs)
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


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
        if spec.mode in ("ITERATIVE", "ADAPTIVE"):
            rows = one_pass_rows(part, spec.ratio, spec.mode, spec.seed)
        elif spec.mode == "EXACT":
            rows = exact_rows(part, threshold, spec.seed)
        else:
            targets, non_targets = totals
            rate = min(1.0, spec.ratio * targets / non_targets) if non_targets else 0.0
            rows = two_pass_rows(part, rate, spec.seed)
        yield beam.pvalue.TaggedOutput(STATS, {"partition": partition_stats(part, rows)})
        name = f"events-{fingerprint(event_range.path):016x}-{event_range.index:05d}.arrow"
        self._paths.check_live()
        yield from write_spill(f"{self._paths.spill_dir}/{name}",
                               shard_batches(part, rows, spec.seed, self._num_shards))


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


class EventShardFormat(ShardFormat):
    job_kind = "labels"

    def __init__(self, ratio: float, mode: str):
        self._ratio = ratio
        self._mode = mode

    def table(self, batches, record):
        return event_shard_table(batches, IDENTITY_COLUMNS)

    def finish_stats(self, parts, shards, dead_letters):
        stats = [p["partition"] for p in parts if "partition" in p]
        records = sum(s["records"] for s in stats)
        return {
            "label_sampling": _summary(stats, self._ratio, self._mode),
            "accounting": {
                "partitions": len(stats),
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
            | "Partitions" >> beam.FlatMap(lambda f, limit: split_file(f[0], f[1], limit), spec.max_partition_bytes)
            | "Spread" >> beam.Reshuffle()
        )
        sample = _SampleFileFn(spec, self._paths, self._num_shards)
        side_inputs = {}
        if spec.mode in ("EXACT", "TWO_PASS"):
            totals = (
                files
                | "CountLabels" >> beam.Map(_label_counts, spec)
                | "Totals" >> beam.CombineGlobally(_sum_pairs)
            )
        if spec.mode == "TWO_PASS":
            side_inputs["totals"] = beam.pvalue.AsSingleton(totals)
        elif spec.mode == "EXACT":
            keep = totals | "Keep" >> beam.Map(lambda t, ratio: exact_keep_count(t[0], t[1], ratio), spec.ratio)
            threshold = (
                files
                | "Candidates" >> beam.Map(_candidates, beam.pvalue.AsSingleton(keep), spec)
                | "AllCandidates" >> beam.combiners.ToList()
                | "Threshold" >> beam.Map(exact_threshold, beam.pvalue.AsSingleton(keep))
            )
            side_inputs["threshold"] = beam.pvalue.AsSingleton(threshold)
        sampled = files | "Sample" >> beam.ParDo(sample, **side_inputs).with_outputs(ERRORS, STATS, main="refs")
        return {
            "shard_refs": sampled["refs"],
            "num_shards": pbegin | "NumShards" >> beam.Create([self._num_shards]),
            "record": pbegin | "Record" >> beam.Create([{"record_format": "events",
                                                          "label_column": spec.label_column}]),
            "errors": (found[ERRORS], sampled[ERRORS]) | "AllErrors" >> beam.Flatten(),
            "stats": (found[SOURCE_STATS], sampled[STATS]) | "AllStats" >> beam.Flatten(),
        }
