"""The lc0 job's graph: chunk files in, sampled records spilled per shard.

Reads top to bottom as the data flow: discover and index the chunk files (index.py, through the index cache),
sample (sampling.py: global decisions from per-source summaries, then each index table's own chunks), load the
planned chunks of each read task (loading.py) and spill their records per shard. WriteShardedOutput does the rest.

Elements are batches, never single chunks (ARCHITECTURE.md, rule "batches, not records"): discovery emits lists
of (path, size) holding up to a file-count or byte budget, indexing one pyarrow Table (INDEX_SCHEMA) per such
batch plus one dead-letter dict per bad file or chunk on the ERRORS output.
"""

from __future__ import annotations

import logging
import typing

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.metrics import Metrics

from shardmill.transforms.common.discovery import ERRORS, SOURCE_STATS, DiscoverFiles
from shardmill.transforms.common.keyed_hash import fingerprint
from shardmill.transforms.common.ordered_pool import OrderedPool, in_global_window
from shardmill.transforms.common.progress import ProgressLog
from shardmill.transforms.common.spill import write_spill
from shardmill.transforms.job import JobOutputs
from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES
from shardmill.transforms.lc0.index import INDEX_SCHEMA, SourceIndex, index_source
from shardmill.transforms.lc0.index_cache import IndexCache, RejectedEntry, prune_stats
from shardmill.transforms.lc0.loading import LoadedTask, load_task
from shardmill.transforms.lc0.plan import Lc0Plan
from shardmill.transforms.lc0.record_format import LC0_INPUT_SUFFIXES
from shardmill.transforms.lc0.sampling import (MAX_TASK_BYTES, WRITE_LESS, GlobalDecisions, SamplingParams, decide,
                                               final_stats, merge_stats, plan_table, read_tasks, summarize_sources)
from shardmill.transforms.output.lifecycle import RunPaths
from shardmill.transforms.output.shard_count import ShardSizing, shard_count

_LOG = logging.getLogger(__name__)
LOAD_STATS = "load_stats"


class _IndexFilesFn(beam.DoFn):
    def __init__(self, count_method: str, expected_version: int, max_chunk_bytes: int, progress: ProgressLog,
                 cache: IndexCache | None):
        self._progress = progress
        self._method = count_method
        self._expected_version = expected_version
        self._max_chunk_bytes = max_chunk_bytes
        self._cache = cache
        self._store_failed = False
        self._chunks = Metrics.counter("shardmill.index", "chunks")
        self._records = Metrics.counter("shardmill.index", "records")
        self._errors = Metrics.counter("shardmill.index", "errors")
        self._sources = Metrics.counter("shardmill.index", "sources")

    def _index(self, path: str, size: int) -> tuple[SourceIndex, str]:
        """The source's index and where it came from: "cached", "indexed", or "rejected" (its cache entry was
        unusable: indexed again)."""
        cache = self._cache
        stamp = cache.source_stamp(path, size) if cache and cache.worth_caching(path) else None
        if stamp is None:
            return index_source(path, size, self._method, self._expected_version,
                                max_chunk_bytes=self._max_chunk_bytes), "indexed"
        key = cache.key(path, stamp)
        how = "indexed"
        try:
            cached = cache.lookup(key)
            if cached is not None:
                return cached, "cached"
        except RejectedEntry as err:
            _LOG.warning("index cache: ignoring %s; indexing %s again", err, path)
            how = "rejected"
        except Exception as err:  # noqa: BLE001 - a cache that cannot be read never stops the run
            _LOG.warning("index cache: cannot read the entry of %s (%s); indexing it", path, err)
        result = index_source(path, size, self._method, self._expected_version, max_chunk_bytes=self._max_chunk_bytes)
        # Stored only when the source did not change while it was indexed, and read whole: a source that could
        # not be read may read next time.
        if (not self._store_failed and all(d.reason != "unreadable" for d in result.dead_letters)
                and cache.source_stamp(path, size) == stamp):
            try:
                cache.store(key, result)
            except Exception as err:  # noqa: BLE001 - nor one that cannot be written
                if not self._store_failed:  # once: a full or read-only cache would say it for every source
                    _LOG.warning("index cache: cannot store the entry of %s (%s); this step stores no more",
                                 path, err)
                self._store_failed = True
        return result, how

    def process(self, files):
        tables = []
        skipped = 0
        origins = {"cached": 0, "indexed": 0, "rejected": 0}
        for path, size in files:
            result, how = self._index(path, size)
            origins[how] += 1
            tables.append(result.table)
            skipped += result.skipped_members
            for dead in result.dead_letters:
                self._errors.inc()
                yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())
        # One chunk per column: a table of 256 one-source chunks pickled 30x slower between stages.
        table = pa.concat_tables(tables).combine_chunks() if tables else INDEX_SCHEMA.empty_table()
        self._sources.inc(len(files))
        self._chunks.inc(table.num_rows)
        self._records.inc(pc.sum(table["num_records"]).as_py() or 0)
        yield beam.pvalue.TaggedOutput(SOURCE_STATS, {"sources": len(files), "skipped_members": skipped,
                                                      "sources_cached": origins["cached"],
                                                      "cache_rejected": origins["rejected"]})
        if table.num_rows:
            yield table
        self._progress.record("index", files=len(files), chunks=table.num_rows)


