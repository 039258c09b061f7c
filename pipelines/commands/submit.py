"""`shardmill submit`: the job on Google Cloud Dataflow or a Flink cluster.

The same config as `shardmill run`, plus where to run it. Submission is
`shardmill run` with the runner's options, after the job's code is packaged
for the workers: a wheel of this checkout (with the native extension, tagged
for this machine's platform and Python) passed as `--extra_package`, or the
wheel given with `--wheel`. Workers must run the same Python version.

Worker environments:
- Dataflow: Beam's SDK container, which installs the wheel at start-up; or a
  custom container built from the repository's Dockerfile (`--sdk-container`).
- Flink: `external` (default): an SDK worker pool runs beside each task
  manager (`python -m apache_beam.runners.worker.worker_pool_main
  --service_port=50000`, e.g. as a sidecar container from the Dockerfile's
  image) and the runner connects to it (`--worker-pool`, default
  localhost:50000); or `docker`: each task manager starts the image given
  with `--sdk-container` (it needs Docker on the task managers).

`--dry-run` checks the arguments, validates the options with the chosen
runner's own validator (which needs that runner's Python extras: for
Dataflow `apache-beam[gcp]`; it says so when they are missing and exits 2,
since the real submission would fail the same way), builds and serializes
the graph, and prints the exact build and submission commands.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import re
import shlex
import subprocess
import sys
import sysconfig

from shardmill.core.errors import EXIT_BAD_INVOCATION, ShardmillError
from shardmill.pipelines.commands import Command
from shardmill.pipelines.commands.run import add_job_arguments, job_argv

RUNNERS = {"dataflow": "DataflowRunner", "flink": "FlinkRunner"}
FLINK_ENVIRONMENTS = ("external", "docker")
DEFAULT_WORKER_POOL = "localhost:50000"
HOST_PORT = re.compile(r"^[^:/\s]+:\d+$")


class SubmitError(ShardmillError, ValueError):
    """An argument that makes the submission impossible (nothing built or sent)."""

    exit_code = EXIT_BAD_INVOCATION


def add_parser(subparsers, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "submit", parents=[common],
        help="submit the job to Google Cloud Dataflow or a Flink cluster",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    p.add_argument("--runner", choices=sorted(RUNNERS), default="dataflow")
    # run's own arguments, every one of them: the submission is that run
    add_job_arguments(p, {"--output": dict(required=True, help="output directory (gs:// for Dataflow)")})
    p.add_argument("--dry-run", action="store_true",
                   help="validate for the runner, build the graph, print the commands; submit nothing")
    p.add_argument("--wheel", help="the shardmill wheel the workers install (default: build one of --checkout)")
    p.add_argument("--checkout", default=".", help="the shardmill repository to build the wheel from (default: .)")
    p.add_argument("--sdk-container", help="worker image (Dataflow custom container; Flink --environment docker)")
    dataflow = p.add_argument_group("Dataflow")
    dataflow.add_argument("--project")
    dataflow.add_argument("--region")
    dataflow.add_argument("--temp-location", help="gs:// staging and temp location")
    dataflow.add_argument("--num-workers", type=int, help="Dataflow workers (Flink: parallelism)")
    dataflow.add_argument("--machine-type")
    flink = p.add_argument_group("Flink")
    flink.add_argument("--flink-master", help="HOST:PORT of the Flink JobManager's REST endpoint")
    flink.add_argument("--environment", choices=FLINK_ENVIRONMENTS, default="external",
                       help="how SDK workers start on the task managers (default: external worker pool)")
    flink.add_argument("--worker-pool", default=DEFAULT_WORKER_POOL,
                       help=f"HOST:PORT of the SDK worker pool beside each task manager (default {DEFAULT_WORKER_POOL})")
    return p


@dataclasses.dataclass
class Submission:
    build: list[str] | None  # the wheel build, None when --wheel names one
    wheel: str
    run: list[str]  # `shardmill run` with the runner's options
    beam_args: list[str]  # the options of that run that go to Beam: the runner's, the wheel, the user's


def wheel_name(version: str) -> str:
    """The file name `pip wheel` gives this checkout on this machine (platform and Python tags)."""
    python = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return f"shardmill-{version}-{python}-{python}-{platform}.whl"


def _checkout(path: str) -> str:
    """The shardmill repository to build the workers' wheel from."""
    here = os.path.abspath(path)
    pyproject = os.path.join(here, "pyproject.toml")
    if not os.path.isfile(pyproject) or 'name = "shardmill"' not in open(pyproject).read():
        raise SubmitError(f"no --wheel given and {here} is not a shardmill checkout to build one from: "
                          "pass --checkout DIR or --wheel PATH")
    return here


