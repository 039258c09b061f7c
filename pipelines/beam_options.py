"""Beam's pipeline options as the commands take them: whatever a command's own parser does not know.

Beam is imported inside the functions: `inspect` runs without it, and the other commands import it only
after main() has taken the signals.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import sys

from shardmill.core.errors import UsageError


def import_beam() -> None:
    """Imports Apache Beam with the cyclic collector paused, then moves what loaded out of its sight (gc.freeze):
    the ~100,000 objects of Beam's modules live as long as the process, and the collector's passes over them
    while they loaded were ~0.3 s of a small run's ~3.5 s of CPU (its first pass after a pause without the
    freeze, 0.14 s)."""
    if "apache_beam" in sys.modules:
        return
    collecting = gc.isenabled()
    gc.disable()
    try:
        import apache_beam  # noqa: F401
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def _beam_option_parser() -> argparse.ArgumentParser:
    """Every pipeline option Beam knows, parsed the way Beam parses them. Beam has no public list of its options:
    this is what PipelineOptions itself does with each options class (its private parser and hook)."""
    import_beam()
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        cls._add_argparse_args(parser)
    return parser


def check_extra_options(command: str, extra: list[str], parser: argparse.ArgumentParser,
                        takes_beam_options: bool) -> None:
    """Only real Beam options pass through to Beam: a typo of ours (`--outptu`) is refused, not
    dropped with a warning while the run goes on with the config's values."""
    if not extra:
        return
    known: list[str] = list(parser._option_string_actions)
    unknown = extra
    if takes_beam_options:
        beam = _beam_option_parser()
        _, unknown = beam.parse_known_args(extra)
        known += list(beam._option_string_actions)
    if not unknown:
        return
    flag = next((arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")), unknown[0])
    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else ""
    what = "option" if flag.startswith("-") else "argument"
    takes = " or a Beam pipeline option" if takes_beam_options else ""
    raise UsageError(f"unrecognized {what} {flag!r}: not an option of shardmill {command}{takes}{hint}")


def pipeline_options(beam_args: list[str]):
    """Beam's options for these arguments, also handed to Beam's FileSystems (use_pipeline_options): the
    inputs are listed before the run starts."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.transforms.common.filesystem import use_pipeline_options

    options = PipelineOptions(beam_args)
    use_pipeline_options(options)
    return options


def with_local_worker_logs(beam_args: list[str], verbose: bool) -> list[str]:
    """Worker processes of a local run log at INFO by default, each line outside our format: only
    their warnings, unless -v or the user chose a level."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from shardmill.pipelines.runner import is_local_run

    chosen = any(arg.startswith("--default_sdk_harness_log_level") for arg in beam_args)
    if verbose or chosen or not is_local_run(PipelineOptions(beam_args)):
        return beam_args
    return [*beam_args, "--default_sdk_harness_log_level=WARNING"]


def spawns_workers(beam_args: list[str], verbose: bool) -> bool:
    """Whether this local run starts worker processes whose start-up lines would reach the terminal."""
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

    from shardmill.pipelines.runner import is_local_run

    options = PipelineOptions(beam_args)
    return (not verbose and is_local_run(options)
            and options.view_as(DirectOptions).direct_running_mode == "multi_processing")
