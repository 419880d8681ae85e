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

    _tiny_pendulum_ppo(monkeypatch)
    monkeypatch.setitem(recipes.ATLA_PRESETS, "tiny-pool", recipes.ATLAPreset(
        "tiny-pool", "tiny-pendulum-ppo", "pa_atla", eps=0.1, total_agent_steps=64, checkpoint_every=1,
        push_share=0.5, adversary={"n_epochs": 1, "batch_size": 32}))
    threats = _training_threats(monkeypatch)
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


def test_a_prioritised_pool_draws_each_push_by_its_running_return_above_a_uniform_floor():
    """Closed form: pushes' running returns (1000, 2000, None, 3000) at temperature 500 share 0.4 as
    0.4 × (0.75 × e^(−Δ/500) / Σ + 0.25 / 4), the unmet push counted as the worst met (1000); the
    learned adversary keeps 0.6; without a temperature the same returns change nothing."""
    pool = AdversaryPool(MarkedAdversary(0.1), [[1, 0], [-1, 0], [0, 1], [0, -1]], push_share=0.4,
                         push_temperature=500.0)
    assert pool.probabilities == pytest.approx([0.6, 0.1, 0.1, 0.1, 0.1])  # nothing met yet: uniform
    pool.member_returns = [50.0, 1000.0, 2000.0, None, 3000.0]
    weights = np.exp(-np.array([0.0, 1000.0, 0.0, 2000.0]) / 500.0)
    expected = 0.4 * (0.75 * weights / weights.sum() + 0.25 / 4)
    assert pool.probabilities == pytest.approx([0.6, *expected])
    assert sum(pool.probabilities) == pytest.approx(1.0)
    assert pool.probabilities[1] > 3 * pool.probabilities[2] and pool.probabilities[4] >= 0.4 * 0.25 / 4
    uniform = AdversaryPool(MarkedAdversary(0.1), [[1, 0], [-1, 0], [0, 1], [0, -1]], push_share=0.4)
    uniform.member_returns = list(pool.member_returns)
    assert uniform.probabilities == pytest.approx([0.6, 0.1, 0.1, 0.1, 0.1])
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="positive return scale"):
            AdversaryPool(MarkedAdversary(0.1), [[1, 0]], push_share=0.5, push_temperature=bad)


def test_a_members_running_return_is_an_exponential_average_of_its_episodes():
    """Returns 100 then 200 then 400 for push 2: 100, 0.7·100 + 0.3·200 = 130, 0.7·130 + 0.3·400 = 211;
    an episode that had not started (no member) changes nothing."""
    pool = AdversaryPool(MarkedAdversary(0.1), [[1, 0], [-1, 0]], push_share=0.5, push_temperature=100.0)
    for episode_return, expected in ((100.0, 100.0), (200.0, 130.0), (400.0, 211.0)):
        pool.episode_ended({"member": 2}, episode_return)
        assert pool.member_returns == [None, None, pytest.approx(expected)]
    pool.episode_ended({"member": None}, 5.0)
    assert pool.member_returns == [None, None, pytest.approx(211.0)]
    assert pool.member_specs() == ["learned", "push:direction=1|0,eps=0.1", "push:direction=-1|0,eps=0.1"]


def test_a_prioritised_pools_draws_follow_its_probabilities():
    """4,000 episodes drawn with running returns that favour push 1: the counts match the
    prioritised probabilities (not the uniform ones) within 4 binomial standard deviations."""
    victim = _victim()
    pool = AdversaryPool(MarkedAdversary(0.1), [[1, 0], [-1, 0], [0, 1], [0, -1]], push_share=0.8,
                         push_temperature=200.0)
    pool.member_returns = [None, 500.0, 900.0, 1300.0, 1700.0]
    probabilities = pool.probabilities
    assert probabilities[1] > 0.4  # far from the uniform 0.2
    episodes = 4000
    states = [pool.new_state() for _ in range(episodes)]
    x = torch.zeros(episodes, 4, dtype=victim.dtype)
    pool.apply(x, victim, _rng(episodes, seed=7), Memory(states, torch.zeros(episodes)),
               torch.ones(episodes, dtype=torch.bool))
    counts = np.bincount([s["member"] for s in states], minlength=5)
    for count, p in zip(counts, probabilities):
        assert abs(count - episodes * p) <= 4 * math.sqrt(episodes * p * (1 - p))


def test_the_training_env_tells_the_threat_each_finished_episodes_full_return():
    """Pendulum (200-step episodes) under a threat that records what it is told: each finished
    episode's state and the sum of the rewards the env returned over it (no normaliser here)."""
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.training.threat_env import ThreatVecEnv

    class Listening(type(parse_threat("uniform_noise:eps=0.01"))):
        def new_state(self):
            return {"episode": None}

        def episode_ended(self, state, episode_return):
            heard.append((state["id"], episode_return))

    heard = []
    threat = Listening(Listening.Params(eps=0.01), spec="uniform_noise:eps=0.01")
    env = ThreatVecEnv(make_train_vec_env("Pendulum-v1", 2, 0), threat, seed=0)
    env.victim = _pendulum_victim()
    env.reset()
    for i, state in enumerate(env.states):
        state["id"] = i
    sums = np.zeros(2)
    for _ in range(200):
        _, rewards, dones, _ = env.step(np.zeros((2, 1), dtype=np.float32))
        sums += rewards
    assert dones.all() and [h[0] for h in heard] == [0, 1]
    assert [h[1] for h in heard] == pytest.approx(list(sums), rel=1e-5)  # the Monitor rounds to 6 digits
    env.close()


