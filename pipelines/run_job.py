"""`shardmill run`: one output lifecycle for every job kind.

  check the output path, then the job's plan (JobKind.plan: before any output is touched)
  claim the output (one run at a time), refuse an existing output without --overwrite,
      clean what crashed runs left
  build and run the pipeline: JobKind.transform → WriteShardedOutput,
      everything staged under `.staging-<run id>/`
  commit the staged generation (manifest last, atomically), or — if bad
      input exceeded max_error_fraction — keep only its report in `.rejected/`
  release the claim; on any failure, drop the staging directory

The previous output stays complete and readable until the commit point.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import time
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineState
from google.protobuf import text_format

from shardmill.core.errors import EXIT_ERROR_BUDGET, EXIT_FAILED, ShardmillError
from shardmill.pipelines.config import JobConfig
from shardmill.pipelines.jobs import job_kind
from shardmill.pipelines.runner import (check_services_reachable, counter_values, is_local_run, local_runner,
                                        make_pipeline)
from shardmill.pipelines.terminal import signals_deferred
from shardmill.transforms.common.filesystem import check_stores_reachable, is_local, use_pipeline_options
from shardmill.transforms.common.memory_budget import run_shuffle_memory
from shardmill.transforms.common.ordered_pool import elements_at_once
from shardmill.transforms.common.progress import ProgressPrinter
from shardmill.transforms.common.spill import ShuffleMemory, release_shuffle_memory
from shardmill.transforms.job import JobKind
from shardmill.transforms.output import lifecycle
from shardmill.transforms.output.claim import OutputClaim
from shardmill.transforms.output.lifecycle import OutputExistsError, RunPaths  # noqa: F401  (re-exported)
from shardmill.transforms.output.shard_format import ShardCompression
from shardmill.transforms.output.sharded_output import WriteShardedOutput

_LOG = logging.getLogger(__name__)


class ErrorBudgetExceeded(ShardmillError, RuntimeError):
    """The run met more bad input than max_error_fraction allows; nothing was committed."""

    exit_code = EXIT_ERROR_BUDGET

    def __init__(self, manifest: dict, report_dir: str, max_fraction: float):
        fraction = manifest["stats"]["accounting"]["error_fraction"]
        super().__init__(f"{fraction:.2%} of the input was bad, more than max_error_fraction {max_fraction:.2%}; "
                         f"nothing was committed, the previous output (if any) is unchanged; "
                         f"report in {report_dir}")
        self.manifest = manifest
        self.report_dir = report_dir


class CommittedWithError(lifecycle.CommittedWithError):
    """The new generation stands and a step after the commit point failed; with the run's summary (rendered before
    the commit point) for the command to show."""

    def __init__(self, output_dir: str, generation: int, cause: BaseException, summary: str):
        super().__init__(output_dir, generation, cause)
        self.summary = summary


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a committed run hands back."""

    manifest: dict  # the committed manifest
    summary: str  # the run's summary, rendered from the prepared manifest before the commit point
    counters: dict[str, int]  # shardmill's Beam counters of the finished pipeline ({} where the runner has none)


class RunFailed(ShardmillError, RuntimeError):
    """The pipeline failed (I/O error, disk full, a worker crash); the cause is chained."""

    exit_code = EXIT_FAILED

    def __init__(self, cause: BaseException):
        super().__init__(one_line(cause))


# Where a traceback names an exception: "ValueError: ..." or, for one outside the builtins, "pkg.mod.Name: ...", at the
# start of a line or after "; " (some runners relay a traceback's lines joined so).
_EXCEPTION_HEAD = re.compile(r"(?:^|(?<=; ))(?P<module>(?:[A-Za-z_]\w*\.)*)(?P<name>[A-Z]\w*): ", re.MULTILINE)
_TRACEBACK_START = "Traceback (most recent call last):"


