"""Beam's local job service (`python -m tests.support.job_service --port N`) that fails a job whose worker died.

Beam's own (apache_beam.runners.portability.local_job_service_main) can wait forever for a worker killed mid-run:
the thread reading a worker's control stream dies with the stream's error (grpc.RpcError) and the instructions
still waiting for that worker's answer are never failed, so the job stays RUNNING and `shardmill run` with it
(seen in tests/pipelines/test_shared_nothing_cluster.py: more than 90 s, where a kill at another moment failed
in 2 s on Beam's data channel). A cluster's runner notices a lost worker (Flink fails the task, Dataflow retries
the bundle elsewhere, then fails the job); this service does what they do in the end, answering the instructions
in flight with an error, so a test of a lost worker pool sees the job fail as it would on a cluster. Nothing
else of Beam's service changes but one thing a cluster's runner does too: a cancelled job stays CANCELLED. A worker that dies before it first connects is still waited for.
"""

from __future__ import annotations

import logging
import sys

from apache_beam.portability.api import beam_fn_api_pb2, beam_job_api_pb2
from apache_beam.runners.portability import local_job_service, local_job_service_main
from apache_beam.runners.portability.fn_api_runner import worker_handlers

_beam_read = worker_handlers.ControlConnection._read


def _read_failing_lost_instructions(self) -> None:
    try:
        _beam_read(self)
        cause = "its control stream ended"
    except Exception as err:  # the stream broke: the worker's connection was reset
        cause = f"its control stream broke ({type(err).__name__})"
    lost = [future for future in list(self._futures_by_id.values()) if not future.is_done()]
    if not lost:
        return
    message = f"lost the SDK worker: {cause} with {len(lost)} instruction(s) unanswered"
    logging.getLogger(__name__).error("%s", message)
    for future in lost:
        # An answer carrying the error, not abort(): the runner's wait for a bundle's data looks for an answer.
        future.set(beam_fn_api_pb2.InstructionResponse(instruction_id=future.instruction_id, error=message))


worker_handlers.ControlConnection._read = _read_failing_lost_instructions

_beam_set_state = local_job_service.BeamJob.set_state


def _set_state_keeping_cancelled(self, new_state):
    # Beam's service marks a cancelled job CANCELLED and runs it on (its cancel is a TODO), then sets the state
    # the run ends in (FAILED, once the launcher discarded its staging); a cluster's runner stops the job, which
    # stays CANCELLED: so here.
    if self.state == beam_job_api_pb2.JobState.CANCELLED:
        return None
    return _beam_set_state(self, new_state)


local_job_service.BeamJob.set_state = _set_state_keeping_cancelled

if __name__ == "__main__":
    local_job_service_main.run(sys.argv[1:])
