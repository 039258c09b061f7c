"""The `shardmill` command line.

Subcommands:
  run              a job: its inputs in, globally shuffled Parquet shards + manifest out
  inspect DIR      print an output directory's manifest summary (and charts)
  count INPUT...   index lc0 chunk files and report what they hold
  submit           the job on Dataflow or a Flink cluster (wheel built, runner validated)

Job kinds (the config's section picks one):
{kinds}

Options a subcommand does not know must be Beam pipeline options
(e.g. --direct_running_mode=multi_processing --direct_num_workers=2);
anything else is refused, with the nearest known option. -v and -q work
before or after the subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import json
import logging
import os
import re
import signal
import sys
import threading
import time


def _drop_beam_optional_dependency_noise(record: logging.LogRecord) -> bool:
    # Beam logs this on import whenever the GCP extras are absent; it is not about our job.
    return "apitools not found" not in record.getMessage()


logging.getLogger().addFilter(_drop_beam_optional_dependency_noise)

# Arrow's allocator (mimalloc) hands freed pages back to the kernel after 10 ms, and a job frees and
# allocates tens of MB per task and per shard: each new buffer was faulted in and zeroed again (13% of a
# sampled lc0 run's CPU was the kernel's clear_page). A quarter second keeps most of them for reuse; a
# longer delay saved little more system time and raised peak memory (measured 10, 100, 300, 1000 ms).
# Read when pyarrow loads, so set before any import of it; worker processes inherit it; the user's wins.
MIMALLOC_PURGE_DELAY_MS = "250"
os.environ.setdefault("MIMALLOC_PURGE_DELAY", MIMALLOC_PURGE_DELAY_MS)

# Beam and the job code are imported inside the commands, after main() has taken over SIGINT and
# SIGTERM: importing Beam takes a second or two, and a Ctrl-C then must end as cleanly as later.

EXIT_OK, EXIT_ERROR_BUDGET, EXIT_BAD_INVOCATION, EXIT_FAILED, EXIT_COMMITTED_WITH_ERROR = 0, 1, 2, 3, 4


class UsageError(ValueError):
    """A command line that names an option neither shardmill nor Beam knows."""


def _is_bad_invocation(err: BaseException) -> bool:
    """Raised before any work: a bad config, input or output (ValueErrors: ConfigError, InputError,
    OutputPathError, OutputExistsError, IndexedDatasetError, OutputError), or an output in use.
    A failure of the pipeline itself arrives as RunFailed, whatever the worker raised."""
    from shardmill.transforms.output.claim import ClaimHeldError

    return isinstance(err, (ValueError, ClaimHeldError))


def _kinds_text(separator: str) -> str:
    """Each job kind's config section and what it does, for the help texts."""
    from shardmill.pipelines.jobs import kinds

    if separator == "\n":
        return "\n".join(f"  {k.config_field:<16} {k.description}" for k in kinds())
    return separator.join(f"{k.config_field} ({k.description})" for k in kinds())


def _add_count_parser(subparsers, common) -> argparse.ArgumentParser:
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


def _count(args, beam_args) -> int:
    from shardmill.pipelines import config as config_lib
    from shardmill.pipelines.jobs import job_kind

    config = config_lib.load_config(args.config) if args.config else config_lib.JobConfig()
    if args.inputs:
        del config.input[:]
        config.input.extend(args.inputs)
    config_lib.validate(config)
    options = _pipeline_options(_local_worker_logs(beam_args, args.verbose))
    return job_kind(config).count(config, args, options)