def _exception_lines(text: str) -> list[str]:
    """Each "Name: message" a (relayed) traceback holds, in order, its message up to the next one or line end."""
    heads = [m for m in _EXCEPTION_HEAD.finditer(text)
             if m.group("module") or m.group("name").endswith(("Error", "Exception", "Exit", "Interrupt"))]
    found = []
    for head, following in zip(heads, [*heads[1:], None]):
        end = text.find("\n", head.end())
        end = len(text) if end < 0 else end
        if following is not None and following.start() < end:
            end = following.start()
        message = text[head.end():end].strip().removesuffix(";").strip()
        found.append(f"{head.group('name')}: {message}")
    return found


def one_line(err: BaseException) -> str:
    """The gist of an exception: runners wrap a worker's error in tracebacks and step names (PortableRunner: a
    RuntimeError whose message is the job's traceback, holding the worker's as "RuntimeError: Traceback ..."), so
    the innermost exception of the text that is not itself the start of a relayed traceback."""
    if isinstance(err, RunFailed):
        return str(err)  # its cause's gist already
    text = str(err).strip() or type(err).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(_exception_lines(text)):
        if not line.split(": ", 1)[1].startswith(_TRACEBACK_START):
            return line
    for cause in (err.__cause__, err.__context__):
        if isinstance(cause, OSError):
            return f"{type(cause).__name__}: {cause}"
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


# How long an interrupted launcher waits for the runner to say its job ended after asking it to cancel.
CANCEL_WAIT_SECONDS = 20.0


def cancel_unfinished(result, wait_seconds: float = CANCEL_WAIT_SECONDS) -> None:
    """Cancels a runner's job that is not over (the launcher was interrupted, or its wait failed): a job left to
    run would go on holding the runner's workers with nobody to commit what it writes. Waits at most
    wait_seconds for the runner to report an end; a runner that cannot cancel, or does not answer, is logged."""
    try:
        if PipelineState.is_terminal(result.state):
            return
        job_service = getattr(result, "_job_service", None)  # PortableRunner's cancel() closes its channel
        result.cancel()
        state = result.state if job_service is None else _portable_state(job_service, result)
        deadline = time.monotonic() + wait_seconds
        while not PipelineState.is_terminal(state) and time.monotonic() < deadline:
            time.sleep(0.5)
            state = result.state if job_service is None else _portable_state(job_service, result)
        if PipelineState.is_terminal(state):
            _LOG.debug("the runner's job was cancelled: %s", state)
        else:
            _LOG.warning("asked the runner to cancel its job; after %.0f s it is still %s", wait_seconds, state)
    except Exception as err:  # noqa: BLE001  the run ends as interrupted/failed whatever the runner answers
        _LOG.warning("could not cancel the runner's job: %s", one_line(err))


def _portable_state(job_service, result) -> str:
    from apache_beam.portability.api import beam_job_api_pb2

    state = job_service.GetState(beam_job_api_pb2.GetJobStateRequest(job_id=result._job_id), timeout=10).state
    return beam_job_api_pb2.JobState.Enum.Name(state)


def _release_shuffle_memory(memory: ShuffleMemory, spill_dir: str) -> None:
    """Frees what the run's shuffle held in memory once its pipeline ended, and says how the budget went (on every
    local run, a budget of 0 included; its spill files are counted before the run commits or fails)."""
    figures = release_shuffle_memory(memory, spill_dir)
    if memory.run_key:
        _LOG.info("shuffle: %d task(s) kept in memory (peak %.1f MiB of a %.1f MiB budget)%s",
                  figures["tasks_held"], figures["peak_bytes"] / 2**20, memory.budget_bytes / 2**20,
                  "" if figures["tasks_spilled"] is None else f", {figures['tasks_spilled']} spilled")


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def build_graph(p: beam.Pipeline, config: JobConfig, plan, paths: RunPaths, local_run: bool, *,
                kind: JobKind | None = None) -> None:
    """Adds the job of the config's kind (planned by its JobKind.plan), and the shared ending, to a pipeline.
    kind: the config's JobKind, where the caller has it already."""
    started_at = time.time()
    kind = job_kind(config) if kind is None else kind
    _ = (
        p
        | "Job" >> kind.transform(config, plan, paths)
        | "Output" >> WriteShardedOutput(
            paths, kind.shard_format(config, plan), row_group_bytes=config.output.row_group_bytes,
            compression=ShardCompression.of(config.output), config_text=text_format.MessageToString(config),
            seed=config.seed, started_at=started_at, shards_at_once=elements_at_once(local_run),
        )
    )


