"""A loopback-only Linux network namespace with a local Ray head in it, for tests and
benchmarks of the Ray executor.

Outside such a namespace Ray advertises the machine's non-loopback interface even when told
127.0.0.1; inside one that has only ``lo``, every Ray process binds loopback. The namespace is
made with ``ip netns`` (root), the head started with ``ray start --head``, and on exit the head
is stopped, every process left in the namespace killed and the namespace deleted.

Example:
    >>> with RayNamespace(cpus=2) as ns:                                    # doctest: +SKIP
    ...     ns.run(["rlgauntlet", "sweep", "s.yaml", "--store", "s.sqlite", "--executor", "ray",
    ...             "--address", ns.address])
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path


def namespace_unavailable() -> str | None:
    """Why a namespaced Ray head cannot be made here (None when it can)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (pip install 'rlgauntlet[ray]')"
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("ip") is None:
        return "a network namespace needs Linux, root and iproute2 (ip netns)"
    return None


class RayNamespace:
    """A namespace named ``rlgt-<random>`` with a Ray head of ``cpus`` CPUs on 127.0.0.1:``port``."""

    def __init__(self, cpus: int = 2, port: int = 6391) -> None:
        self.name = f"rlgt-{uuid.uuid4().hex[:8]}"
        self.cpus = cpus
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.ray = str(Path(sys.executable).with_name("ray"))
        # token authentication with a token made here and given to head and client alike, so that
        # nothing depends on a token file an earlier run left in the home folder; usage
        # statistics would try the network
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self._made = False

    def run(self, command: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
        """Run ``command`` inside the namespace (stdout and stderr captured as text)."""
        return subprocess.run(["ip", "netns", "exec", self.name, *command], capture_output=True, text=True,
                              timeout=timeout, env=kwargs.pop("env", self.env), **kwargs)

    def __enter__(self) -> "RayNamespace":
        made = subprocess.run(["ip", "netns", "add", self.name], capture_output=True, text=True)
        if made.returncode != 0:
            raise RuntimeError(f"cannot make a network namespace: {made.stderr.strip()}")
        self._made = True
        try:
            self.run(["ip", "link", "set", "lo", "up"], timeout=30).check_returncode()
            head = self.run([self.ray, "start", "--head", "--num-cpus", str(self.cpus), "--port", str(self.port),
                             "--include-dashboard=false", "--disable-usage-stats"], timeout=180)
            if head.returncode != 0:
                raise RuntimeError(f"ray start failed: {head.stderr[-1000:]}")
            self.head_output = head.stdout + head.stderr
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if not self._made:
            return
        try:
            self.run([self.ray, "stop", "--force"], timeout=120)
        except subprocess.TimeoutExpired:
            pass
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        self._made = False


class RayTwoNodes:
    """Two Ray nodes on one machine, as two machines: a head and a worker, each in a network
    namespace of its own joined by a veth pair (``10.231.0.1`` and ``10.231.0.2``), each started
    with its own ``ray start`` and CPU count. The driver runs in the head's namespace
    (:meth:`run`, :meth:`popen`); :meth:`kill_worker` kills every process of the worker node, as
    a machine that dies."""

    HEAD_IP, WORKER_IP = "10.231.0.1", "10.231.0.2"

    def __init__(self, head_cpus: int = 1, worker_cpus: int = 1, port: int = 6392) -> None:
        tag = uuid.uuid4().hex[:6]
        self.head, self.worker = f"rlgt-{tag}-h", f"rlgt-{tag}-w"
        self.head_cpus, self.worker_cpus, self.port = head_cpus, worker_cpus, port
        self.address = f"{self.HEAD_IP}:{port}"
        self.ray = str(Path(sys.executable).with_name("ray"))
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self._made: list[str] = []

    def _in(self, namespace: str, command: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", namespace, *command], capture_output=True, text=True,
                              timeout=timeout, env=self.env)

    def run(self, command: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
        """Run ``command`` in the head's namespace (the driver's machine)."""
        return subprocess.run(["ip", "netns", "exec", self.head, *command], capture_output=True, text=True,
                              timeout=timeout, env=kwargs.pop("env", self.env), **kwargs)

    def popen(self, command: list[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.head, *command], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=kwargs.pop("env", self.env), **kwargs)

    def pids(self, namespace: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def titles(self, namespace: str) -> list[str]:
        """The command lines of the namespace's processes (a Ray worker's shows ``ray::TASK``)."""
        titles = []
        for pid in self.pids(namespace):
            try:
                titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="ignore"))
            except OSError:
                pass
        return titles

    def kill_worker(self) -> None:
        for pid in self.pids(self.worker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> "RayTwoNodes":
        try:
            for name in (self.head, self.worker):
                made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
                if made.returncode != 0:
                    raise RuntimeError(f"cannot make a network namespace: {made.stderr.strip()}")
                self._made.append(name)
            link = subprocess.run(["ip", "link", "add", "rlgt-h", "netns", self.head, "type", "veth", "peer", "name",
                                   "rlgt-w", "netns", self.worker], capture_output=True, text=True)
            if link.returncode != 0:
                raise RuntimeError(f"cannot link the namespaces: {link.stderr.strip()}")
            for name, dev, ip in ((self.head, "rlgt-h", self.HEAD_IP), (self.worker, "rlgt-w", self.WORKER_IP)):
                for command in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", f"{ip}/24", "dev", dev],
                                ["ip", "link", "set", dev, "up"]):
                    self._in(name, command, timeout=30).check_returncode()
            head = self._in(self.head, [self.ray, "start", "--head", "--node-ip-address", self.HEAD_IP, "--port",
                                        str(self.port), "--num-cpus", str(self.head_cpus), "--include-dashboard=false",
                                        "--disable-usage-stats"])
            if head.returncode != 0:
                raise RuntimeError(f"ray start --head failed: {head.stderr[-1000:]}")
            worker = self._in(self.worker, [self.ray, "start", "--address", self.address, "--node-ip-address",
                                            self.WORKER_IP, "--num-cpus", str(self.worker_cpus),
                                            "--disable-usage-stats"])
            if worker.returncode != 0:
                raise RuntimeError(f"ray start (worker node) failed: {worker.stderr[-1000:]}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for name in reversed(self._made):
            try:
                self._in(name, [self.ray, "stop", "--force"], timeout=120)
            except subprocess.TimeoutExpired:
                pass
            for pid in self.pids(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made = []