def _pipeline_options(beam_args: list[str]):
    """Beam's options for these arguments, also handed to Beam's FileSystems (use_pipeline_options): the
    inputs are listed before the run starts."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.transforms.common.filesystem import use_pipeline_options

    options = PipelineOptions(beam_args)
    use_pipeline_options(options)
    return options


def _add_run_parser(subparsers, common) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run", parents=[common],
        help="run a job: its inputs in, globally shuffled Parquet shards out",
        description="Runs the job the config describes, checked, planned, staged and committed. The config's "
        f"section picks the kind: {_kinds_text('; ')}. Unknown options go to Beam (e.g. --runner, "
        "--direct_running_mode=multi_processing --direct_num_workers=2).",
    )
    p.add_argument("--config", required=True, help="text-format JobConfig")
    p.add_argument("--input", action="append", help="input pattern or directory (replaces the config's)")
    p.add_argument("--output", help="output directory (replaces output.path)")
    p.add_argument("--seed", type=int, help="replaces the config's seed")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing output (it stays readable until the new one is committed)")
    p.add_argument("--break-claim", action="store_true",
                   help="take over an output whose claim is stale (a run that crashed on another host)")
    p.add_argument("--dry-run", action="store_true",
                   help="check everything the run checks before work (config, inputs, plan, output, "
                   "--overwrite), build and serialize the pipeline graph, print it; run nothing")
    return p


def _run(args, beam_args) -> int:
    from shardmill.pipelines import config as config_lib
    from shardmill.pipelines.jobs import job_kind

    config = config_lib.load_config(args.config)
    if args.input:
        del config.input[:]
        config.input.extend(args.input)
    if args.output:
        config.output.path = args.output
    if args.seed is not None:
        config.seed = args.seed
    if args.overwrite:
        config.output.overwrite = True
    config_lib.validate(config)
    if not config.output.path:
        raise config_lib.ConfigError("output.path: an output directory is required (config or --output)")
    kind = job_kind(config)
    from shardmill.pipelines import run_job as run_lib  # Beam graph code, imported on use

    # The ~140,000 objects of the imported modules live as long as the process: out of the cyclic collector's
    # sight, its passes during the run no longer walk them (collecting was 3.6% of a sampled lc0 run's CPU).
    gc.freeze()
    if args.dry_run:
        print(run_lib.dry_run(config, _pipeline_options(beam_args), kind=kind))
        return 0
    beam_args = _local_worker_logs(beam_args, args.verbose)
    options = _pipeline_options(beam_args)
    inputs = kind.inputs(config)
    started = time.monotonic()
    print(f"shardmill run: {kind.name} job, {len(inputs)} input pattern(s) -> {config.output.path}", flush=True)
    try:
        with _worker_noise_filtered(_spawns_workers(beam_args, args.verbose)):
            result = run_lib.run_job(config, inputs, config.output.path, options, break_claim=args.break_claim,
                                     kind=kind)
    except run_lib.ErrorBudgetExceeded as err:
        print(kind.render_summary(err.manifest))
        print(f"shardmill run: error: {err}", file=sys.stderr)
        return EXIT_ERROR_BUDGET
    except run_lib.CommittedWithError as err:
        print(err.summary)
        print(f"shardmill run: error: {err}", file=sys.stderr)
        return EXIT_COMMITTED_WITH_ERROR
    # The commit is done: only printing is left, from the summary rendered before it.
    print(result.summary)
    if result.counters:
        print("counters  " + ", ".join(f"{name} {value:,}" for name, value in result.counters.items()))
    print(f"shardmill run: committed generation {result.manifest['generation']} to {config.output.path} "
          f"in {time.monotonic() - started:.1f} s")
    return 0


def _add_submit_parser(subparsers, common) -> argparse.ArgumentParser:
    from shardmill.pipelines import submit

    p = subparsers.add_parser(
        "submit", parents=[common],
        help="submit the job to Google Cloud Dataflow or a Flink cluster",
        description=submit.__doc__.split("\n\n")[1].replace("\n", " "),
    )
    submit.add_arguments(p)
    return p


def _submit(args, beam_args) -> int:
    from shardmill.pipelines import submit

    return submit.submit(args, beam_args)


def _add_inspect_parser(subparsers, common) -> argparse.ArgumentParser:
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
    from shardmill.transforms.output.contract import (ERRORS_NAME, FORMAT2_REJECTED_DIR_NAME, REJECTED_DIR_NAME,
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
    from shardmill.transforms.output.contract import MANIFEST_NAMES

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
    """A run's bounded probe (README, object storage) of an S3 output before the reader's calls, which a store
    that does not answer holds for tens of seconds each; without Beam (a reader-only install) the reader's bounds
    stand."""
    try:
        from shardmill.transforms.common.filesystem import check_stores_reachable
    except ImportError:
        return
    check_stores_reachable([output_dir])


def _inspect(args, beam_args) -> int:
    from shardmill.native_ext import load_manifest  # checks every shard against the manifest too
    from shardmill.native_ext.dataset import OutputError
    from shardmill.pipelines.jobs import job_kind_of_manifest

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
              f"seed {manifest['seed']}")
        print(kind.render_summary(manifest))
        report = _rejected_report(args.output_dir)
        if report:  # a later run was rejected (a commit removes the report): the output shown is older
            print(f"the last run was rejected (over max_error_fraction) and committed nothing; its report is in "
                  f"{report}")
    if args.plot:
        kind.plot(manifest, args.plot)
        print(f"charts written to {args.plot}")
    return 0


_received_signals: list[str] = []


def _interrupt(signum, _frame):
    # Runners re-raise what a step raised in their own wrappers; remembering the signal lets
    # main() tell an interrupted run from a failed one whatever the wrapping.
    _received_signals.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _add_verbosity(parser: argparse.ArgumentParser, default) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", default=default,
                       help="log Beam's progress too, and show tracebacks")
    group.add_argument("-q", "--quiet", action="store_true", default=default,
                       help="only warnings, errors and the final summary")


@contextlib.contextmanager
def _logging_configured(verbose: bool, quiet: bool):
    """Timestamped logs at the chosen verbosity for the command; the previous set-up afterwards (main()
    is also called in-process, where later log lines must not go to this command's streams)."""
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_levels = {name: logging.getLogger(name).level for name in ("shardmill", "apache_beam")}
    # force: importing Beam installs a root handler, which would make basicConfig do nothing.
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )
    logging.getLogger("shardmill").setLevel(logging.WARNING if quiet else logging.INFO)
    # A failed run ends with one line of ours; Beam's traceback of it only with -v.
    logging.getLogger("apache_beam").setLevel(logging.NOTSET if verbose else logging.CRITICAL)
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)


