"""Executors: run a function over a list of tasks somewhere else and hand each result back to
the driver as soon as it is ready. A sweep's chunks run through them; the driver alone writes.

* :class:`LocalExecutor`: worker processes on this machine (``spawn``: a clean interpreter per
  worker, nothing inherited from the driver's torch or signal state). A worker that dies
  breaks the pool; its unfinished tasks are resubmitted to a fresh pool, up to
  ``max_attempts`` times each.
* :class:`RayExecutor`: Ray tasks (one CPU each) on a running cluster (``address``) or on a
  local head it starts with ``workers`` CPUs and stops afterwards. Ray resubmits the task of
  a worker that died (``max_retries``).

Both are context managers; on an interrupt (Ctrl-C) the workers are stopped and whatever
``on_done`` already received stays with the caller.

Example:
    >>> with make_executor("local", workers=2) as pool:                  # doctest: +SKIP
    ...     pool.run(abs, [-1, -2], lambda task, result: print(task, result))
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Sequence, TypeVar

from rlgauntlet.common import stopping
from rlgauntlet.errors import UserError

T = TypeVar("T")
R = TypeVar("R")
OnDone = Callable[[T, R], None]


#: seconds between a worker's checks that its driver is alive (where the kernel cannot tell it)
DRIVER_CHECK_SECONDS = 1.0
#: how long a stopping driver waits for each worker: a training asked to stop finishes its rollout
#: and saves (common.stopping), a few seconds for the gauntlet's directors
TRAINING_SAVE_SECONDS = 60


def _worker_init(driver_pid: int | None = None) -> None:
    # Ctrl-C in a terminal reaches the whole process group: the driver handles it (it stops the
    # workers and says what was kept); a worker dying of it first would look like a crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The driver stops its workers with SIGTERM: a training saves at its rollout's end first
    # (common.stopping), any other task ends at once, as before
    stopping.install(otherwise_die=True, signals=(signal.SIGTERM,))
    if driver_pid is not None:
        _die_with_driver(driver_pid)


def _die_with_driver(driver_pid: int) -> None:
    """End this worker when its driver dies, even by SIGKILL (which the driver cannot handle):
    Linux's parent-death signal where there is one, and everywhere a thread that checks the
    parent between tasks' work every second. Without this, a killed sweep leaves its workers
    (and multiprocessing's resource tracker, which waits for them) running for minutes."""
    import threading
    import time

    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != driver_pid:  # the driver died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(DRIVER_CHECK_SECONDS)
            if os.getppid() != driver_pid:
                os._exit(1)

    threading.Thread(target=watch, name="rlgauntlet-driver-watch", daemon=True).start()


class LocalExecutor:
    """``workers`` processes on this machine."""

    def __init__(self, workers: int = 1, max_attempts: int = 3) -> None:
        self.workers = workers
        self.max_attempts = max_attempts
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self._stop()

    def _stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())  # no public handle on the workers
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:  # a worker in a training saves at its rollout's end first: seconds
            process.join(timeout=TRAINING_SAVE_SECONDS)

    def run(self, fn: Callable[[T], R], tasks: Sequence[T], on_done: OnDone) -> None:
        """Run ``fn(task)`` for every task, calling ``on_done(task, result)`` in the driver as
        each finishes (in completion order). An exception raised by ``fn`` is raised here. The
        worker processes stay up for the next call in the same ``with`` block (what they loaded,
        an agent, stays loaded); a broken pool is replaced."""
        attempts: Counter = Counter()
        pending = list(tasks)
        while pending:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_worker_init, initargs=(os.getpid(),))
            futures = {self._pool.submit(fn, task): task for task in pending}
            pending, broken = [], False
            for future in as_completed(futures):
                task = futures[future]
                try:
                    result = future.result()
                except BrokenProcessPool:
                    broken = True
                    attempts[task] += 1
                    if attempts[task] >= self.max_attempts:
                        raise UserError(f"a worker process died {attempts[task]} times running {task}; the finished "
                                        "episodes are kept in the store: re-run the sweep to complete it") from None
                    pending.append(task)
                    continue
                on_done(task, result)
            if broken:
                self._stop()


class _stderr_kept:
    """Send this process's stderr (file descriptor 2, where Ray's C++ core logs) to a temporary
    file while the block runs; ``text()`` is what was written."""

    def __enter__(self) -> "_stderr_kept":
        import tempfile

        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        self._text = ""
        return self

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self._text = self._file.read().decode(errors="replace")
        self._file.close()

    def text(self) -> str:
        return self._text