# Config sections whose strings name no place the job reads: Megatron's cache takes the training job's data
# paths only as text to hash (an s3:// one there is never read, so never probed).
NOT_PLACES_READ = frozenset({"MegatronCache"})


def config_strings(message) -> list[str]:
    """Every string a config sets, in nested sections too: the places its inputs, output, corpora and index
    cache name, for the reachability probe, which takes the object-store paths among them."""
    strings = []
    for field, value in message.ListFields():
        if field.type == field.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            items = [i for key in value for i in (key, value[key])]  # a map: its keys and values
        else:
            items = value if field.is_repeated else [value]
        if field.message_type is not None and field.message_type.name in NOT_PLACES_READ:
            continue
        for item in items:
            if isinstance(item, str):
                strings.append(item)
            elif hasattr(item, "ListFields"):
                strings += config_strings(item)
    return strings


def check_overwrite(output_dir: str, committed, overwrite: bool) -> None:
    """OutputExistsError for an output that holds a committed generation, unless overwriting."""
    if committed is not None and not overwrite:
        raise OutputExistsError(f"output {output_dir!r} already holds an output (generation "
                                f"{committed.generation}); pass --overwrite (or output.overwrite) to replace it")


def _cannot_write(output_dir: str, err: OSError) -> lifecycle.OutputPathError:
    """The first bytes of a run (its claim, its staging marker) could not be written."""
    return lifecycle.OutputPathError(f"output {output_dir}: cannot write there ({err.strerror or err})")


def run_job(config: JobConfig, inputs: list[str], output_dir: str, options: PipelineOptions, *,
            break_claim: bool = False, run_id: str | None = None, kind: JobKind | None = None) -> RunResult:
    """Runs the job into output_dir and returns what it committed (RunResult). A local run logs a progress line per
    stage while it runs. kind: the config's JobKind, where the caller has it already.

    Raises OutputPathError / OutputExistsError / ClaimHeldError before any
    work, ErrorBudgetExceeded after the run (nothing committed),
    CommittedWithError for a failure after the commit point (the new
    generation stands), and lets every other failure propagate after
    cleaning up (nothing committed).
    """
    use_pipeline_options(options)
    check_stores_reachable([*config_strings(config), output_dir])
    lifecycle.check_output_path(output_dir, list(config.input))
    kind = job_kind(config) if kind is None else kind
    local_run = is_local_run(options)
    if not local_run:
        check_services_reachable(options)
    plan = kind.plan(config, inputs, local_run)
    claim = OutputClaim(output_dir, run_id or new_run_id())
    try:
        notes = claim.acquire(break_claim)
    except OSError as err:
        raise _cannot_write(output_dir, err) from None
    paths = None
    try:
        committed = lifecycle.read_committed(output_dir)
        check_overwrite(output_dir, committed, config.output.overwrite)
        notes += lifecycle.clean_leftovers(output_dir, committed)
        for note in notes:
            _LOG.warning("%s", note)
        claim.start_heartbeat()
        paths = RunPaths(output_dir, claim.info.run_id, (committed.generation if committed else 0) + 1,
                         report_progress=local_run and is_local(output_dir) and "://" not in output_dir,
                         shuffle_memory=run_shuffle_memory(
                             config.output.shuffle_memory_bytes if config.output.HasField("shuffle_memory_bytes")
                             else None, claim.info.run_id, options) if local_run else ShuffleMemory())
        try:
            lifecycle.start_staging(paths, claim.info.to_bytes())
        except OSError as err:
            raise _cannot_write(output_dir, err) from None
        kind.stage(plan, paths)
        p = make_pipeline(options)
        build_graph(p, config, plan, paths, local_run, kind=kind)
        progress = ProgressPrinter(paths.progress_dir) if paths.progress_dir else None
        pipeline_result = None
        try:
            if progress:
                progress.start()
            pipeline_result = p.run()
            pipeline_result.wait_until_finish()
        except BaseException as err:
            if pipeline_result is not None and not local_run:
                with signals_deferred():
                    cancel_unfinished(pipeline_result)
            if isinstance(err, Exception):
                raise RunFailed(err) from err
            raise
        finally:
            if progress:
                progress.stop()
            _release_shuffle_memory(paths.shuffle_memory, paths.spill_dir)
        counters = counter_values(pipeline_result)
        manifest = lifecycle.read_prepared_manifest(paths)
        if manifest["stats"]["accounting"]["error_fraction"] > config.max_error_fraction:
            with signals_deferred():
                report_dir = lifecycle.reject(paths)
            raise ErrorBudgetExceeded(manifest, report_dir, config.max_error_fraction)
        kind.check_outcome(config, manifest)  # a refusal commits nothing
        summary = kind.render_summary(manifest)  # a failure here commits nothing
        with signals_deferred(reraise=False):
            claim.check_held()
            try:
                manifest = lifecycle.commit(paths, committed, config.output.keep_generations)
            except lifecycle.CommittedWithError as err:
                raise CommittedWithError(paths.base, err.generation, err.__cause__, summary) from err.__cause__
    except BaseException:
        if paths is not None:
            release_shuffle_memory(paths.shuffle_memory)
            with signals_deferred():
                lifecycle.discard(paths)
        claim.release()
        raise
    try:
        claim.release()
    except Exception as err:
        raise CommittedWithError(output_dir, paths.generation, err, summary) from err
    return RunResult(manifest, summary, counters)


