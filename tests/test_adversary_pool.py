"""The adversary pool of alternating training: each episode meets one member (the learned
adversary, or a constant push director), drawn at its first step and kept; the draw frequencies
follow the preset's share; a new budget reaches every member."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.threats.base import Memory
from rlgauntlet.threats.learned.actor import AttackActor
from rlgauntlet.training.defences.atla import AdversaryPool
from rlgauntlet.victims import TorchVictim


class GaussianHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.log_std = nn.Parameter(torch.full((2,), -0.5))

    def forward(self, x):
        return self.body(x), self.log_std


class MarkedAdversary:
    """Stands for the learned adversary: adds exactly its ε to every input number."""

    def __init__(self, eps: float) -> None:
        self.actor = AttackActor("sarl", eps)

    def perturb(self, x, victim, rng):
        return x + self.actor.eps


def _victim():
    torch.manual_seed(0)
    return TorchVictim(GaussianHead(), "gaussian", gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                       gym.spaces.Box(-1.0, 1.0, (2,), np.float32))


def _rng(rows: int, seed: int = 0) -> BatchRNG:
    return BatchRNG([torch.Generator().manual_seed(seed + k) for k in range(rows)])


def test_each_episode_meets_one_member_drawn_at_its_start_with_the_presets_frequencies():
    """4,000 episodes: the learned adversary's share is 1 − 0.4 = 0.6 and each of the four pushes'
    0.1, within 4 binomial standard deviations; an episode keeps its member over its steps."""
    victim = _victim()
    pool = AdversaryPool(MarkedAdversary(0.1), [[1, 0], [-1, 0], [0, 1], [0, -1]], push_share=0.4)
    assert pool.probabilities == pytest.approx([0.6, 0.1, 0.1, 0.1, 0.1])
    episodes = 4000
    states = [pool.new_state() for _ in range(episodes)]
    x = torch.zeros(episodes, 4, dtype=victim.dtype)
    rng = _rng(episodes)
    for step in range(3):
        memory = Memory(states, torch.full((episodes,), step))
        out, acted = pool.apply(x, victim, rng, memory, torch.ones(episodes, dtype=torch.bool))
        members = [s["member"] for s in states]
        if step == 0:
            first = members
        assert members == first  # drawn once, at the episode's first step
    counts = np.bincount(first, minlength=5)
    for count, p in zip(counts, pool.probabilities):
        assert abs(count - episodes * p) <= 4 * math.sqrt(episodes * p * (1 - p))
    learned = torch.tensor(first) == 0  # member indices (integers), not floats
    assert torch.allclose(out[learned], x[learned] + 0.1)  # the learned member's rows: its perturbation
    pushed = out[~learned] - x[~learned]
    assert (pushed.abs().amax(dim=1) <= 0.1 + 1e-9).all() and (pushed.abs().amax(dim=1) > 0).all()  # a push, in its ball


def test_a_push_member_pushes_along_its_own_direction():
    """The rows of the push along +a₁ move the victim's first action up and the rows of −a₁ down."""
    victim = _victim()
    pool = AdversaryPool(MarkedAdversary(0.1), [[1, 0], [-1, 0]], push_share=0.999)
    rows = 64
    states = [pool.new_state() for _ in range(rows)]
    x = torch.randn(rows, 4, generator=torch.Generator().manual_seed(3), dtype=victim.dtype)
    out, _ = pool.apply(x, victim, _rng(rows), Memory(states, torch.zeros(rows)), torch.ones(rows, dtype=torch.bool))
    with torch.no_grad():
        moved = victim.forward(out).mean[:, 0] - victim.forward(x).mean[:, 0]
    members = torch.tensor([s["member"] for s in states])
    assert (moved[members == 1] > 0).all() and (moved[members == 2] < 0).all()