class RayExecutor:
    """Ray tasks, one CPU each, on the cluster at ``address`` or on a local head with
    ``workers`` CPUs (started here and stopped on exit)."""

    def __init__(self, workers: int = 1, address: str | None = None, max_retries: int = 2) -> None:
        self.workers = workers
        self.address = address
        self.max_retries = max_retries
        self._pending: dict = {}

    def __enter__(self) -> "RayExecutor":
        try:
            import ray
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install 'rlgauntlet[ray]' (or use --executor local)") from None
        options = dict(logging_level=logging.WARNING, log_to_driver=False, include_dashboard=False)
        with _stderr_kept() as log:  # Ray's C++ core logs every failed attempt; our one line says it
            try:
                if self.address:
                    ray.init(address=self.address, **options)
                else:
                    ray.init(num_cpus=self.workers, **options)
                failure = None
            except (ray.exceptions.AuthenticationError, ConnectionError) as exc:
                failure = exc
        if failure is not None:
            refused = isinstance(failure, ray.exceptions.AuthenticationError) or "InvalidAuthToken" in log.text() \
                or "Unauthenticated" in log.text()
            # Ray (2.59+) starts clusters with token authentication; a client given an explicit
            # address sends a token only with RAY_AUTH_MODE=token, and it must be the head's
            fix = ("set RAY_AUTH_MODE=token and the head's token (RAY_AUTH_TOKEN, or the file ~/.ray/auth_token as "
                   "on the head) in this shell")
            if refused:
                raise UserError(f"--address {self.address}: the Ray cluster refused this client's token; {fix}") from None
            raise UserError(f"--address {self.address}: cannot connect to a Ray cluster there ({failure}); start one "
                            f"with `ray start --head`, or, if it uses token authentication, {fix}") from None
        if log.text().strip():
            sys.stderr.write(log.text())  # a successful start keeps what Ray said
        self._ray = ray
        return self

    def __exit__(self, *exc) -> None:
        for ref in self._pending:
            self._ray.cancel(ref, force=True)
        self._pending = {}
        self._ray.shutdown()

    def run(self, fn: Callable[[T], R], tasks: Sequence[T], on_done: OnDone) -> None:
        """As :meth:`LocalExecutor.run`, with Ray tasks."""
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=self.max_retries)(fn)
        self._pending = {remote.remote(task): task for task in tasks}
        while self._pending:
            ready, _ = ray.wait(list(self._pending), num_returns=1)
            for ref in ready:
                task = self._pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(exc.cause, UserError):
                        raise exc.cause from None
                    raise
                except ray.exceptions.WorkerCrashedError:
                    raise UserError(f"a Ray worker died {self.max_retries + 1} times running {task}; the finished "
                                    "episodes are kept in the store: re-run the sweep to complete it") from None
                on_done(task, result)


#: the executors a job can run its cells on
EXECUTOR_NAMES = ("local", "ray")


def check_executor(name: str, workers: int = 1, address: str | None = None, timeout: float = 3.0,
                   probe: bool = True) -> None:
    """Refuse, before anything is created or stored, an executor that cannot run: an unknown
    name, fewer than one worker, ``--address`` without Ray, Ray not installed, or an address where
    nothing answers (one TCP connection to it, closed at once, unless ``probe`` is False; ``auto``
    is left to Ray)."""
    import socket

    if name not in EXECUTOR_NAMES:
        raise UserError(f"--executor {name!r} is unknown; use one of {', '.join(EXECUTOR_NAMES)}")
    if workers < 1:
        raise UserError(f"--workers {workers}: give at least 1")
    if address is None:
        return
    if name != "ray":
        raise UserError("--address is the Ray cluster's; use it with --executor ray")
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install 'rlgauntlet[ray]' (or use --executor local)") from None
    if address in ("auto", "local") or not probe:
        return
    where = address.split("://", 1)[-1]
    host, _, port = where.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--address {address}: give the head's HOST:PORT (as `ray start --head` prints it), "
                        "e.g. --address 127.0.0.1:6379")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"--address {address}: no Ray cluster answers there ({reason}); start one with "
                        "`ray start --head` on that machine, or drop --address to start a local head") from None


def make_executor(name: str, workers: int = 1, address: str | None = None) -> LocalExecutor | RayExecutor:
    """``local`` or ``ray`` (``address`` only applies to Ray), checked as :func:`check_executor`
    checks (callers probe the address before anything is written)."""
    check_executor(name, workers, address, probe=False)
    return LocalExecutor(workers) if name == "local" else RayExecutor(workers, address)


class OnDemandExecutor:
    """An executor that starts (Ray: connects) only when it first has tasks, then stays up for
    every later call in its ``with`` block: a job of several phases holds one, and a re-run with
    nothing left to do starts nothing."""

    def __init__(self, name: str, workers: int = 1, address: str | None = None) -> None:
        check_executor(name, workers, address, probe=False)
        self.name, self.workers, self.address = name, workers, address
        self._inner: LocalExecutor | RayExecutor | None = None

    def __enter__(self) -> "OnDemandExecutor":
        return self

    def __exit__(self, *exc) -> None:
        inner, self._inner = self._inner, None
        if inner is not None:
            inner.__exit__(*exc)

    def run(self, fn: Callable[[T], R], tasks: Sequence[T], on_done: OnDone) -> None:
        if not tasks:
            return
        if self._inner is None:
            self._inner = make_executor(self.name, self.workers, self.address).__enter__()
        self._inner.run(fn, tasks, on_done)
