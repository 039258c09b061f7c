"""`shardmill run` with label_sampling: event logs in, label-sampled shuffled shards out.

discover → per file: read, sample (ITERATIVE/ADAPTIVE one pass; EXACT after
two label-only passes for the count and the global priority threshold;
TWO_PASS after one label-only count pass) → spill per-shard batches →
group references by shard → write → commit (manifest last).
"""

from __future__ import annotations

import dataclasses
import math
import time
import typing

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.fileio import EmptyMatchTreatment
from apache_beam.io.filesystems import FileSystems
from google.protobuf import text_format

from shardmill.pipelines.config import LABEL_MODE_NAMES, JobConfig
from shardmill.transforms import manifest as manifest_lib
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
from shardmill.transforms.shard_writer import event_shard_table, write_table_shard
from shardmill.transforms.spill import delete_spills, read_spilled, spill_dir, write_spill

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

    def __init__(self, spec: LabelSpec, output_dir: str, num_shards: int):
        self._spec = spec
        self._output_dir = output_dir
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
        yield beam.pvalue.TaggedOutput(STATS, partition_stats(part, rows))
        name = f"events-{fingerprint(event_range.path):016x}-{event_range.index:05d}.arrow"
        yield from write_spill(f"{spill_dir(self._output_dir)}/{name}",
                               shard_batches(part, rows, spec.seed, self._num_shards))


def _write_event_shard(shard_and_refs, output_dir, num_shards, row_group_bytes, zstd_level):
    shard, refs = shard_and_refs
    table = event_shard_table(read_spilled([r for r in refs if r is not None]), IDENTITY_COLUMNS)
    row_bytes = max(1, table.nbytes // table.num_rows) if table.num_rows else 1
    return write_table_shard(output_dir, shard, num_shards, table, max(1, row_group_bytes // row_bytes), zstd_level)


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


def _commit(shards, stats, dead_letters, output_dir, config_text, seed, ratio, mode, started_at):
    shards = sorted(shards, key=lambda s: s["shard"])
    records = sum(s["records"] for s in stats)
    manifest = {
        "format_version": manifest_lib.FORMAT_VERSION,
        "record_format": "events",
        "seed": seed,
        "config": config_text,
        "num_shards": len(shards),
        "shards": [{k: v for k, v in s.items() if k != "shard"} for s in shards],
        "stats": {
            "label_sampling": _summary(stats, ratio, mode),
            "accounting": {
                "partitions": len(stats),
                "records_read": records,
                "records_written": sum(s["rows"] for s in shards),
                "errors_by_reason": manifest_lib.count_reasons(dead_letters),
                "error_fraction": len(dead_letters) / (records + len(dead_letters)) if records or dead_letters else 0.0,
            },
            "timings": {"seconds": round(time.time() - started_at, 3)},
        },
    }
    manifest_lib.commit(output_dir, manifest, dead_letters)
    delete_spills(output_dir)


def default_num_shards(patterns: list[str], target_shard_bytes: int) -> int:
    """Input bytes / target: an upper bound on the output, known before any record is read."""
    total = sum(m.size_in_bytes for r in FileSystems.match(patterns) for m in r.metadata_list)
    return max(1, math.ceil(total / target_shard_bytes))


def build_label_job(p: beam.Pipeline, config: JobConfig, patterns: list[str], output_dir: str) -> None:
    spec = LabelSpec.of(config)
    num_shards = config.output.num_shards or default_num_shards(patterns, config.output.target_shard_bytes)
    started_at = time.time()
    files = (
        p
        | "Patterns" >> beam.Create(patterns)
        | "Match" >> fileio.MatchAll(EmptyMatchTreatment.ALLOW)
        | "PathAndSize" >> beam.Map(lambda m: (m.path, m.size_in_bytes))
        | "OncePerFile" >> beam.Distinct()
        | "Partitions" >> beam.FlatMap(lambda f, limit: split_file(f[0], f[1], limit), spec.max_partition_bytes)
        | "Spread" >> beam.Reshuffle()
    )
    sample = beam.ParDo(_SampleFileFn(spec, output_dir, num_shards))
    if spec.mode in ("ITERATIVE", "ADAPTIVE"):
        sampled = files | "Sample" >> sample.with_outputs(ERRORS, STATS, main="refs")
    else:
        totals = (
            files
            | "CountLabels" >> beam.Map(_label_counts, spec)
            | "Totals" >> beam.CombineGlobally(_sum_pairs)
        )
        if spec.mode == "TWO_PASS":
            sample = beam.ParDo(_SampleFileFn(spec, output_dir, num_shards), totals=beam.pvalue.AsSingleton(totals))
        else:
            keep = totals | "Keep" >> beam.Map(lambda t, ratio: exact_keep_count(t[0], t[1], ratio), spec.ratio)
            threshold = (
                files
                | "Candidates" >> beam.Map(_candidates, beam.pvalue.AsSingleton(keep), spec)
                | "AllCandidates" >> beam.combiners.ToList()
                | "Threshold" >> beam.Map(exact_threshold, beam.pvalue.AsSingleton(keep))
            )
            sample = beam.ParDo(_SampleFileFn(spec, output_dir, num_shards),
                                threshold=beam.pvalue.AsSingleton(threshold))
        sampled = files | "Sample" >> sample.with_outputs(ERRORS, STATS, main="refs")
    every_shard = p | "EveryShard" >> beam.Create([(s, None) for s in range(num_shards)])
    shards = (
        (sampled["refs"], every_shard)
        | "ShardRefs" >> beam.Flatten()
        | "AsShardPairs" >> beam.Map(lambda kv: kv).with_output_types(typing.Tuple[int, typing.Any])
        | "Shuffle" >> beam.GroupByKey()
        | "Write" >> beam.Map(_write_event_shard, output_dir, num_shards, config.output.row_group_bytes,
                              config.output.zstd_level)
    )
    _ = (
        shards
        | "AllShards" >> beam.combiners.ToList()
        | "Commit" >> beam.Map(
            _commit,
            beam.pvalue.AsList(sampled[STATS]),
            beam.pvalue.AsList(sampled[ERRORS]),
            output_dir, text_format.MessageToString(config), spec.seed, spec.ratio, spec.mode, started_at,
        )
    )
