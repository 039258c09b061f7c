"""The job kinds: one table that `run`, `--dry-run` and `inspect` all use.

A job kind is a composite PTransform (config, input patterns, RunPaths) →
the inputs of WriteShardedOutput, plus how its inputs are found and how its
manifest is summarised.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from shardmill.pipelines.config import JobConfig
from shardmill.pipelines.inputs import EVENT_SUFFIXES, expand_inputs
from shardmill.transforms.chunk_index import LC0_INPUT_SUFFIXES
from shardmill.transforms.discovery import is_local
from shardmill.transforms.manifest import render_label_summary, render_lc0_summary, render_token_summary


@dataclasses.dataclass(frozen=True)
class JobKind:
    name: str
    record_format: str
    transform: Callable[[], type]  # imported on use: the Beam graph code
    input_suffixes: tuple[str, ...] | None  # None: the job reads no input patterns
    render_summary: Callable[[dict], str]

    def inputs(self, config: JobConfig, check_remote: bool = True) -> list[str]:
        """The input file patterns; InputError for an input that matches nothing.

        check_remote=False takes gs:// and s3:// patterns as they are (a dry
        run may lack the credentials to list them).
        """
        if self.input_suffixes is None:
            return []
        items = list(config.input)
        remote = [] if check_remote else [i for i in items if not is_local(i)]
        local = [i for i in items if i not in remote]
        return (expand_inputs(local, self.input_suffixes) if local else []) + remote


def _lc0_job():
    from shardmill.pipelines.lc0_job import Lc0Job

    return Lc0Job


def _label_job():
    from shardmill.pipelines.label_job import LabelJob

    return LabelJob


def _token_job():
    from shardmill.pipelines.token_job import TokenJob

    return TokenJob


JOB_KINDS = {
    "lc0": JobKind("lc0", "lc0", _lc0_job, LC0_INPUT_SUFFIXES, render_lc0_summary),
    "labels": JobKind("labels", "events", _label_job, EVENT_SUFFIXES, render_label_summary),
    "tokens": JobKind("tokens", "megatron_gpt_samples", _token_job, None, render_token_summary),
}


def job_kind(config: JobConfig) -> JobKind:
    if config.HasField("token_dataset"):
        return JOB_KINDS["tokens"]
    if config.HasField("label_sampling"):
        return JOB_KINDS["labels"]
    return JOB_KINDS["lc0"]


def job_kind_of_manifest(manifest: dict) -> JobKind:
    """The kind that wrote a manifest (format 1 manifests name only their record format)."""
    if manifest.get("job_kind") in JOB_KINDS:
        return JOB_KINDS[manifest["job_kind"]]
    for kind in JOB_KINDS.values():
        if kind.record_format == manifest.get("record_format"):
            return kind
    return JOB_KINDS["lc0"]
