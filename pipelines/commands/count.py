"""`shardmill count`: index lc0 chunk files and report what they hold (the job kind's count).

The kind says what to count (JobKind.count_settings) and renders the result; the pipeline is built and run here,
in the command layer, like run's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
import uuid

from shardmill.pipelines.commands import EXIT_OK, Command


def add_parser(subparsers, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "count", parents=[common],
        help="index lc0 chunk files (.tar archives, .gz chunks) and report what they hold",
        description="Runs discovery and indexing (stages 1-2) and prints sources, chunks, records, "
        "errors and a histogram of records per chunk. Unknown options go to Beam.",
    )
    p.add_argument("inputs", nargs="*", help="files, glob patterns or directories (default: config's input)")
    p.add_argument("--config", help="text-format JobConfig; its input and index settings are used")
    p.add_argument(
        "--count-method",
        choices=["trailer", "scan", "decompress"],
        help="how record counts are established (default: config's, else scan)",
    )
    p.add_argument("--verify", action="store_true", help="same as --count-method decompress (checks CRCs)")
    p.add_argument("--lc0-version", type=int, help="require this record version (3..7)")
    p.add_argument("--index-cache", help="index cache location, or none (default: config's lc0.index.cache, "
                   "else ~/.cache/shardmill/index for a local run)")
    p.add_argument("--index-out", help="write the chunk index here as Parquet")
    p.add_argument("--errors-out", help="write the dead letters here as JSON lines")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def run_count(patterns: list[str], count_method: str, expected_version: int, options, index_out: str | None = None,
              errors_out: str | None = None, max_chunk_bytes: int | None = None, cache=None):
    """Runs discover + index (through the index cache, if any) and writes the index (Parquet), dead letters
    (JSON lines) and summary; returns lc0's CountResult. max_chunk_bytes None: the index's default."""
    from shardmill.pipelines.runner import check_services_reachable, is_local_run, make_pipeline
    from shardmill.transforms.common.progress import ProgressPrinter
    from shardmill.transforms.lc0.count import CountIndex, CountPaths, CountSettings, read_count_result
    from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES

    settings = CountSettings(tuple(patterns), count_method, expected_version, max_chunk_bytes or DEFAULT_MAX_CHUNK_BYTES,
                             cache)
    if not is_local_run(options):
        check_services_reachable(options)
    work_dir = count_work_dir(options, index_out, errors_out)
    paths = CountPaths(index=index_out or f"{work_dir}/index.parquet",
                       errors=errors_out or f"{work_dir}/errors.jsonl", summary=f"{work_dir}/summary.json")
    started = time.monotonic()
    progress_dir = f"{work_dir}/progress" if is_local_run(options) else None
    with contextlib.ExitStack() as progress_running:
        progress_running.callback(_remove_work_dir, work_dir)
        if progress_dir:
            os.makedirs(progress_dir)
            progress = ProgressPrinter(progress_dir)
            progress.start()
            progress_running.callback(progress.stop)  # after the pipeline has run (it runs on leaving `with p`)
        with make_pipeline(options) as p:
            _ = p | "Count" >> CountIndex(settings, paths, progress_dir)
        return read_count_result(paths, time.monotonic() - started)


def count_work_dir(options, index_out: str | None, errors_out: str | None) -> str:
    """Where the count's workers write the files the launcher reads: a new temporary directory on this machine for
    a local run; for a runner's workers, which share no disk with the launcher, under the run's --temp_location on
    storage both reach (a UsageError without one, or for --index-out/--errors-out on local disk)."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    from shardmill.core.errors import UsageError
    from shardmill.pipelines.runner import is_local_run
    from shardmill.transforms.common.filesystem import is_local

    if is_local_run(options):
        return tempfile.mkdtemp(prefix="shardmill-count-")
    for flag, path in (("--index-out", index_out), ("--errors-out", errors_out)):
        if path and is_local(path):
            raise UsageError(f"{flag} {path}: on a runner's workers the file would be written to a worker's own "
                             "disk; give a location on storage the workers reach (gs://, s3://)")
    temp_location = options.view_as(GoogleCloudOptions).temp_location
    if not temp_location or is_local(temp_location):
        raise UsageError("count on a runner's workers needs --temp_location on storage both they and this machine "
                         f"reach (gs://, s3://), where they write what count reads back; got {temp_location!r}")
    return f"{temp_location.rstrip('/')}/shardmill-count-{uuid.uuid4().hex[:12]}"


def _remove_work_dir(work_dir: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    from shardmill.transforms.common.filesystem import is_local

    if is_local(work_dir):
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        FileSystems.delete([work_dir + "/"])  # a prefix: every object below it


def execute(args: argparse.Namespace, beam_args: list[str]) -> int:
    from shardmill.pipelines import beam_options
    from shardmill.pipelines import config as config_lib
    from shardmill.pipelines.jobs import job_kind

    beam_options.import_beam()
    from shardmill.pipelines.runner import is_local_run

    config = config_lib.load_config(args.config) if args.config else config_lib.JobConfig()
    if args.inputs:
        del config.input[:]
        config.input.extend(args.inputs)
    config_lib.validate(config)
    options = beam_options.pipeline_options(beam_options.with_local_worker_logs(beam_args, args.verbose))
    kind = job_kind(config)
    settings = kind.count_settings(config, args, is_local_run(options))
    result = run_count(list(settings.patterns), settings.count_method, settings.expected_version, options,
                       args.index_out, args.errors_out, settings.max_chunk_bytes, settings.cache)
    print(kind.render_count(settings, result, args))
    return EXIT_OK


COMMAND = Command("count", add_parser, execute, takes_beam_options=True)
