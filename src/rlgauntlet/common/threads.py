"""The thread policy: how many CPU threads torch may use for our networks.

Default: **one intra-op thread per process**, for every network. Measured on 2 cores
(benchmarks/contention.py, docs/reproduction.md): with torch's default (one thread per
core), one competing CPU-bound process makes every small parallel region wait for a
descheduled thread, and evaluations run 5–20× slower; with one thread they keep their
speed. Vector MLPs gain nothing from a second thread even on an idle machine (their cost is
Python and autograd overhead, not arithmetic); the Nature CNN gains on an idle machine only
(see the benchmark), so more threads are an explicit choice: ``--threads N`` on every command
that runs networks, or ``$RLGAUNTLET_THREADS`` for library use. A sweep worker gets the same
default, so W workers use W cores.

Example:
    >>> resolve_threads(None, environ={})
    1
    >>> resolve_threads(None, environ={"RLGAUNTLET_THREADS": "3"})
    3
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping

from rlgauntlet.errors import UserError

ENV_VAR = "RLGAUNTLET_THREADS"
DEFAULT_THREADS = 1


def resolve_threads(requested: int | None = None, environ: Mapping[str, str] | None = None) -> int:
    """The intra-op thread count: ``requested`` (``--threads``), else ``$RLGAUNTLET_THREADS``, else 1."""
    if requested is None:
        text = (os.environ if environ is None else environ).get(ENV_VAR)
        if text is None or not text.strip():
            return DEFAULT_THREADS
        try:
            requested = int(text)
        except ValueError:
            raise UserError(f"{ENV_VAR}={text!r} is not a whole number of threads; e.g. {ENV_VAR}=1") from None
    if requested < 1:
        raise UserError(f"threads={requested}: give at least 1 (the default, safe on a busy machine)")
    return requested


@contextmanager
def thread_policy(requested: int | None = None) -> Iterator[int]:
    """Run a block with the resolved number of torch intra-op threads, restoring the previous
    setting afterwards (library calls must not change the caller's torch settings for good)."""
    import torch

    threads = resolve_threads(requested)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)
