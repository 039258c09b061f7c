"""`shardmill inspect DIR`: an output directory's manifest summary (and the job kind's charts).

Needs only the reader (no Beam): the store probe is skipped where the job's code is not installed.
"""

from __future__ import annotations

import argparse
import json
import os

from shardmill.pipelines.commands import EXIT_OK, Command


def add_parser(subparsers, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = subparsers.add_parser("inspect", parents=[common], help="print an output directory's manifest summary")
    p.add_argument("output_dir")
    p.add_argument("--plot", help="also draw the job's charts to this PNG (lc0: use counts and acceptance vs "
                   "game length; labels: records and ratio per partition; tokens: samples and epochs per corpus)")
    p.add_argument("--json", action="store_true", help="print the manifest's stats as JSON")
    return p


def _rejected_report(output_dir: str) -> str | None:
    """Where the report of the output's last rejected run is (its `.rejected/` files), or None when it has none."""
    import pyarrow.fs as pafs

    from shardmill.native_ext.dataset import locate
    from shardmill.core.output_contract import (ERRORS_NAME, FORMAT2_REJECTED_DIR_NAME, REJECTED_DIR_NAME,
                                                REPORT_MANIFEST_NAME)

    fs, base, _ = locate(output_dir)
    for directory in (REJECTED_DIR_NAME, FORMAT2_REJECTED_DIR_NAME):
        names = [f"{directory}/{name}" for name in (REPORT_MANIFEST_NAME, ERRORS_NAME)]
        try:
            infos = fs.get_file_info([f"{base}/{name}" for name in names])
        except (OSError, ValueError):  # a store that can't be listed: no report to point at
            return None
        found = [name for name, info in zip(names, infos) if info.type == pafs.FileType.File]
        if found:
            shown = output_dir.rstrip("/")
            return " and ".join(f"{shown}/{name}" for name in found)
    return None


def _no_output(output_dir: str):
    """A clearer OutputError for a path holding no committed output, when the path is missing or holds only a
    rejected run's report; None otherwise (the reader's own error stands)."""
    import pyarrow.fs as pafs

    from shardmill.native_ext.dataset import OutputError, locate
    from shardmill.core.output_contract import MANIFEST_NAMES

    fs, base, _ = locate(output_dir)
    if fs.get_file_info(base).type == pafs.FileType.NotFound:
        return OutputError(f"{output_dir!r} does not exist (inspect reads the output directory a run wrote)")
    if any(info.type != pafs.FileType.NotFound for info in fs.get_file_info([f"{base}/{n}" for n in MANIFEST_NAMES])):
        return None
    report = _rejected_report(output_dir)
    if report is None:
        return None
    return OutputError(f"{output_dir!r} holds no committed output: its last run exceeded max_error_fraction and "
                       f"committed nothing; its report is in {report}")


def _check_store_reachable(output_dir: str) -> None:
    """A run's bounded probe (docs/operations.md, object storage) of an S3 output before the reader's calls, which a store
    that does not answer holds for tens of seconds each; without Beam (a reader-only install) the reader's bounds
    stand."""
    try:
        from shardmill.transforms.common.filesystem import check_stores_reachable
    except ImportError:
        return
    check_stores_reachable([output_dir])


def execute(args: argparse.Namespace, beam_args: list[str]) -> int:
    from shardmill.native_ext import load_manifest  # checks every shard against the manifest too
    from shardmill.core.errors import OutputError, UsageError
    from shardmill.pipelines.jobs import job_kind_of_manifest
    from shardmill.transforms.output.manifest import describe_compression

    if args.plot:  # refused before anything is printed, not after the summary
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            raise UsageError(f"--plot {args.plot}: no such directory {folder}")
    if args.output_dir.startswith("s3://") and "?" not in args.output_dir:  # a query names the reader's own store
        _check_store_reachable(args.output_dir)
    try:
        manifest = load_manifest(args.output_dir)
    except OutputError as err:
        try:
            clearer = _no_output(args.output_dir)
        except (OSError, ValueError):  # the reader's error stands
            clearer = None
        raise (clearer or err) from None
    kind = job_kind_of_manifest(manifest)
    if args.json:
        print(json.dumps(manifest["stats"], indent=1))
    else:
        print(f"{args.output_dir}: {manifest['num_shards']} shard(s), {kind.name} job, {kind.describe(manifest)}, "
              f"seed {manifest['seed']}, {describe_compression(manifest)}")
        print(kind.render_summary(manifest))
        report = _rejected_report(args.output_dir)
        if report:  # a later run was rejected (a commit removes the report): the output shown is older
            print(f"the last run was rejected (over max_error_fraction) and committed nothing; its report is in "
                  f"{report}")
    if args.plot:
        kind.plot(manifest, args.plot)
        print(f"charts written to {args.plot}")
    return EXIT_OK


COMMAND = Command("inspect", add_parser, execute, takes_beam_options=False)
