"""benchmarks/actor_reach.py: the ceiling of an ε-ball's action change, on a known answer."""

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from actor_reach import clean_states, largest_change, merged  # noqa: E402


class _Out:
    def __init__(self, mean: torch.Tensor) -> None:
        self.mean = mean

    def central_action(self) -> torch.Tensor:
        return self.mean


class _LinearVictim:
    """μ(x) = x Wᵀ: the largest ‖μ(x + δ) − μ(x)‖₂ over ‖δ‖∞ ≤ ε is ε·max over sign vectors of ‖W s‖₂."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def forward(self, x: torch.Tensor) -> _Out:
        return _Out(x @ self.weight.T)


def test_the_ceiling_is_the_largest_change_the_ball_allows_on_a_linear_victim():
    # diagonal W: every corner of the ball is a maximiser, the answer is ε·‖diag‖₂; one row w: ε·‖w‖₁
    eps = 0.15
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    diagonal = _LinearVictim(torch.diag(torch.tensor([2.0, -1.0, 0.5, 3.0])))
    found = largest_change(diagonal, x, diagonal.forward(x).mean, eps)
    assert torch.allclose(found, torch.full((6,), eps * (4 + 1 + 0.25 + 9) ** 0.5), rtol=1e-5)
    row = _LinearVictim(torch.tensor([[1.0, -2.0, 0.5, 0.0]]))
    found = largest_change(row, x, row.forward(x).mean, eps)
    assert torch.allclose(found, torch.full((6,), eps * 3.5), rtol=1e-5)
    # never above what the ball allows (a wrong projection or step would overshoot)
    assert (found <= eps * 3.5 * (1 + 1e-6)).all()


class _CountingEnv(gym.Env):
    """Observation [t, t] at step t of an episode of 5 steps (then a reset)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0.0, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, self.t], np.float32), 0.0, self.t == 5, False, {}


class _SummingVictim:
    """A recurrent victim whose memory is the sum of the inputs it acted on this episode."""

    recurrent = True

    def initial_state(self):
        return torch.zeros(2)

    def use_state(self, rows):
        self.held = torch.stack(rows)

    def advance_state(self, x):
        return list(self.held + x)

    def preprocess(self, obs):
        return torch.as_tensor(np.asarray(obs), dtype=torch.float32)

    def forward(self, x):
        return _Out(x[:, :1] + self.held[:, :1])

    def actions(self, out):
        return out.mean


class _Job:
    victim = _SummingVictim()

    @staticmethod
    def env_fn():
        return _CountingEnv()


def test_a_recurrent_victims_states_come_with_the_memory_it_had_before_each():
    """Inputs t = 0..4 per episode: the memory before input t is 0 + 1 + ... + (t − 1), back to 0 at
    each new episode (an off-by-one, or a memory kept across episodes, gives other sums)."""
    x, memories = clean_states(_Job(), steps=12, every=3)
    assert x[:, 0].tolist() == [0.0, 3.0, 1.0, 4.0]  # steps 0, 3, 6, 9 of episodes of five inputs
    assert [float(m[0]) for m in memories] == [0.0, 0 + 1 + 2, 0.0, 0 + 1 + 2 + 3]


def test_a_run_for_some_agents_keeps_the_others_measurements(tmp_path):
    out = tmp_path / "reach.json"
    row = lambda agent, eps, value: {"agent": agent, "env": "E", "eps": eps, "fgsm_change": value}  # noqa: E731
    assert merged(out, [row("a", 0.1, 1.0)]) == [row("a", 0.1, 1.0)]  # no file yet
    out.write_text(json.dumps({"rows": [row("a", 0.1, 1.0), row("b", 0.1, 2.0), row("a", 0.2, 3.0)]}))
    assert merged(out, [row("a", 0.1, 9.0)]) == [row("b", 0.1, 2.0), row("a", 0.2, 3.0), row("a", 0.1, 9.0)]
    out.write_text("{not json")
    assert merged(out, [row("c", 0.1, 1.0)]) == [row("c", 0.1, 1.0)]