def plan(args: argparse.Namespace, beam_args: list[str]) -> Submission:
    """The build and submission commands for these arguments, after checking them."""
    from shardmill.core.output_contract import shardmill_version

    if not os.path.isfile(args.config):
        raise SubmitError(f"config file {args.config} does not exist")
    runner_args: list[str] = []
    if args.runner == "dataflow":
        for flag, value in (("--project", args.project), ("--region", args.region),
                            ("--temp-location", args.temp_location)):
            if not value:
                raise SubmitError(f"{flag} is required for Dataflow")
        if not args.temp_location.startswith("gs://"):
            raise SubmitError("--temp-location must be a gs:// path for Dataflow")
        if not args.output.startswith("gs://"):
            raise SubmitError("--output must be a gs:// path for Dataflow (workers can't see local disks)")
        runner_args = ["--runner=DataflowRunner", f"--project={args.project}", f"--region={args.region}",
                       f"--temp_location={args.temp_location}"]
        if args.num_workers:
            runner_args.append(f"--num_workers={args.num_workers}")
        if args.machine_type:
            runner_args.append(f"--machine_type={args.machine_type}")
        if args.sdk_container:
            runner_args.append(f"--sdk_container_image={args.sdk_container}")
    else:
        if not args.flink_master or not HOST_PORT.match(args.flink_master):
            raise SubmitError("--flink-master HOST:PORT is required for Flink")
        runner_args = ["--runner=FlinkRunner", f"--flink_master={args.flink_master}"]
        if args.environment == "external":
            if not HOST_PORT.match(args.worker_pool):
                raise SubmitError(f"--worker-pool must be HOST:PORT, not {args.worker_pool!r}")
            runner_args += ["--environment_type=EXTERNAL", f"--environment_config={args.worker_pool}"]
        else:
            if not args.sdk_container:
                raise SubmitError("--environment docker needs --sdk-container IMAGE")
            runner_args += ["--environment_type=DOCKER", f"--environment_config={args.sdk_container}"]
        if args.num_workers:
            runner_args.append(f"--parallelism={args.num_workers}")
    if args.wheel:
        if not args.wheel.endswith(".whl") or not os.path.isfile(args.wheel):
            raise SubmitError(f"--wheel {args.wheel}: not a wheel file")
        build, wheel = None, args.wheel
    else:
        checkout = _checkout(args.checkout)
        build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", os.path.join(checkout, "dist"),
                 checkout]
        wheel = os.path.join(checkout, "dist", wheel_name(shardmill_version()))
    # The user's own Beam options come last: later options win.
    run_beam_args = [*runner_args, f"--extra_package={wheel}", *beam_args]
    run = [sys.executable, "-m", "shardmill.pipelines.cli", "run", *job_argv(args), *run_beam_args]
    return Submission(build, wheel, run, run_beam_args)


def validate_for_runner(runner: str, run_args: list[str], offline: bool = False) -> None:
    """The runner's own option validation (Beam's PipelineOptionsValidator with that runner); SubmitError in one
    line. offline (--dry-run): with Beam's own dry_run switch, so the validation contacts no store (Dataflow's
    checks a bucket's soft-delete policy over the network)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator

    try:
        if runner == "dataflow":
            import apitools  # noqa: F401  (the Dataflow client; Beam imports it lazily at submission)
            from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner as Runner
        else:
            from apache_beam.runners.portability.flink_runner import FlinkRunner as Runner
    except ImportError as err:
        extra = "apache-beam[gcp]" if runner == "dataflow" else "apache-beam"
        raise SubmitError(f"the {RUNNERS[runner]} is not usable here ({err}); install its extras to submit: "
                          f"pip install '{extra}==2.77.0'") from err
    beam_options = [arg for arg in run_args if arg.startswith("--") and "=" in arg]
    if offline:
        beam_options.append("--dry_run=True")
    try:
        errors = PipelineOptionsValidator(PipelineOptions(beam_options), Runner()).validate()
    except Exception as err:  # noqa: BLE001 - what validation reached for (a default bucket, a store) failed
        detail = " ".join(str(err).split())[:300]
        raise SubmitError(f"{RUNNERS[runner]} options could not be validated{' offline' if offline else ''}: "
                          f"{type(err).__name__}: {detail}") from None
    if errors:
        raise SubmitError(f"{RUNNERS[runner]} options: " + "; ".join(errors))


def execute(args: argparse.Namespace, beam_args: list[str]) -> int:
    submission = plan(args, beam_args)
    if args.dry_run:
        validate_for_runner(args.runner, submission.run, offline=True)
        if submission.build:
            print(f"would build:  {shlex.join(submission.build)}")
        print(f"would submit: {shlex.join(submission.run)}")
        from shardmill.pipelines.commands import run

        # The graph as the runner would receive it, built here by the submitted run's own dry run (nothing
        # contacted, nothing written): submit's arguments hold every one of run's job arguments.
        return run.execute(argparse.Namespace(**{**vars(args), "dry_run": True}), submission.beam_args)
    validate_for_runner(args.runner, submission.run)
    if submission.build:
        subprocess.run(submission.build, check=True)
        built = sorted(glob.glob(os.path.join(os.path.dirname(submission.wheel), "shardmill-*.whl")),
                       key=os.path.getmtime)
        if not os.path.isfile(submission.wheel):
            raise SubmitError(f"the build wrote {built[-1:] or 'no wheel'}, not {submission.wheel}")
    print(f"submitting: {shlex.join(submission.run)}", flush=True)
    return subprocess.run(submission.run).returncode


COMMAND = Command("submit", add_parser, execute, takes_beam_options=True)
