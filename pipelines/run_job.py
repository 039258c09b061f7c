"""`shardmill run`: the whole job, lc0 chunks in, sampled and shuffled Parquet shards out.

The graph reads top to bottom as DESIGN.md's data flow: discover, index,
plan (one global element), load (per source, planned chunks only), shuffle
(group record batches by shard), write (one Parquet file per shard), commit
(manifest last). Dead letters of every stage end in errors.jsonl.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import logging
import os
import time
import typing

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from google.protobuf import text_format

from shardmill.pipelines.config import JobConfig, count_method, sampling_params
from shardmill.pipelines.count_job import index_inputs, sort_index
from shardmill.pipelines.inputs import expand_inputs
from shardmill.pipelines.runner import local_runner, make_pipeline
from shardmill.transforms import manifest as manifest_lib
from shardmill.transforms.chunk_loading import load_task
from shardmill.transforms.index_transforms import ERRORS
from shardmill.transforms.job_plan import OutputParams, make_plan
from shardmill.transforms.keyed_hash import fingerprint
from shardmill.transforms.spill import delete_spills, read_spilled, spill_dir, write_spill
from shardmill.transforms.shard_writer import output_schema, write_shard

_LOG = logging.getLogger(__name__)
LOAD_STATS = "load_stats"
WRITE_THREADS = min(2, os.cpu_count() or 1)  # shards written at once per worker


class OutputExistsError(ValueError):
    """The output directory already holds a shardmill output."""


def prepare_output(output_dir: str, overwrite: bool) -> None:
    """Creates the output directory; refuses (or with overwrite, clears) an existing output."""
    base = output_dir.rstrip("/")
    existing = [m.path for r in FileSystems.match([f"{base}/shard-*.parquet", f"{base}/{manifest_lib.MANIFEST_NAME}",
                                                   f"{base}/{manifest_lib.ERRORS_NAME}"]) for m in r.metadata_list]
    if existing and not overwrite:
        raise OutputExistsError(f"output {output_dir!r} already holds {len(existing)} output file(s); "
                                "pass --overwrite (or output.overwrite) to replace them")
    if existing:
        # The manifest goes first so a reader never sees it beside a partial set of shards.
        existing.sort(key=lambda p: not p.endswith(manifest_lib.MANIFEST_NAME))
        FileSystems.delete(existing)
    if not FileSystems.exists(base):
        FileSystems.mkdirs(base)
    delete_spills(base)  # leftovers of an interrupted run


class _LoadTasksFn(beam.DoFn):
    """Loads a read task and spills its per-shard batches; emits (shard, spill ref) pairs."""

    def __init__(self, output_dir: str):
        self._spill_dir = spill_dir(output_dir)
        self._records = Metrics.counter("shardmill.load", "records")
        self._errors = Metrics.counter("shardmill.load", "errors")

    def setup(self):
        self._started = self._last_log = time.monotonic()
        self._done_records = self._done_tasks = 0

    def process(self, task):
        loaded = load_task(task)
        for dead in loaded.dead_letters:
            self._errors.inc()
            yield beam.pvalue.TaggedOutput(ERRORS, dead.to_dict())
        yield beam.pvalue.TaggedOutput(LOAD_STATS, {
            "chunks_loaded": loaded.chunks_loaded,
            "uses_written": loaded.uses_written,
            "records_written": loaded.records_written,
        })
        name = f"task-{fingerprint(task.source):016x}-{task.chunks['chunk'][0].as_py():08d}.arrow"
        yield from write_spill(f"{self._spill_dir}/{name}", loaded.batches)
        self._records.inc(loaded.records_written)
        self._done_records += loaded.records_written
        self._done_tasks += 1
        now = time.monotonic()
        if now - self._last_log >= 10:
            self._last_log = now
            _LOG.info("loaded %d read tasks, %d records (%.0f records/s on this worker)", self._done_tasks,
                      self._done_records, self._done_records / (now - self._started))


class _WriteShardFn(beam.DoFn):
    """Writes shards, up to WRITE_THREADS at a time within a bundle.

    pyarrow's Parquet encoding and zstd release the GIL, so a worker with
    several shards in its bundle keeps more than one core busy; entries are
    emitted as writes finish, and all of them by the end of the bundle.
    """

    def __init__(self, output_dir: str, row_group_bytes: int, zstd_level: int):
        self._output_dir = output_dir
        self._row_group_bytes = row_group_bytes
        self._zstd_level = zstd_level

    def setup(self):
        self._pool = concurrent.futures.ThreadPoolExecutor(WRITE_THREADS)

    def start_bundle(self):
        self._pending = collections.deque()

    def _write(self, shard: int, refs: list, plan_info: dict) -> dict:
        record_size = plan_info["record_size"]
        entry = write_shard(self._output_dir, shard, plan_info["num_shards"], read_spilled(refs), record_size,
                            max(1, self._row_group_bytes // record_size), self._zstd_level)
        _LOG.info("wrote %s: %d rows", entry["path"], entry["rows"])
        return entry

    def process(self, shard_and_refs, plan_info):
        shard, refs = shard_and_refs
        self._pending.append(self._pool.submit(self._write, shard, [r for r in refs if r is not None], plan_info))
        while len(self._pending) > WRITE_THREADS:
            yield self._pending.popleft().result()

    def finish_bundle(self):
        while self._pending:
            yield GlobalWindows.windowed_value(self._pending.popleft().result())

    def teardown(self):
        self._pool.shutdown(wait=True)


def _plan_info(plan) -> dict:
    return {"num_shards": plan.num_shards, "record_size": plan.record_size,
            "record_version": plan.record_version, "stats": plan.stats}


def _commit(shards, plan_info, dead_letters, load_stats, output_dir, config_text, seed, started_at):
    schema = [{"name": f.name, "type": str(f.type)} for f in output_schema(plan_info["record_size"])]
    manifest = manifest_lib.build_manifest(
        config_text=config_text, seed=seed, record_version=plan_info["record_version"],
        record_size=plan_info["record_size"], schema=schema, plan_stats=plan_info["stats"],
        load_stats=load_stats, dead_letters=dead_letters, shards=shards,
        timings={"seconds": round(time.time() - started_at, 3)},
    )
    manifest_lib.commit(output_dir, manifest, dead_letters)
    delete_spills(output_dir)


def build_job(p: beam.Pipeline, config: JobConfig, patterns: list[str], output_dir: str) -> None:
    """Adds the whole job to a pipeline."""
    params = sampling_params(config)
    out = config.output
    output_params = OutputParams(num_shards=out.num_shards, target_shard_bytes=out.target_shard_bytes)
    started_at = time.time()

    indexed = index_inputs(p, patterns, count_method(config), config.index.lc0_version)
    plan = (
        indexed["index"]
        | "WholeIndex" >> beam.combiners.ToList()
        | "Plan" >> beam.Map(lambda tables: make_plan(sort_index(tables), params, output_params))
    )
    plan_info = plan | "PlanInfo" >> beam.Map(_plan_info)
    plan_errors = plan | "PlanErrors" >> beam.FlatMap(lambda pl: [d.to_dict() for d in pl.dead_letters])
    loaded = (
        plan
        | "ReadTasks" >> beam.FlatMap(lambda pl: pl.tasks)
        | "SpreadTasks" >> beam.Reshuffle()
        | "Load" >> beam.ParDo(_LoadTasksFn(output_dir)).with_outputs(ERRORS, LOAD_STATS, main="batches")
    )
    every_shard = plan_info | "EveryShard" >> beam.FlatMap(lambda i: [(s, None) for s in range(i["num_shards"])])
    shards = (
        (loaded["batches"], every_shard)
        | "ShardBatches" >> beam.Flatten()
        # Inference can't see through the tagged outputs of Load; state the pair type.
        | "AsShardPairs" >> beam.Map(lambda kv: kv).with_output_types(typing.Tuple[int, typing.Any])
        | "Shuffle" >> beam.GroupByKey()
        | "Write" >> beam.ParDo(_WriteShardFn(output_dir, out.row_group_bytes, out.zstd_level),
                                beam.pvalue.AsSingleton(plan_info))
    )
    errors = (indexed[ERRORS], plan_errors, loaded[ERRORS]) | "AllErrors" >> beam.Flatten()
    _ = (
        shards
        | "AllShards" >> beam.combiners.ToList()
        | "Commit" >> beam.Map(
            _commit,
            beam.pvalue.AsSingleton(plan_info),
            beam.pvalue.AsList(errors),
            beam.pvalue.AsList(loaded[LOAD_STATS]),
            output_dir,
            text_format.MessageToString(config),
            config.seed,
            started_at,
        )
    )


def run_job(config: JobConfig, patterns: list[str], output_dir: str, options: PipelineOptions) -> dict:
    """Runs the job (lc0, or label sampling when configured) and returns the manifest it committed."""
    prepare_output(output_dir, config.output.overwrite)
    with make_pipeline(options) as p:
        if config.HasField("token_dataset"):
            from shardmill.pipelines.token_job import build_token_job

            build_token_job(p, config, output_dir)
        elif config.HasField("label_sampling"):
            from shardmill.pipelines.label_job import build_label_job

            build_label_job(p, config, patterns, output_dir)
        else:
            build_job(p, config, patterns, output_dir)
    with FileSystems.open(f"{output_dir.rstrip('/')}/{manifest_lib.MANIFEST_NAME}") as f:
        return json.loads(f.read())


def dry_run(config: JobConfig, options: PipelineOptions) -> str:
    """Builds the job's graph and serializes it as a runner would receive it; runs nothing.

    Local inputs are expanded and checked; remote patterns (gs://, s3://) are
    taken as they are, since listing them needs the runner's credentials.
    """
    local = [i for i in config.input if FileSystems.get_scheme(i) is None]
    remote = [i for i in config.input if FileSystems.get_scheme(i) is not None]
    patterns = (expand_inputs(local) if local else []) + remote
    p = beam.Pipeline(runner=local_runner(options), options=options)  # never run: no runner is contacted
    build_job(p, config, patterns, config.output.path)
    graph = p.to_runner_api()  # pickles every DoFn, as a submission would
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    return (f"dry run: {len(graph.components.transforms)} transforms, {len(patterns)} input pattern(s), "
            f"output {config.output.path}, runner {runner}; graph built and serialized, nothing submitted")