def _pendulum_victim():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2))
    return TorchVictim(_Head(net), "gaussian", gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
                       gym.spaces.Box(-2.0, 2.0, (1,), np.float32))


class _Head(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        out = self.net(x)
        return out[:, :1], out[:, 1]


def test_a_prioritised_preset_keeps_its_pools_returns_in_the_checkpoint_and_resumes_with_them(monkeypatch, tmp_path):
    """Wiring: a preset with a push temperature hands it to the pool, whose running returns are
    filled from the training episodes (Pendulum's 200-step episodes end within the run), saved in
    the checkpoint with the push drawn most, and handed back to the pool on resume."""
    import json

    from rlgauntlet.training import recipes
    from rlgauntlet.training.defences import atla

    _tiny_pendulum_ppo(monkeypatch)
    monkeypatch.setitem(recipes.ATLA_PRESETS, "tiny-prioritized", recipes.ATLAPreset(
        "tiny-prioritized", "tiny-pendulum-ppo", "pa_atla", eps=0.1, total_agent_steps=448, checkpoint_every=7,
        push_share=0.5, push_temperature=50.0, adversary={"n_epochs": 1, "batch_size": 32}))
    threats = _training_threats(monkeypatch)
    ckpt = atla.train_atla("tiny-prioritized", tmp_path / "run", log=lambda line: None)
    assert threats[0].push_temperature == 50.0
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["config"]["push_temperature"] == 50.0
    assert progress["pool_returns"] == threats[0].member_returns
    assert sum(r is not None for r in progress["pool_returns"]) >= 1  # two episodes ended (one per env)
    worst = progress["history"][-1]["pool_worst"]
    assert worst["member"].startswith("push:") and worst["probability"] == pytest.approx(max(threats[0].probabilities[1:]))
    progress["pool_returns"] = [None, -100.0, -900.0]
    (ckpt / "progress.json").write_text(json.dumps(progress))
    atla.train_atla("tiny-prioritized", tmp_path / "run", log=lambda line: None)  # finished: restores, trains nothing
    assert threats[1].member_returns == [None, -100.0, -900.0]


def _tiny_pendulum_ppo(monkeypatch) -> None:
    """A Pendulum PPO agent preset small enough to train alternating runs in seconds."""
    from rlgauntlet.training import recipes

    monkeypatch.setitem(recipes.PRESETS, "tiny-pendulum-ppo", recipes.TrainPreset(
        name="tiny-pendulum-ppo", env_id="Pendulum-v1", algo="ppo", total_timesteps=128, n_envs=2, seed=0,
        target_return=-200.0, checkpoint_every=64,
        hyperparams=dict(policy="MlpPolicy", n_steps=32, batch_size=32, n_epochs=1)))


def _training_threats(monkeypatch) -> list:
    """The threats training envs are built with from now on (filled as runs build them)."""
    from rlgauntlet.training.threat_env import ThreatVecEnv

    threats = []
    real_init = ThreatVecEnv.__init__
    monkeypatch.setattr(ThreatVecEnv, "__init__",
                        lambda self, venv, threat, seed: threats.append(threat) or real_init(self, venv, threat, seed))
    return threats


def test_a_prioritised_pool_run_stopped_after_its_first_episodes_goes_on_as_if_never_stopped(monkeypatch, tmp_path):
    """A pool learns from its episodes (each member's running return steers its draws), so its
    training env's state includes that (``learned_state``). Stopped after 8 of 14 iterations (the
    first 200-step episodes ended at iteration 7) and resumed, the run ends with the agent of the
    run never stopped, bit for bit (the property under test), and its resume is exact."""
    import json
    import types

    import torch

    from rlgauntlet.training import recipes
    from rlgauntlet.training.defences import atla

    _tiny_pendulum_ppo(monkeypatch)
    monkeypatch.setitem(recipes.ATLA_PRESETS, "tiny-prioritized", recipes.ATLAPreset(
        "tiny-prioritized", "tiny-pendulum-ppo", "pa_atla", eps=0.1, total_agent_steps=896, checkpoint_every=7,
        push_share=0.5, push_temperature=50.0, adversary={"n_epochs": 1, "batch_size": 32}))
    clock = iter(range(10**6))  # the deadline's clock: one tick per iteration
    monkeypatch.setattr(atla, "time", types.SimpleNamespace(monotonic=lambda: next(clock),
                                                            perf_counter=__import__("time").perf_counter))
    atla.train_atla("tiny-prioritized", tmp_path / "one", log=lambda line: None)
    atla.train_atla("tiny-prioritized", tmp_path / "two", deadline=7, log=lambda line: None)
    stopped = json.loads((tmp_path / "two" / "checkpoint" / "progress.json").read_text())
    assert stopped["agent_steps"] == 512 and any(r is not None for r in stopped["pool_returns"])
    atla.train_atla("tiny-prioritized", tmp_path / "two", log=lambda line: None)
    one, two = (torch.load(tmp_path / run / "checkpoint" / "agent" / "policy.pt", weights_only=True)
                for run in ("one", "two"))
    assert all(torch.equal(one[k], two[k]) for k in one)  # bit-exactness is the property under test
    progress = json.loads((tmp_path / "two" / "checkpoint" / "progress.json").read_text())
    assert progress["resumes"] == [{"steps": 512, "exact": True}]
    uninterrupted = json.loads((tmp_path / "one" / "checkpoint" / "progress.json").read_text())
    assert progress["pool_returns"] == uninterrupted["pool_returns"]
    # the stop between two points added none (a point is a candidate of the selection rules)
    assert progress["history"] == uninterrupted["history"] and [h["iteration"] for h in progress["history"]] == [7, 14]
