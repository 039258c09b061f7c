"""`shardmill count`: index lc0 chunk files and report what they hold (the job kind's count).

The kind says what to count (JobKind.count_settings) and renders the result; the pipeline is built and run here,
in the command layer, like run's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time

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
    from shardmill.pipelines.runner import is_local_run, make_pipeline
    from shardmill.transforms.common.progress import ProgressPrinter
    from shardmill.transforms.lc0.count import CountIndex, CountPaths, CountSettings, read_count_result
    from shardmill.transforms.lc0.gzip_chunks import DEFAULT_MAX_CHUNK_BYTES

    settings = CountSettings(tuple(patterns), count_method, expected_version, max_chunk_bytes or DEFAULT_MAX_CHUNK_BYTES,
                             cache)
    work_dir = tempfile.mkdtemp(prefix="shardmill-count-")
    paths = CountPaths(index=index_out or f"{work_dir}/index.parquet",
                       errors=errors_out or f"{work_dir}/errors.jsonl", summary=f"{work_dir}/summary.json")
    started = time.monotonic()
    progress_dir = f"{work_dir}/progress" if is_local_run(options) else None
    with contextlib.ExitStack() as progress_running:
        if progress_dir:
            os.makedirs(progress_dir)
            progress = ProgressPrinter(progress_dir)
            progress.start()
            progress_running.callback(progress.stop)  # after the pipeline has run (it runs on leaving `with p`)
        with make_pipeline(options) as p:
            _ = p | "Count" >> CountIndex(settings, paths, progress_dir)
    return read_count_result(paths, time.monotonic() - started)


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
