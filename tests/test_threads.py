"""The thread policy: one torch thread unless asked, restored after library calls."""

import subprocess
import sys

import pytest
import torch

from rlgauntlet.common.threads import resolve_threads, thread_policy
from rlgauntlet.errors import UserError


def test_resolution_order_and_bad_values():
    assert resolve_threads(None, environ={}) == 1
    assert resolve_threads(None, environ={"RLGAUNTLET_THREADS": "2"}) == 2
    assert resolve_threads(3, environ={"RLGAUNTLET_THREADS": "2"}) == 3  # the option wins
    with pytest.raises(UserError, match="RLGAUNTLET_THREADS='two' is not a whole number"):
        resolve_threads(None, environ={"RLGAUNTLET_THREADS": "two"})
    with pytest.raises(UserError, match="threads=0: give at least 1"):
        resolve_threads(0, environ={})


def test_library_evaluate_runs_with_the_policy_and_restores_the_callers_setting(monkeypatch):
    from rlgauntlet import evaluate
    from rlgauntlet.victims import sb3

    seen = []
    original = sb3.SB3Victim.forward
    monkeypatch.setattr(sb3.SB3Victim, "forward", lambda self, x: seen.append(torch.get_num_threads()) or original(self, x))
    monkeypatch.delenv("RLGAUNTLET_THREADS", raising=False)
    torch.set_num_threads(2)
    try:
        evaluate("zoo:cartpole-ppo", "CartPole-v1", episodes=1, n_envs=1, impact=False)
        assert set(seen) == {1} and torch.get_num_threads() == 2
        seen.clear()
        with thread_policy(2):
            assert torch.get_num_threads() == 2
        evaluate("zoo:cartpole-ppo", "CartPole-v1", episodes=1, n_envs=1, impact=False, threads=2)
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(1)


def test_cli_threads_option_is_validated(tmp_path, cli_env):
    res = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", "zoo:cartpole-ppo", "--env",
                          "CartPole-v1", "--threads", "0"], capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert res.returncode == 2 and "--threads" in res.stderr and "Traceback" not in res.stderr