def _beam_option_parser() -> argparse.ArgumentParser:
    """Every pipeline option Beam knows, parsed the way Beam parses them."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)
    return parser


def _check_extra_options(command: str, extra: list[str], subparser: argparse.ArgumentParser) -> None:
    """Only real Beam options pass through to Beam: a typo of ours (`--outptu`) is refused, not
    dropped with a warning while the run goes on with the config's values."""
    if not extra:
        return
    known: list[str] = list(subparser._option_string_actions)
    unknown = extra
    if command in ("count", "run", "submit"):
        beam = _beam_option_parser()
        _, unknown = beam.parse_known_args(extra)
        known += list(beam._option_string_actions)
    if not unknown:
        return
    flag = next((arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")), unknown[0])
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else ""
    what = "option" if flag.startswith("-") else "argument"
    takes = " or a Beam pipeline option" if command in ("count", "run", "submit") else ""
    raise UsageError(f"unrecognized {what} {flag!r}: not an option of shardmill {command}{takes}{hint}")


def _local_worker_logs(beam_args: list[str], verbose: bool) -> list[str]:
    """Worker processes of a local run log at INFO by default, each line outside our format: only
    their warnings, unless -v or the user chose a level."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.pipelines.runner import is_local_run

    chosen = any(arg.startswith("--default_sdk_harness_log_level") for arg in beam_args)
    if verbose or chosen or not is_local_run(PipelineOptions(beam_args)):
        return beam_args
    return [*beam_args, "--default_sdk_harness_log_level=WARNING"]


# A worker process's own log lines (Beam's logging format, before and beside the level it is given): import-time
# warnings, "Logging handler created", "Discarding unparseable args". Errors and anything else pass.
_WORKER_NOISE = re.compile(r"^(DEBUG|INFO|WARNING):(?!shardmill[.:])[\w.]*:")


def _spawns_workers(beam_args: list[str], verbose: bool) -> bool:
    """Whether this local run starts worker processes whose start-up lines would reach the terminal."""
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

    from shardmill.pipelines.runner import is_local_run

    options = PipelineOptions(beam_args)
    return (not verbose and is_local_run(options)
            and options.view_as(DirectOptions).direct_running_mode == "multi_processing")


@contextlib.contextmanager
def _worker_noise_filtered(enabled: bool):
    """Standard error (file descriptor 2, which worker processes inherit) through a filter that drops the
    workers' own INFO/WARNING lines; every other line passes, in order."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump():
        with os.fdopen(read_end, "rb") as source:
            for line in source:
                if not _WORKER_NOISE.match(line.decode("utf-8", errors="replace")):
                    os.write(terminal, line)

    thread = threading.Thread(target=pump, name="shardmill-stderr-filter", daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # the pipe ends when the workers, which hold it too, are gone
        thread.join(timeout=5)
        if not thread.is_alive():
            os.close(terminal)


def _missing_job_dependency(err: BaseException) -> bool:
    return isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] in ("apache_beam", "google")


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 ok, 1 error budget exceeded, 2 bad invocation/config/input/output, 3 failed run (nothing
    committed), 4 the new generation was committed but a step after the commit point failed."""
    from shardmill.transforms.output.contract import shardmill_version

    parser = argparse.ArgumentParser(prog="shardmill", description=__doc__.format(kinds=_kinds_text("\n")),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"shardmill {shardmill_version()}")
    _add_verbosity(parser, default=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_verbosity(common, default=argparse.SUPPRESS)  # after the subcommand too, without resetting
    subparsers = parser.add_subparsers(dest="command", required=True)
    commands = {
        "count": _add_count_parser(subparsers, common),
        "run": _add_run_parser(subparsers, common),
        "inspect": _add_inspect_parser(subparsers, common),
        "submit": _add_submit_parser(subparsers, common),
    }
    args, extra = parser.parse_known_args(argv)
    if args.verbose and args.quiet:
        parser.error("-v and -q exclude each other")
    logs = contextlib.ExitStack()
    logs.enter_context(_logging_configured(args.verbose, args.quiet))
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main_thread:
        del _received_signals[:]
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)
                    if signal.getsignal(sig) is not signal.SIG_IGN}
    unchanged = ("; temporary files removed, the previous output (if any) is unchanged"
                 if args.command == "run" and not getattr(args, "dry_run", False) else "")
    try:
        _check_extra_options(args.command, extra, commands[args.command])
        return {"count": _count, "run": _run, "inspect": _inspect, "submit": _submit}[args.command](args, extra)
    except BaseException as err:  # a failed run: one line, the traceback only with -v
        if not isinstance(err, Exception) and not _received_signals:
            raise
        if _missing_job_dependency(err):
            print(f"shardmill {args.command}: error: the job needs Apache Beam and protobuf, which are not "
                  f"installed ({err}): pip install 'shardmill[job]'", file=sys.stderr)
            return EXIT_BAD_INVOCATION
        if not _received_signals and _is_bad_invocation(err):
            print(f"shardmill {args.command}: error: {err}", file=sys.stderr)
            return EXIT_BAD_INVOCATION
        if _received_signals:
            print(f"shardmill {args.command}: interrupted ({_received_signals[0]}){unchanged}", file=sys.stderr)
            return EXIT_FAILED
        if args.verbose:
            logging.getLogger("shardmill").exception("shardmill %s failed", args.command)
        from shardmill.pipelines.run_job import one_line

        print(f"shardmill {args.command}: failed: {one_line(err)}{unchanged} (-v shows the traceback)",
              file=sys.stderr)
        return EXIT_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        logs.close()


def entry() -> None:
    """The `shardmill` command: main(), then exit — at once after a signal, so that the in-process runner's
    worker threads, still finishing steps of the abandoned pipeline, can't keep the process alive (the run's
    files are already removed and its one line printed)."""
    code = main()
    if _received_signals:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
