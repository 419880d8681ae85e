"""A board of gauntlets on a two-node Ray cluster (a head and a worker node, each in a network
namespace of its own, each with its own ``ray start`` and CPU count): cells run on both nodes,
the results equal the local executor's, and killing the worker node mid-run loses no stored
episode while a re-run completes the rest. Slow (minutes); needs root and ``ip netns``."""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
BOARD = "name: cartpole\nlevel: quick\nagents:\n  - {agent: zoo:cartpole-dqn, method: dqn}\n  - {agent: zoo:cartpole-ppo, method: ppo}\n"
SCRIPT = ("import sys\nif __name__ == '__main__':\n    from rlgauntlet.gauntlet import protocols\n"
          "    sys.path.insert(0, sys.argv[1])\n    import test_board\n"
          "    protocols.PROTOCOLS['classic'] = test_board.SMALL\n    from rlgauntlet.cli import main\n"
          "    sys.argv = ['rlgauntlet', *sys.argv[2:]]\n    main()\n")


def episode_rows(store: Path) -> list[tuple]:
    """(spec, seed, episode, return, length) of every stored episode, in order (run ids aside)."""
    import json

    if not store.exists():
        return []
    conn = sqlite3.connect(store)
    try:
        rows = conn.execute("SELECT r.meta, e.seed, e.episode, e.episode_return, e.length FROM episodes e "
                            "JOIN runs r ON r.run_id = e.run_id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()
    import re

    # a learned attacker's spec names its folder, which is each store's own
    return sorted((json.loads(meta)["agent"]["sha256"], re.sub(r"attacker=[^,]*", "attacker=…", json.loads(meta)["spec"]),
                   *rest) for meta, *rest in rows)


def test_a_board_on_two_ray_nodes_runs_on_both_matches_local_and_survives_a_lost_node(tmp_path, monkeypatch):
    sys.path.insert(0, str(TESTS.parent / "tools"))
    from netns import RayTwoNodes, namespace_unavailable  # tools/netns.py: for tests and benchmarks only

    reason = namespace_unavailable()
    if reason:
        pytest.skip(reason)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    board, script = tmp_path / "board.yaml", tmp_path / "run.py"
    board.write_text(BOARD)
    script.write_text(SCRIPT)
    command = [sys.executable, str(script), str(TESTS), "gauntlet", "--agents", str(board)]
    try:
        cluster = RayTwoNodes(head_cpus=1, worker_cpus=1)
        with cluster as nodes:
            out = tmp_path / "ray"
            driver = nodes.popen([*command, "--out", str(out), "--executor", "ray", "--address", nodes.address],
                                 cwd=tmp_path)
            seen = {"head": False, "worker": False}
            deadline, killed_at = time.monotonic() + 600, None
            while driver.poll() is None and time.monotonic() < deadline:
                for node, name in (("head", nodes.head), ("worker", nodes.worker)):
                    seen[node] |= any("ray::run_chunk" in t for t in nodes.titles(name))
                if killed_at is None and seen["worker"] and len(episode_rows(out / "gauntlet.sqlite")) >= 40:
                    killed_at = episode_rows(out / "gauntlet.sqlite")
                    nodes.kill_worker()  # the worker machine dies mid-run
                time.sleep(0.1)
            first = driver.communicate(timeout=120)
            assert killed_at is not None, first[1][-2000:]
            assert seen == {"head": True, "worker": True}  # cells ran on both nodes
            after_kill = episode_rows(out / "gauntlet.sqlite")
            assert set(killed_at) <= set(after_kill)  # nothing stored was lost
            rerun = nodes.run([*command, "--out", str(out), "--executor", "ray", "--address", nodes.address],
                              cwd=tmp_path, timeout=900)
            assert rerun.returncode == 0, rerun.stderr[-2000:]
    except RuntimeError as exc:
        pytest.skip(str(exc))
    import subprocess

    local = subprocess.run([*command, "--out", str(tmp_path / "local"), "--workers", "2"], capture_output=True,
                           text=True, cwd=tmp_path, timeout=900)
    assert local.returncode == 0, local.stderr[-2000:]
    ray_rows, local_rows = episode_rows(tmp_path / "ray" / "gauntlet.sqlite"), episode_rows(tmp_path / "local" / "gauntlet.sqlite")
    assert len(ray_rows) == len(set(ray_rows)) and ray_rows == local_rows  # complete, each episode once, equal
