"""`shardmill count`: index lc0 chunk files and report what they hold (the job kind's count)."""

from __future__ import annotations

import argparse

from shardmill.pipelines.commands import Command


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


def execute(args: argparse.Namespace, beam_args: list[str]) -> int:
    from shardmill.pipelines import beam_options
    from shardmill.pipelines import config as config_lib
    from shardmill.pipelines.jobs import job_kind

    config = config_lib.load_config(args.config) if args.config else config_lib.JobConfig()
    if args.inputs:
        del config.input[:]
        config.input.extend(args.inputs)
    config_lib.validate(config)
    options = beam_options.pipeline_options(beam_options.with_local_worker_logs(beam_args, args.verbose))
    return job_kind(config).count(config, args, options)


COMMAND = Command("count", add_parser, execute, takes_beam_options=True)