def dry_run(config: JobConfig, options: PipelineOptions, graph_depth: int = 2, *, kind: JobKind | None = None) -> str:
    """Everything a run checks before work, then the graph built and serialized as a runner receives it.

    Checks the output path, refuses an existing output without --overwrite,
    expands and checks local inputs (remote patterns, gs:// and s3://, are
    taken as they are: listing them needs the runner's credentials) and makes
    the job's plan (JobKind.plan). Writes nothing and runs nothing.
    graph_depth: after the summary line, the graph's transforms to this depth, one a line (0: none).
    kind: the config's JobKind, where the caller has it already.
    """
    kind = job_kind(config) if kind is None else kind
    check_stores_reachable(config_strings(config))
    inputs = kind.inputs(config, check_remote=False)
    output_dir = config.output.path
    lifecycle.check_output_path(output_dir, list(config.input))
    check_overwrite(output_dir, lifecycle.read_committed(output_dir), config.output.overwrite)
    local_run = is_local_run(options)
    plan = kind.plan(config, inputs, local_run)
    p = beam.Pipeline(runner=local_runner(options), options=options)  # never run: no runner is contacted
    try:
        build_graph(p, config, plan, RunPaths(output_dir, "dry-run", 1), local_run, kind=kind)
        graph = p.to_runner_api()  # pickles every DoFn, as a submission would
    finally:  # Beam removes a pipeline's temporary directory only when it runs
        shutil.rmtree(p.local_tempdir, ignore_errors=True)
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    summary = (f"dry run: {kind.name} job, {len(graph.components.transforms)} transforms, {len(inputs)} input "
               f"pattern(s), output {output_dir}, runner {runner}; graph built and serialized, nothing submitted")
    return "\n".join([summary, *graph_lines(graph, graph_depth)])


def graph_lines(graph, max_depth: int) -> list[str]:
    """The pipeline's transforms as an indented tree down to max_depth levels, in the graph's order."""
    transforms = graph.components.transforms
    lines = []

    def walk(transform_id: str, depth: int) -> None:
        if depth >= max_depth:
            return
        transform = transforms[transform_id]
        lines.append("  " * (depth + 1) + transform.unique_name.rsplit("/", 1)[-1])
        for child in transform.subtransforms:
            walk(child, depth + 1)

    for root in graph.root_transform_ids:  # the pipeline's own root: its children are the top level
        for child in transforms[root].subtransforms:
            walk(child, 0)
    return lines
