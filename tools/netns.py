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
