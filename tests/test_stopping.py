"""How a signal stops work (common/stopping.py): at once outside a training, a request inside one,
at once again on a second signal; a request never outlives its block."""

import signal

import pytest

from rlgauntlet.common import stopping


def test_outside_a_training_a_signal_stops_at_once():
    with pytest.raises(stopping.Interrupted) as stopped:
        stopping.handle(signal.SIGINT, None)
    assert stopped.value.signum == signal.SIGINT and stopping.requested() is None


def test_inside_a_training_the_first_signal_asks_and_the_second_stops_at_once():
    heard = []
    stopping.install(announce=heard.append, signals=())  # the announcement only: no handler set here
    try:
        with pytest.raises(stopping.Interrupted) as stopped:
            with stopping.safe_points():
                stopping.handle(signal.SIGTERM, None)  # a request: the work goes on to its safe point
                assert stopping.requested() == signal.SIGTERM and heard == [signal.SIGTERM]
                stopping.handle(signal.SIGINT, None)  # the second: at once
        assert stopped.value.signum == signal.SIGINT
    finally:
        stopping.install(announce=None, signals=())
    assert stopping.requested() is None  # cleared with its block


def test_the_request_is_raised_when_the_outermost_block_is_left():
    with pytest.raises(stopping.Interrupted) as stopped:
        with stopping.safe_points():
            with stopping.safe_points():  # a training inside a training's loop (ATLA's learn calls)
                stopping.handle(signal.SIGTERM, None)
            assert stopping.requested() == signal.SIGTERM  # the inner block does not end the outer work
    assert stopped.value.signum == signal.SIGTERM and stopping.requested() is None


def test_an_error_on_its_way_out_is_not_replaced_by_the_request():
    with pytest.raises(ValueError, match="the training's own error"):
        with stopping.safe_points():
            stopping.handle(signal.SIGTERM, None)
            raise ValueError("the training's own error")
    assert stopping.requested() is None


def test_a_worker_takes_the_same_stop_arriving_twice_as_one_and_a_later_one_as_at_once(monkeypatch):
    """A process group's SIGTERM reaches a worker directly and again from its driver: the second,
    milliseconds later, must not make it stop at once (losing the steps since its checkpoint)."""
    ended = []
    monkeypatch.setattr(stopping.os, "kill", lambda pid, signum: ended.append(signum))  # the default action
    monkeypatch.setattr(stopping.signal, "signal", lambda signum, handler: None)
    clock = [100.0]
    monkeypatch.setattr(stopping, "_now", lambda: clock[0])
    stopping.install(otherwise_die=True, signals=())
    try:
        with pytest.raises(stopping.Interrupted):
            with stopping.safe_points():
                stopping.handle(signal.SIGTERM, None)  # the group's
                clock[0] += 0.01
                stopping.handle(signal.SIGTERM, None)  # the driver's: the same stop
                assert ended == [] and stopping.requested() == signal.SIGTERM
                clock[0] += stopping.REPEAT_SECONDS
                stopping.handle(signal.SIGTERM, None)  # someone asks again, later: at once
        assert ended == [signal.SIGTERM]
    finally:
        stopping.install(signals=())
    assert stopping.requested() is None
