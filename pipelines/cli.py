"""The `shardmill` command line.

Subcommands:
  count INPUT...   index lc0 chunk files and report what they hold

Arguments the subcommand does not know are Beam pipeline options
(e.g. --direct_running_mode=multi_processing --direct_num_workers=2).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def _drop_beam_optional_dependency_noise(record: logging.LogRecord) -> bool:
    # Beam logs this on import whenever the GCP extras are absent; it is not about our job.
    return "apitools not found" not in record.getMessage()


logging.getLogger().addFilter(_drop_beam_optional_dependency_noise)

from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from shardmill.pipelines import config as config_lib  # noqa: E402
from shardmill.pipelines.inputs import InputError, expand_inputs  # noqa: E402

MAX_ERRORS_SHOWN = 20


def _add_count_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "count",
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
    p.add_argument("--index-out", help="write the chunk index here as Parquet")
    p.add_argument("--errors-out", help="write the dead letters here as JSON lines")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _count(args, beam_args) -> int:
    config = config_lib.load_config(args.config) if args.config else config_lib.JobConfig()
    if args.inputs:
        del config.input[:]
        config.input.extend(args.inputs)
    if args.lc0_version is not None:
        config.index.lc0_version = args.lc0_version
    config_lib.validate(config)
    method = "decompress" if args.verify else args.count_method or config_lib.count_method(config)
    patterns = expand_inputs(list(config.input))

    from shardmill.pipelines.count_job import run_count  # Beam graph code, imported on use

    result = run_count(
        patterns, method, config.index.lc0_version, PipelineOptions(beam_args), args.index_out, args.errors_out
    )
    if args.json:
        print(json.dumps({"summary": result.summary.to_dict(), "errors": result.dead_letters,
                          "seconds": result.seconds}, indent=1))
        return 0
    print(f"shardmill count: {len(patterns)} pattern(s), count method {method}, {result.seconds:.1f} s")
    print(result.summary.render())
    for dead in result.dead_letters[:MAX_ERRORS_SHOWN]:
        where = dead["path"] + (f" :: {dead['member']}" if dead["member"] else "")
        print(f"  error: {where}: {dead['reason']}: {dead['detail']}")
    if len(result.dead_letters) > MAX_ERRORS_SHOWN:
        print(f"  ... {len(result.dead_letters) - MAX_ERRORS_SHOWN} more in {result.errors_path}")
    if args.index_out:
        print(f"index written to {result.index_path}")
    if args.errors_out:
        print(f"errors written to {result.errors_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shardmill", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log Beam's progress too")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_count_parser(subparsers)
    args, beam_args = parser.parse_known_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("shardmill").setLevel(logging.INFO)
    try:
        return {"count": _count}[args.command](args, beam_args)
    except (config_lib.ConfigError, InputError) as err:
        print(f"shardmill {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
