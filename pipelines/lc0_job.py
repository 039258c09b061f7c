"""The lc0 job: chunk files in, sampled records spilled per shard.

Reads top to bottom as the data flow: discover and index the chunk files,
plan (one global element), load the planned chunks of each read task and
spill their records per shard. WriteShardedOutput does the rest.
"""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.metrics import Metrics

from shardmill.pipelines.config import JobConfig, count_method, sampling_params
from shardmill.pipelines.count_job import index_inputs
from shardmill.transforms.chunk_loading import load_task
from shardmill.transforms.discovery import skipped_files
from shardmill.transforms.index_transforms import ERRORS, SOURCE_STATS
from shardmill.transforms.chunk_sampling import SamplingParams
from shardmill.transforms.job_plan import (GlobalDecisions, OutputParams, decide, final_stats, merge_stats,
                                           num_shards_for, plan_table, read_tasks, summarize_sources)
from shardmill.transforms.keyed_hash import fingerprint
from shardmill.transforms.manifest import accounting
from shardmill.transforms.output_lifecycle import RunPaths
from shardmill.transforms.progress import ProgressLog
from shardmill.transforms.shard_writer import LC0_PARQUET_OPTIONS, shard_table
from shardmill.transforms.sharded_output import ShardFormat
from shardmill.transforms.spill import write_spill

_LOG = logging.getLogger(__name__)
LOAD_STATS = "load_stats"


class Lc0ShardFormat(ShardFormat):
    job_kind = "lc0"
    parquet_options = LC0_PARQUET_OPTIONS

    def table(self, batches, record):
        return shard_table(batches, record["record_size"])

    def row_bytes(self, table, record):
        return record["record_size"]

    def finish_stats(self, parts, shards, dead_letters):
        plan_stats = next(p["plan"] for p in parts if "plan" in p)
        loads = [p["load"] for p in parts if "load" in p]
        acc = accounting(plan_stats, loads, dead_letters, shards)
        acc["sources_indexed"] = sum(p.get("sources", 0) for p in parts)
        acc["files_skipped"] = skipped_files(parts)
        return {"accounting": acc, "sampling": plan_stats["sampling"]}


class _LoadTasksFn(beam.DoFn):
    """Loads a read task and spills its per-shard batches; emits (shard, spill ref) pairs."""

    def __init__(self, paths: RunPaths):
        self._paths = paths
        self._progress = ProgressLog(paths.progress_dir)
        self._records = Metrics.counter("shardmill.load", "records")
        self._errors = Metrics.counter("shardmill.load", "errors")

    def process(self, task):
        loaded = load_task(task)
        for dead in loaded.dead_letters:
            self._errors.inc()
            yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())
        yield beam.pvalue.TaggedOutput(LOAD_STATS, {"load": {
            "chunks_loaded": loaded.chunks_loaded,
            "uses_written": loaded.uses_written,
            "records_written": loaded.records_written,
        }})
        first = task.chunks.slice(0, 1).to_pylist()[0]
        name = f"task-{fingerprint(task.source):016x}-{first['chunk']:08d}-{first['emit_start']:012d}.arrow"
        self._paths.check_live()
        yield from write_spill(f"{self._paths.spill_dir}/{name}", loaded.batches)
        self._records.inc(loaded.records_written)
        self._progress.record("load", tasks=1, records=loaded.records_written)


def _record(decisions: GlobalDecisions) -> dict:
    return {"record_format": "lc0", "record_version": decisions.record_version, "record_size": decisions.record_size}


def _plan_stats(merged: dict, params: SamplingParams) -> dict:
    return {"plan": final_stats(merged, params)}


class Lc0Job(beam.PTransform):
    """lc0 chunk files → the WriteShardedOutput inputs.

    No element holds the index: global decisions come from per-source
    summaries, each index table plans its own chunks, and only the planned
    record total (for the shard count) and the statistics are combined.
    """

    shard_format = Lc0ShardFormat()

    def __init__(self, config: JobConfig, inputs: list[str], paths: RunPaths):
        super().__init__()
        self._inputs = inputs
        self._paths = paths
        self._count_method = count_method(config)
        self._expected_version = config.index.lc0_version
        self._max_chunk_bytes = config.index.max_chunk_bytes
        self._params = sampling_params(config)
        self._output = OutputParams(num_shards=config.output.num_shards,
                                    target_shard_bytes=config.output.target_shard_bytes)

    def expand(self, pbegin):
        params, output = self._params, self._output
        indexed = index_inputs(pbegin, self._inputs, self._count_method, self._expected_version,
                               self._max_chunk_bytes, self._paths.progress_dir)
        tables = indexed["index"]
        decisions = (
            tables
            | "SourceSummaries" >> beam.FlatMap(summarize_sources)
            | "AllSources" >> beam.combiners.ToList()
            | "Decide" >> beam.Map(lambda summaries, pool: decide(summaries, pool), params.pool_size)
        )
        planned = tables | "PlanChunks" >> beam.Map(plan_table, beam.pvalue.AsSingleton(decisions), params)
        num_shards = (
            planned
            | "PlannedRecords" >> beam.Map(lambda table: table.records_planned)
            | "TotalPlanned" >> beam.CombineGlobally(sum)
            | "NumShards" >> beam.Map(_num_shards, beam.pvalue.AsSingleton(decisions), output,
                                      ProgressLog(self._paths.progress_dir))
        )
        loaded = (
            planned
            | "ReadTasks" >> beam.FlatMap(
                lambda table, n, out, limit: read_tasks(table.used, params, n, out.max_task_bytes, limit),
                beam.pvalue.AsSingleton(num_shards), output, self._max_chunk_bytes)
            | "SpreadTasks" >> beam.Reshuffle()
            | "Load" >> beam.ParDo(_LoadTasksFn(self._paths)).with_outputs(ERRORS, LOAD_STATS, main="refs")
        )
        plan_errors = planned | "PlanErrors" >> beam.FlatMap(lambda table: [d.to_dict() for d in table.dead_letters])
        plan_stats = (
            planned
            | "PartialStats" >> beam.Map(lambda table: table.stats)
            | "MergeStats" >> beam.CombineGlobally(merge_stats)
            | "PlanStats" >> beam.Map(_plan_stats, params)
        )
        return {
            "shard_refs": loaded["refs"],
            "num_shards": num_shards,
            "record": decisions | "Record" >> beam.Map(_record),
            "errors": (indexed[ERRORS], plan_errors, loaded[ERRORS]) | "AllErrors" >> beam.Flatten(),
            "stats": (plan_stats, loaded[LOAD_STATS], indexed[SOURCE_STATS]) | "AllStats" >> beam.Flatten(),
        }


def _num_shards(records_planned: int, decisions: GlobalDecisions, output: OutputParams,
                progress: ProgressLog) -> int:
    num_shards = num_shards_for(records_planned, decisions.record_size, output)
    progress.record("load", total_records=records_planned)
    _LOG.info("plan: %s records, %.1f MiB of output in %d shard(s)", f"{records_planned:,}",
              records_planned * decisions.record_size / 2**20, num_shards)
    return num_shards
