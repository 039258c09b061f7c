"""Choosing the Beam runner.

Beam 2.77's DirectRunner first tries the Prism runner, which downloads a
binary; offline that fails after a delay and falls back. Local runs therefore
go straight to the in-process FnApiRunner, exactly as DirectRunner's own
fallback builds it, which honours --direct_running_mode (in_memory,
multi_threading, multi_processing) and --direct_num_workers.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

LOCAL_RUNNER_NAMES = (None, "", "DirectRunner", "direct", "FnApiRunner")


def local_runner(options: PipelineOptions):
    """An FnApiRunner configured like DirectRunner's own (no Prism attempt)."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision_info = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return fn_runner.FnApiRunner(provision_info=provision_info)


def is_local_run(options: PipelineOptions) -> bool:
    """Whether the pipeline runs on this machine (the in-process runner, in-memory or worker processes)."""
    return options.view_as(StandardOptions).runner in LOCAL_RUNNER_NAMES


def counter_values(result) -> dict[str, int]:
    """shardmill's Beam counters of a finished pipeline ("namespace/name": value), where the runner reports them."""
    try:
        counters = result.metrics().query()["counters"]
    except Exception:  # a runner without metrics support
        return {}
    values: dict[str, int] = {}
    for counter in counters:
        if counter.key.metric.namespace.startswith("shardmill"):
            name = f"{counter.key.metric.namespace}/{counter.key.metric.name}"
            value = counter.committed if counter.committed is not None else counter.attempted
            values[name] = values.get(name, 0) + (value or 0)
    return dict(sorted(values.items()))


def make_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """A Pipeline on the requested runner; the local FnApiRunner when none (or Direct) is named."""
    if is_local_run(options):
        return beam.Pipeline(runner=local_runner(options), options=options)
    return beam.Pipeline(options=options)