def test_a_new_budget_reaches_every_member_and_bad_shares_are_refused():
    victim = _victim()
    pool = AdversaryPool(MarkedAdversary(0.1), [[1, 0]], push_share=0.5)
    pool.actor = AttackActor("sarl", 0.02)
    assert pool.learned.actor.eps == 0.02
    rows = 32
    states = [pool.new_state() for _ in range(rows)]
    x = torch.zeros(rows, 4, dtype=victim.dtype)
    out, _ = pool.apply(x, victim, _rng(rows), Memory(states, torch.zeros(rows)), torch.ones(rows, dtype=torch.bool))
    assert float((out - x).abs().max()) <= 0.02 + 1e-9
    for share in (0.0, 1.0):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            AdversaryPool(MarkedAdversary(0.1), [[1, 0]], push_share=share)


def test_a_pool_preset_trains_its_agent_against_the_pool(monkeypatch, tmp_path):
    """Wiring: a preset with a push share trains the agent in envs whose threat is the pool (the
    learned PA-AD adversary and Pendulum's push directions), and records the share in its config."""
    import json

    from rlgauntlet.training import recipes
    from rlgauntlet.training.defences import atla
    from rlgauntlet.training.threat_env import ThreatVecEnv

    monkeypatch.setitem(recipes.PRESETS, "tiny-pendulum-ppo", recipes.TrainPreset(
        name="tiny-pendulum-ppo", env_id="Pendulum-v1", algo="ppo", total_timesteps=128, n_envs=2, seed=0,
        target_return=-200.0, checkpoint_every=64,
        hyperparams=dict(policy="MlpPolicy", n_steps=32, batch_size=32, n_epochs=1)))
    monkeypatch.setitem(recipes.ATLA_PRESETS, "tiny-pool", recipes.ATLAPreset(
        "tiny-pool", "tiny-pendulum-ppo", "pa_atla", eps=0.1, total_agent_steps=64, checkpoint_every=1,
        push_share=0.5, adversary={"n_epochs": 1, "batch_size": 32}))
    threats = []
    real_init = ThreatVecEnv.__init__
    monkeypatch.setattr(ThreatVecEnv, "__init__",
                        lambda self, venv, threat, seed: threats.append(threat) or real_init(self, venv, threat, seed))
    ckpt = atla.train_atla("tiny-pool", tmp_path / "run", log=lambda line: None)
    [threat] = threats
    assert isinstance(threat, AdversaryPool) and threat.directions == [[1], [-1]]
    assert json.loads((ckpt / "progress.json").read_text())["config"]["push_share"] == 0.5


def test_pushes_at_several_budgets_are_members_of_their_own_with_their_own_ball():
    """Two directions at fractions (0.5, 1) of ε 0.1: four push members of share 0.6 / 4 each, built
    at 0.05 and 0.1; a new budget scales them all; fractions outside (0, 1] are refused."""
    pool = AdversaryPool(MarkedAdversary(0.1), [[1, 0], [-1, 0]], push_share=0.6, eps_fractions=(0.5, 1.0))
    assert pool.probabilities == pytest.approx([0.4, 0.15, 0.15, 0.15, 0.15])
    assert [t.spec for t in pool._pushes] == ["push:direction=1|0,eps=0.05", "push:direction=1|0,eps=0.1",
                                              "push:direction=-1|0,eps=0.05", "push:direction=-1|0,eps=0.1"]
    pool.actor = AttackActor("sarl", 0.02)
    assert [t.params.eps for t in pool._pushes] == pytest.approx([0.01, 0.02, 0.01, 0.02])
    victim = _victim()
    rows = 400
    states = [pool.new_state() for _ in range(rows)]
    x = torch.zeros(rows, 4, dtype=victim.dtype)
    out, _ = pool.apply(x, victim, _rng(rows), Memory(states, torch.zeros(rows)), torch.ones(rows, dtype=torch.bool))
    members = torch.tensor([s["member"] for s in states])
    size = (out - x).abs().amax(dim=1)
    for index, budget in ((1, 0.01), (2, 0.02), (3, 0.01), (4, 0.02)):
        assert (members == index).any()
        assert float(size[members == index].max()) <= budget + 1e-9
    assert float(size[members == 2].max()) > 0.01 + 1e-6  # the full-budget member uses more than the half one
    for bad in ((), (0.0, 1.0), (1.5,)):
        with pytest.raises(ValueError, match="fractions of ε in"):
            AdversaryPool(MarkedAdversary(0.1), [[1, 0]], push_share=0.5, eps_fractions=bad)
