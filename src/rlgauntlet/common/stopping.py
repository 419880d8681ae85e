"""Stopping on SIGINT and SIGTERM: at once, or at the next safe point of work that saves exactly.

Once :func:`install` has run, a signal raises :class:`Interrupted` wherever the main thread is:
evaluations keep every finished episode in their store, so stopping mid-episode loses only that
episode. A training loses more that way: everything since its last checkpoint. So a training runs
inside :func:`safe_points`. There, a first signal only asks it to stop (:func:`requested`); the
training saves at its next rollout's end, exactly as a time budget does (``training.kit``), and
leaving the block raises :class:`Interrupted`. A second signal raises at once.

Example:
    >>> import signal
    >>> with safe_points():
    ...     handle(signal.SIGTERM, None)  # as the signal would: a request, nothing raised here
    ...     asked = requested()  # SIGTERM: the work saves at its next safe point
    Traceback (most recent call last):
    ...
    rlgauntlet.common.stopping.Interrupted: 15
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (a BaseException, so that no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_depth = 0  # how many safe_points blocks the main thread is in
_requested: int | None = None  # the signal that asked the work in them to stop
_requested_at = 0.0  # when it did (_now())
#: a worker takes a signal arriving this soon after the one that asked it to stop as the same stop,
#: not as "stop at once": a process group's SIGTERM (``timeout``, ``kill -- -PGID``, a scheduler)
#: reaches each worker directly and again from its driver, which stops its workers with SIGTERM
#: when it is stopped, milliseconds apart; taken as two, the worker lost the steps since its last
#: checkpoint instead of saving at its rollout's end
REPEAT_SECONDS = 5.0
_now = time.monotonic  # the clock REPEAT_SECONDS is measured on (a test sets its own)
_announce: Callable[[int], None] | None = None
_otherwise_die = False


def install(announce: Callable[[int], None] | None = None, otherwise_die: bool = False,
            signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """Handle ``signals`` as the module docstring says. ``announce(signum)`` is called when a
    signal only asks the work to stop (a command says how to stop at once). ``otherwise_die``: a
    signal outside :func:`safe_points` ends the process as the default action would (a worker
    process, whose driver stops it and for which a traceback would be noise), and so does leaving
    :func:`safe_points` once the work there has saved."""
    global _announce, _otherwise_die
    _announce, _otherwise_die = announce, otherwise_die
    for signum in signals:
        signal.signal(signum, handle)


def handle(signum: int, frame) -> None:
    """The handler :func:`install` sets (callable directly, as a test does)."""
    global _requested, _requested_at
    if _depth > 0 and _requested is None:
        _requested, _requested_at = signum, _now()
        if _announce is not None:
            _announce(signum)
        return
    if _depth > 0 and _otherwise_die and _now() - _requested_at < REPEAT_SECONDS:
        return  # the same stop arriving again (see REPEAT_SECONDS): the work still saves first
    _stop(signum)


def _stop(signum: int) -> None:
    if _otherwise_die:  # as the signal's default action: the process ends here
        # blocked while the default action is put back: a signal arriving in between was otherwise
        # reported as "ignored due to race condition", a traceback on stderr; it is delivered, and
        # ends the process, when unblocked
        signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    raise Interrupted(signum)


def requested() -> int | None:
    """The signal that asked the work in :func:`safe_points` to stop, or None."""
    return _requested


@contextlib.contextmanager
def safe_points() -> Iterator[None]:
    """Work inside stops at its next safe point when a signal asks it to (see the module
    docstring); leaving the outermost block with a request pending raises :class:`Interrupted`."""
    global _depth, _requested
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _requested is not None:
            signum, _requested = _requested, None
            if sys.exc_info()[0] is None:  # not while another exception is on its way out
                _stop(signum)
