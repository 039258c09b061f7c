"""The contract every job kind keeps: one folder under transforms/, one JobKind, one registry line.

A run goes the same way for every kind (pipelines/run_job.py):

  kind.validate(config)                on the launcher, before anything else: ConfigError naming the field
  inputs = kind.inputs(config)         the input patterns, each checked to name a file (InputError)
  plan = kind.plan(config, inputs)     on the launcher, before the output is touched: every check that can be
                                       made before work (InputError, PlanError), and what the workers need
                                       (indices, shard count when it is known up front); picklable
  job = kind.transform(config, plan, paths)
  p | job | WriteShardedOutput(paths, kind.shard_format(config, plan), ...)

`job.expand(pbegin)` returns JobOutputs, the inputs of WriteShardedOutput:
the rows spilled per shard (transforms/common/spill.py), the shard count
(one int: sized by output/shard_count.py, the same guards for every kind),
one record description, and the dead letters and stats of the kind, if any.
The ShardFormat turns a shard's batches into its table and the stats into
the manifest's; the kind's summary and plots read that manifest back.

A kind reads only its own config section (the member of JobConfig's `job`
oneof named by `config_field`) and the shared fields (input, seed, output,
max_error_fraction).
"""

from __future__ import annotations

import importlib
from typing import Any, TypedDict

from shardmill.core.errors import ConfigError


class _RequiredOutputs(TypedDict):
    shard_refs: Any  # PCollection of (shard, (spill path, batch index)) pairs
    num_shards: Any  # PCollection of one int
    record: Any  # PCollection of one dict: record_format and what describes a row of this kind


class JobOutputs(_RequiredOutputs, total=False):
    """What a job's expand() returns: the PCollections WriteShardedOutput consumes.

    A dict (Beam takes a dict of PCollections as a composite's output); a kind
    that meets no bad input or has no stats of its own leaves those keys out.
    """

    errors: Any  # PCollection of dead-letter dicts
    stats: Any  # PCollection of dicts that the ShardFormat's finish_stats combines


class JobKind:
    """One kind of job. Subclasses set the class attributes and implement the methods.

    Instances are stateless and cheap; Beam graph code is imported inside
    transform(), so validating, inspecting and summarising need no Beam.
    """

    name: str  # the manifest's job_kind and the registry key
    package: str  # the kind's folder as a package: its report.render_summary and report.plot serve every kind
    config_field: str  # the member of JobConfig's `job` oneof holding this kind's settings
    record_format: str  # the manifest's record_format
    description: str  # one line for `shardmill --help` and `run --help`
    input_suffixes: tuple[str, ...] | None  # the files a directory input stands for; None: no `input`

    def validate(self, config) -> None:
        """ConfigError naming the first invalid field of this kind's section."""
        raise NotImplementedError

    def inputs(self, config, check_remote: bool = True) -> list[str]:
        """The input patterns; InputError for an input that matches nothing.

        check_remote=False takes gs:// and s3:// patterns as they are (a dry
        run may lack the credentials to list them).
        """
        from shardmill.transforms.common.discovery import expand_inputs
        from shardmill.transforms.common.filesystem import is_local

        if self.input_suffixes is None:
            return []
        items = list(config.input)
        remote = [] if check_remote else [i for i in items if not is_local(i)]
        local = [i for i in items if i not in remote]
        return (expand_inputs(local, self.input_suffixes) if local else []) + remote

    def plan(self, config, inputs: list[str], local_run: bool = True):
        """Launcher-side work before the pipeline: checks that can fail early, and what the workers need.
        local_run: the pipeline runs on this machine (a default that names a local place may apply)."""
        return None

    def stage(self, plan, paths) -> None:
        """On the launcher, once the run's staging exists and before the graph is built: writes there what the
        workers read of the plan (RunPaths.metadata_dir), so large launcher-side arrays travel as files, not
        inside the serialised graph. A dry run writes nothing and skips it."""

    def transform(self, config, plan, paths):
        """The job's composite PTransform; its expand(pbegin) returns JobOutputs."""
        raise NotImplementedError

    def shard_format(self, config, plan):
        """The ShardFormat (output/shard_format.py) of this kind's shards."""
        raise NotImplementedError

    def describe(self, manifest: dict) -> str:
        """A few words on what the rows are, for `inspect`'s first line."""
        return manifest["record_format"]

    def check_outcome(self, config, manifest: dict) -> None:
        """On the launcher after the pipeline, before the commit: a ShardmillError (core/errors.py) refuses to
        commit what the input turned out to make, found only by reading it, and the command exits with its code
        (e.g. InputError, exit 2; nothing committed); warnings go to the log. Any other exception is a defect
        (exit 3)."""

    def render_summary(self, manifest: dict) -> str:
        """The run's summary lines (printed after `run` and by `inspect`): the kind's report.render_summary."""
        return importlib.import_module(f"{self.package}.report").render_summary(manifest)

    def plot(self, manifest: dict, path: str) -> None:
        """Charts of the run's statistics to a PNG (`inspect --plot`): the kind's report.plot."""
        importlib.import_module(f"{self.package}.report").plot(manifest, path)

    def count_settings(self, config, args, local_run: bool):
        """`shardmill count` (args: its parsed command line): what the count indexes and how, for the command's
        pipeline (the kind's count.CountIndex); ConfigError where this kind has no count."""
        raise ConfigError(f"count indexes lc0 chunk files; a {self.name} job has no count step "
                          "(`shardmill run --dry-run` checks its inputs)")

    def render_count(self, settings, result, args) -> str:
        """What `shardmill count` prints of a count's result."""
        raise NotImplementedError
