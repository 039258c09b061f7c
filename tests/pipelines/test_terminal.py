"""The command's signals: held through the steps that must not be cut short, then acted on."""

import signal

import pytest

from shardmill.pipelines import terminal


class Terminated(Exception):
    pass


@pytest.fixture()
def sigterm_raises():
    def handler(signum, _frame):
        raise Terminated(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, handler)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_inside_a_deferred_block_arrives_when_the_block_ends(sigterm_raises):
    steps = []
    with pytest.raises(Terminated):
        with terminal.signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            steps.append("finished")
    assert steps == ["finished"]


def test_a_signal_held_through_a_failing_block_still_arrives(sigterm_raises):
    with pytest.raises(Terminated) as raised:
        with terminal.signals_deferred():
            signal.raise_signal(signal.SIGTERM)
            raise OSError("disk full")
    assert isinstance(raised.value.__context__, OSError)


def test_a_signal_during_the_commit_is_only_logged(sigterm_raises, caplog):
    with terminal.signals_deferred(reraise=False):
        signal.raise_signal(signal.SIGTERM)
    assert "SIGTERM arrived while committing; the commit completed" in caplog.text


def test_interrupts_raise_and_name_the_signal_then_the_previous_handler_is_back(sigterm_raises):
    interrupts = terminal.Interrupts()
    with pytest.raises(KeyboardInterrupt), interrupts.raised():
        signal.raise_signal(signal.SIGTERM)
    assert interrupts.received == ["SIGTERM"]
    with pytest.raises(Terminated):
        signal.raise_signal(signal.SIGTERM)
