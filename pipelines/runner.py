"""Choosing the Beam runner.

Beam 2.77's DirectRunner first tries the Prism runner, which downloads a
binary; offline that fails after a delay and falls back. Local runs therefore
go straight to the in-process FnApiRunner, exactly as DirectRunner's own
fallback builds it, which honours --direct_running_mode (in_memory,
multi_threading, multi_processing) and --direct_num_workers.
"""

from __future__ import annotations

import concurrent.futures
import socket

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions

from shardmill.core.errors import ShardmillError

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


# How long a portable run's services get to accept a connection before the run is refused.
SERVICE_CONNECT_SECONDS = 5.0


class ServiceUnreachable(ShardmillError, OSError):
    """A service the run needs (a runner's job service, an external worker pool) does not accept connections."""


def _host_and_port(endpoint: str) -> tuple[str, int] | None:
    host, _, port = endpoint.rpartition(":")
    return (host.strip("[]") or "localhost", int(port)) if host and port.isdigit() else None


def check_services_reachable(options: PipelineOptions, timeout: float = SERVICE_CONNECT_SECONDS) -> None:
    """The job service (--job_endpoint) and an EXTERNAL environment's worker pool (--environment_config) of a
    portable run accept a TCP connection, or ServiceUnreachable names the one that does not.

    Beam waits without end on a job endpoint nothing answers, and a worker pool that is not there surfaces as
    gRPC's multi-line text after the job started; both are known before anything is claimed. Endpoints that are
    not host:port (Beam starting its own job server) are left to Beam.
    """
    portable = options.view_as(PortableOptions)
    services = [("job service (--job_endpoint)", portable.job_endpoint)]
    if (portable.environment_type or "").upper() == "EXTERNAL":
        services.append(("worker pool (--environment_config)", portable.environment_config))
    probes = [(what, endpoint, _host_and_port(endpoint)) for what, endpoint in services if endpoint]
    probes = [probe for probe in probes if probe[2]]
    if not probes:
        return

    def refusal(probe) -> str | None:
        what, endpoint, address = probe
        try:
            socket.create_connection(address, timeout=timeout).close()
            return None
        except OSError as err:
            reason = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
            return f"the {what} at {endpoint} does not accept connections ({reason})"

    with concurrent.futures.ThreadPoolExecutor(len(probes)) as pool:
        refused = [r for r in pool.map(refusal, probes) if r]
    if refused:
        raise ServiceUnreachable("; ".join(refused) + ": start it, or point the option at where it runs")


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
