"""`shardmill run`: a job, its inputs in, globally shuffled Parquet shards and a manifest out.

Its job arguments (the config and what replaces its values) are defined once here: `submit` takes them
all and hands them on to the `run` it submits.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from shardmill.pipelines.commands import EXIT_COMMITTED_WITH_ERROR, EXIT_ERROR_BUDGET, EXIT_OK, Command, kinds_text

# flag -> add_argument settings; the actions are those job_argv can write back (store, store_true, append)
JOB_ARGUMENTS: dict[str, dict] = {
    "--config": dict(required=True, help="text-format JobConfig"),
    "--input": dict(action="append", help="input pattern or directory (replaces the config's)"),
    "--output": dict(help="output directory (replaces output.path)"),
    "--seed": dict(type=int, help="replaces the config's seed"),
    "--overwrite": dict(action="store_true",
                        help="replace an existing output (it stays readable until the new one is committed)"),
    "--break-claim": dict(action="store_true",
                          help="take over an output whose claim is stale (a run that crashed on another host)"),
}
_WRITABLE_ACTIONS = (None, "store_true", "append")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_job_arguments(p: argparse.ArgumentParser, changed: dict[str, dict] | None = None) -> None:
    """Adds the job arguments; changed: per flag, the settings that differ for this command (submit
    requires --output)."""
    for flag, settings in JOB_ARGUMENTS.items():
        assert settings.get("action") in _WRITABLE_ACTIONS, f"job_argv cannot write {flag} back"
        p.add_argument(flag, **{**settings, **(changed or {}).get(flag, {})})


def job_argv(args: argparse.Namespace) -> list[str]:
    """The job arguments of args as a `shardmill run` command line (what submit hands on)."""
    argv: list[str] = []
    for flag, settings in JOB_ARGUMENTS.items():
        value = getattr(args, _dest(flag))
        if settings.get("action") == "store_true":
            argv += [flag] if value else []
        elif settings.get("action") == "append":
            for item in value or []:
                argv += [flag, item]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def add_parser(subparsers, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "run", parents=[common],
        help="run a job: its inputs in, globally shuffled Parquet shards out",
        description="Runs the job the config describes, checked, planned, staged and committed. The config's "
        f"section picks the kind: {kinds_text('; ')}. Unknown options go to Beam (e.g. --runner, "
        "--direct_running_mode=multi_processing --direct_num_workers=2).",
    )
    add_job_arguments(p)
    p.add_argument("--dry-run", action="store_true",
                   help="check everything the run checks before work (config, inputs, plan, output, "
                   "--overwrite), build and serialize the pipeline graph, print it; run nothing")
    return p


def _config(args: argparse.Namespace):
    """The config file with the command line's replacements, validated."""
    from shardmill.pipelines import config as config_lib

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
    return config


def execute(args: argparse.Namespace, beam_args: list[str]) -> int:
    from shardmill.pipelines import beam_options, terminal
    from shardmill.pipelines.jobs import job_kind

    config = _config(args)
    kind = job_kind(config)
    beam_options.import_beam()
    from shardmill.pipelines import run_job as run_lib  # Beam graph code, imported on use

    # The ~140,000 objects of the imported modules live as long as the process: out of the cyclic collector's
    # sight, its passes during the run no longer walk them (collecting was 3.6% of a sampled lc0 run's CPU).
    gc.freeze()
    if args.dry_run:
        print(run_lib.dry_run(config, beam_options.pipeline_options(beam_args), kind=kind))
        return EXIT_OK
    beam_args = beam_options.with_local_worker_logs(beam_args, args.verbose)
    options = beam_options.pipeline_options(beam_args)
    inputs = kind.inputs(config)
    started = time.monotonic()
    print(f"shardmill run: {kind.name} job, {len(inputs)} input pattern(s) -> {config.output.path}", flush=True)
    try:
        with terminal.worker_lines_filtered(beam_options.spawns_workers(beam_args, args.verbose)):
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
    return EXIT_OK


def failure_note(args: argparse.Namespace) -> str:
    return "" if args.dry_run else "; temporary files removed, the previous output (if any) is unchanged"


COMMAND = Command("run", add_parser, execute, takes_beam_options=True, failure_note=failure_note)