class IndexChunkFiles(beam.PTransform):
    """Stage 2: batches of (path, size) -> index tables.

    Returns a DoOutputsTuple: the main output (pyarrow Tables of INDEX_SCHEMA),
    ERRORS (DeadLetter dicts) and SOURCE_STATS (per-batch dicts with the number
    of sources, of those read from the index cache and of cache entries
    rejected, and of skipped non-chunk archive members). With an index cache
    (index_cache.py), sources whose entry proves them unchanged are not read.
    """

    def __init__(self, count_method: str = "scan", expected_version: int = 0,
                 max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, progress_dir: str | None = None,
                 cache: IndexCache | None = None):
        super().__init__()
        self._progress_dir = progress_dir
        self._method = count_method
        self._expected_version = expected_version
        self._max_chunk_bytes = max_chunk_bytes
        self._cache = cache

    def expand(self, file_batches):
        return file_batches | "Index" >> beam.ParDo(
            _IndexFilesFn(self._method, self._expected_version, self._max_chunk_bytes,
                          ProgressLog(self._progress_dir), self._cache)
        ).with_outputs(ERRORS, SOURCE_STATS, main="index")


def index_inputs(pipeline, patterns: list[str], count_method: str, expected_version: int,
                 max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, progress_dir: str | None = None,
                 cache: IndexCache | None = None):
    """Stages 1-2 on a pipeline: a dict of "index" (tables), ERRORS and SOURCE_STATS of both stages. With an
    index cache, unchanged sources come from it, and its entries unused for its max age are removed."""
    found = pipeline | "Discover" >> DiscoverFiles(patterns, LC0_INPUT_SUFFIXES)
    indexed = found["batches"] | "IndexChunks" >> IndexChunkFiles(count_method, expected_version, max_chunk_bytes,
                                                                     progress_dir, cache)
    stats = [found[SOURCE_STATS], indexed[SOURCE_STATS]]
    if cache is not None:
        stats.append(pipeline | "IndexCache" >> beam.Create([cache]) | "PruneIndexCache" >> beam.Map(prune_stats))
    return {
        "index": indexed["index"],
        ERRORS: (found[ERRORS], indexed[ERRORS]) | "DiscoverAndIndexErrors" >> beam.Flatten(),
        SOURCE_STATS: tuple(stats) | "DiscoverAndIndexStats" >> beam.Flatten(),
    }


class _LoadTasksFn(beam.DoFn):
    """Loads read tasks (an element: a spreading key and its tasks) and hands their per-shard batches to the shuffle
    (in memory within the run's budget, else spilled), `tasks_at_once` at a time.

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
        refs = write_spill(f"{self._paths.spill_dir}/{name}", loaded.batches, self._paths.shuffle_memory)
        loaded.batches = {}  # held or spilled: the frames need not wait for the bundle thread
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

    def process(self, keyed_tasks):
        for task in keyed_tasks[1]:
            for loaded, refs in self._pool.submit(self._load_and_spill, task):
                yield from self._outputs(loaded, refs)

    def finish_bundle(self):
        for loaded, refs in self._pool.drain():
            yield from (in_global_window(output) for output in self._outputs(loaded, refs))

    def teardown(self):
        self._pool.stop()


class _DecideFn(beam.CombineFn):
    """Index tables → the global decisions, decided over every source's summary.

    One combine in place of summaries, a list of them and a decision: Beam's fixed cost is per transform."""

    def __init__(self, pool_size: int):
        self._pool_size = pool_size

    def create_accumulator(self):
        return []

    def add_input(self, summaries, table):
        summaries.extend(summarize_sources(table))
        return summaries

    def merge_accumulators(self, accumulators):
        return [summary for summaries in accumulators for summary in summaries]

    def extract_output(self, summaries):
        return decide(summaries, self._pool_size)


