"""The test cluster's job service: a worker lost with instructions in flight fails them (Beam's waits forever)."""

import os
import subprocess
import sys

import pytest

PROBE = """
import sys
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import worker_handlers
if sys.argv[1] == "patched":
    import tests.support.job_service  # noqa: F401

def reset_stream():
    raise RuntimeError("the worker's connection was reset")
    yield

connection = worker_handlers.ControlConnection()
future = connection.push(beam_fn_api_pb2.InstructionRequest())
connection.set_input(reset_stream())
connection._read_thread.join(10)
print(repr(future._response.error) if future.is_done() else "still waiting")
"""


@pytest.mark.slow  # a subprocess: the patch is global to Beam's class, kept out of the test's process
@pytest.mark.parametrize("service, answer", [("beam", "still waiting"),
                                             ("patched", "'lost the SDK worker: its control stream broke "
                                                         "(RuntimeError) with 1 instruction(s) unanswered'")])
def test_an_instruction_in_flight_when_its_workers_stream_breaks_is_answered_with_an_error(service, answer):
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", PROBE, service], capture_output=True, text=True, timeout=120,
                          cwd=checkout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == answer
