"""The lc0 job: chunk files in, sampled records spilled per shard.

Reads top to bottom as the data flow: discover and index the chunk files,
plan (one global element), load the planned chunks of each read task and
spill their records per shard. WriteShardedOutput does the rest.
"""

from __future__ import annotations

import dataclasses
import logging

import apache_beam as beam
from apache_beam.metrics import Metrics

from shardmill.transforms.common.discovery import ERRORS, SOURCE_STATS
from shardmill.transforms.common.keyed_hash import fingerprint
from shardmill.transforms.common.ordered_pool import OrderedPool, in_global_window
from shardmill.transforms.common.progress import ProgressLog
from shardmill.transforms.common.spill import write_spill
from shardmill.transforms.job import JobOutputs
from shardmill.transforms.lc0.count import index_inputs
from shardmill.transforms.lc0.index_cache import IndexCache
from shardmill.transforms.lc0.loading import LoadedTask, load_task
from shardmill.transforms.lc0.plan import (MAX_TASK_BYTES, WRITE_LESS, GlobalDecisions, decide, final_stats,
                                           merge_stats, plan_table, read_tasks, summarize_sources)
from shardmill.transforms.lc0.sampling import SamplingParams
from shardmill.transforms.output.lifecycle import RunPaths
from shardmill.transforms.output.shard_count import ShardSizing, shard_count

_LOG = logging.getLogger(__name__)
LOAD_STATS = "load_stats"


class _LoadTasksFn(beam.DoFn):
    """Loads read tasks and spills their per-shard batches, `tasks_at_once` at a time.

    Spilling (LZ4) is serial within a task: a second task keeps the other
    core busy meanwhile. Emits (shard, spill ref) pairs, the tasks' dead letters and load stats,
    task by task in the order the tasks arrived.
    """

    def __init__(self, paths: RunPaths, tasks_at_once: int):
        self._paths = paths
        self._progress = ProgressLog(paths.progress_dir)
        self._records = Metrics.counter("shardmill.load", "records")
        self._errors = Metrics.counter("shardmill.load", "errors")
        self._pool = OrderedPool(tasks_at_once)

    def setup(self):
        self._pool.start()

    def start_bundle(self):
        self._pool.reset()

    def _load_and_spill(self, task) -> tuple[LoadedTask, list]:
        loaded = load_task(task)
        first = task.chunks.slice(0, 1).to_pylist()[0]
        name = f"task-{fingerprint(task.source):016x}-{first['chunk']:08d}-{first['emit_start']:012d}.arrow"
        self._paths.check_live()
        refs = write_spill(f"{self._paths.spill_dir}/{name}", loaded.batches)
        loaded.batches = {}  # spilled: the frames need not wait for the bundle thread
        self._progress.record("load", tasks=1, records=loaded.records_written)
        return loaded, refs

    def _outputs(self, loaded: LoadedTask, refs: list) -> list:
        # Counters belong to the bundle's thread (Beam keeps them per thread), so they count here.
        self._errors.inc(len(loaded.dead_letters))
        self._records.inc(loaded.records_written)
        stats = {"load": {
            "chunks_loaded": loaded.chunks_loaded,
            "uses_written": loaded.uses_written,
            "records_written": loaded.records_written,
        }}
        return ([beam.pvalue.TaggedOutput(ERRORS, dead.to_dict()) for dead in loaded.dead_letters]
                + [beam.pvalue.TaggedOutput(LOAD_STATS, stats)] + refs)

    def process(self, task):
        for loaded, refs in self._pool.submit(self._load_and_spill, task):
            yield from self._outputs(loaded, refs)

    def finish_bundle(self):
        for loaded, refs in self._pool.drain():
            yield from (in_global_window(output) for output in self._outputs(loaded, refs))

    def teardown(self):
        self._pool.stop()


def _record(decisions: GlobalDecisions) -> dict:
    return {"record_format": "lc0", "record_version": decisions.record_version, "record_size": decisions.record_size}


def _plan_stats(merged: dict, params: SamplingParams) -> dict:
    return {"plan": final_stats(merged, params)}


@dataclasses.dataclass(frozen=True)
class Lc0Plan:
    """The lc0 job's settings as plain values (protos don't pickle to workers).

    The plan itself is made in the pipeline, from the index: no launcher
    holds it (rule: scale is designed in).
    """

    inputs: tuple[str, ...]
    count_method: str
    expected_version: int
    max_chunk_bytes: int
    params: SamplingParams
    sizing: ShardSizing
    index_cache: IndexCache | None = None
    load_tasks_at_once: int = 1  # read tasks one worker loads and spills at once


class Lc0Job(beam.PTransform):
    """lc0 chunk files → JobOutputs.

    No element holds the index: global decisions come from per-source
    summaries, each index table plans its own chunks, and only the planned
    record total (for the shard count) and the statistics are combined.
    """

    def __init__(self, plan: Lc0Plan, paths: RunPaths):
        super().__init__()
        self._plan = plan
        self._paths = paths

    def expand(self, pbegin):
        plan = self._plan
        params = plan.params
        indexed = index_inputs(pbegin, list(plan.inputs), plan.count_method, plan.expected_version,
                               plan.max_chunk_bytes, self._paths.progress_dir, plan.index_cache)
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
            | "NumShards" >> beam.Map(_num_shards, beam.pvalue.AsSingleton(decisions), plan.sizing,
                                      ProgressLog(self._paths.progress_dir))
        )
        loaded = (
            planned
            | "ReadTasks" >> beam.FlatMap(
                lambda table, n, limit: read_tasks(table.used, params, n, MAX_TASK_BYTES, limit),
                beam.pvalue.AsSingleton(num_shards), plan.max_chunk_bytes)
            | "SpreadTasks" >> beam.Reshuffle()
            | "Load" >> beam.ParDo(_LoadTasksFn(self._paths, plan.load_tasks_at_once)).with_outputs(
                ERRORS, LOAD_STATS, main="refs")
        )
        plan_errors = planned | "PlanErrors" >> beam.FlatMap(lambda table: [d.to_dict() for d in table.dead_letters])
        plan_stats = (
            planned
            | "PartialStats" >> beam.Map(lambda table: table.stats)
            | "MergeStats" >> beam.CombineGlobally(merge_stats)
            | "PlanStats" >> beam.Map(_plan_stats, params)
        )
        return JobOutputs(
            shard_refs=loaded["refs"],
            num_shards=num_shards,
            record=decisions | "Record" >> beam.Map(_record),
            errors=(indexed[ERRORS], plan_errors, loaded[ERRORS]) | "AllErrors" >> beam.Flatten(),
            stats=(plan_stats, loaded[LOAD_STATS], indexed[SOURCE_STATS]) | "AllStats" >> beam.Flatten(),
        )


def _num_shards(records_planned: int, decisions: GlobalDecisions, sizing: ShardSizing,
                progress: ProgressLog) -> int:
    num_shards = shard_count(records_planned * decisions.record_size, sizing, WRITE_LESS)
    progress.record("load", total_records=records_planned)
    _LOG.info("plan: %s records, %.1f MiB of output in %d shard(s)", f"{records_planned:,}",
              records_planned * decisions.record_size / 2**20, num_shards)
    return num_shards