class _PlanTotalsFn(beam.CombineFn):
    """Planned tables → (records planned, their statistics merged): both totals of the plan in one combine."""

    def create_accumulator(self):
        return 0, merge_stats([])

    def add_input(self, totals, table):
        return totals[0] + table.records_planned, merge_stats([totals[1], table.stats])

    def merge_accumulators(self, accumulators):
        accumulators = list(accumulators)
        return sum(records for records, _ in accumulators), merge_stats([stats for _, stats in accumulators])

    def extract_output(self, totals):
        return totals


def _planned_and_errors(table, decisions: GlobalDecisions, params: SamplingParams):
    planned = plan_table(table, decisions, params)
    yield planned
    for dead in planned.dead_letters:
        yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())


def _spread_key(task) -> int:
    """A stable, well-spread key of a read task: its source, first chunk and first emission."""
    first = task.chunks.slice(0, 1).to_pylist()[0]
    return fingerprint(f"{task.source}\0{first['chunk']}\0{first['emit_start']}") & 0xFFFFFFFF


def _record(decisions: GlobalDecisions) -> dict:
    return {"record_format": "lc0", "record_version": decisions.record_version, "record_size": decisions.record_size}


def _plan_stats(totals: tuple[int, dict], params: SamplingParams) -> dict:
    return {"plan": final_stats(totals[1], params)}


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
        # Few, fused steps: each transform costs Beam ~20 ms of CPU however little it does (tests pin the count).
        # The combines have no default of their own (a CombineGlobally's is 5 more transforms); the plan's single
        # values hang off one Impulse instead, with the combines as side inputs whose defaults are an empty
        # input's (no index table: every file a dead letter).
        decide_fn, totals_fn = _DecideFn(params.pool_size), _PlanTotalsFn()
        decided = tables | "Decide" >> beam.CombineGlobally(decide_fn).without_defaults()
        decisions = beam.pvalue.AsSingleton(decided, default_value=decide_fn.extract_output([]))
        plan_outputs = tables | "PlanChunks" >> beam.FlatMap(_planned_and_errors, decisions, params).with_outputs(
            ERRORS, main="planned")
        planned = plan_outputs["planned"]
        totals = beam.pvalue.AsSingleton(
            planned | "PlanTotals" >> beam.CombineGlobally(totals_fn).without_defaults(),
            default_value=totals_fn.extract_output(totals_fn.create_accumulator()))
        once = pbegin | "Once" >> beam.Impulse()
        num_shards = once | "NumShards" >> beam.Map(lambda _, *args: _num_shards(*args), totals, decisions,
                                                    plan.sizing, ProgressLog(self._paths.progress_dir))
        loaded = (
            planned
            | "ReadTasks" >> beam.FlatMap(
                lambda table, n, limit: ((_spread_key(task), task)
                                         for task in read_tasks(table.used, params, n, MAX_TASK_BYTES, limit)),
                beam.pvalue.AsSingleton(num_shards), plan.max_chunk_bytes).with_output_types(
                    typing.Tuple[int, typing.Any])
            # Keys hashed from each task's identity spread the tasks over workers as a Reshuffle's random keys
            # would, in 1 transform where it takes 5, and the same on every run (rule: seeded randomness).
            | "SpreadTasks" >> beam.GroupByKey()
            | "Load" >> beam.ParDo(_LoadTasksFn(self._paths, plan.load_tasks_at_once)).with_outputs(
                ERRORS, LOAD_STATS, main="refs")
        )
        plan_errors = plan_outputs[ERRORS]
        plan_stats = once | "PlanStats" >> beam.Map(lambda _, totals: _plan_stats(totals, params), totals)
        return JobOutputs(
            shard_refs=loaded["refs"],
            num_shards=num_shards,
            record=once | "Record" >> beam.Map(lambda _, decisions: _record(decisions), decisions),
            errors=(indexed[ERRORS], plan_errors, loaded[ERRORS]) | "AllErrors" >> beam.Flatten(),
            stats=(plan_stats, loaded[LOAD_STATS], indexed[SOURCE_STATS]) | "AllStats" >> beam.Flatten(),
        )


def _num_shards(totals: tuple[int, dict], decisions: GlobalDecisions, sizing: ShardSizing,
                progress: ProgressLog) -> int:
    records_planned = totals[0]
    num_shards = shard_count(records_planned * decisions.record_size, sizing, WRITE_LESS)
    progress.record("load", total_records=records_planned)
    _LOG.info("plan: %s records, %.1f MiB of output in %d shard(s)", f"{records_planned:,}",
              records_planned * decisions.record_size / 2**20, num_shards)
    return num_shards
