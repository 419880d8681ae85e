"""push: the PA-AD actor with a constant director. Known answers: on a linear policy one FGSM
step is the exact maximiser of ⟨μ(x̃), d̂⟩ over the ℓ∞ ball (x + ε·sign(Wᵀd), gain ε‖Wᵀd̂‖₁),
and on a nonlinear policy it gives exactly the PA-AD directional actor's x̃ for the same
direction."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.errors import UserError
from rlgauntlet.threats import parse_threat
from rlgauntlet.threats.attacks.push import push_directions, push_spec
from rlgauntlet.threats.learned.actor import AttackActor
from rlgauntlet.victims import TorchVictim

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


class LinearGaussian(nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.linear = nn.Linear(5, 3)
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            self.linear.bias.fill_(0.3)
        self.log_std = nn.Parameter(torch.zeros(3))

    def forward(self, x):
        return self.linear(x), self.log_std


def _rng(rows: int) -> BatchRNG:
    return BatchRNG([episode_generator(0, k, "threat") for k in range(rows)])


def test_one_step_is_the_exact_maximiser_on_a_linear_policy():
    torch.manual_seed(0)
    weight = torch.randn(3, 5)
    victim = TorchVictim(LinearGaussian(weight), "gaussian", OBS, ACT)
    direction = torch.tensor([1.0, -2.0, 0.5])
    unit = direction / direction.norm()
    threat = parse_threat("push:eps=0.1,direction=1|-2|0.5")
    threat.check_victim(victim)
    x = victim.preprocess(np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32))
    x_adv = threat.perturb(x, victim, _rng(4))
    weight, direction, unit = weight.to(x), direction.to(x), unit.to(x)  # the victim's own precision
    # the closed form: x + ε·sign(Wᵀd)
    assert torch.allclose(x_adv, x + 0.1 * torch.sign(weight.T @ direction), atol=1e-6)
    gain = ((victim.forward(x_adv).mean - victim.forward(x).mean) @ unit)
    assert torch.allclose(gain, torch.full_like(gain, 0.1 * float((weight.T @ unit).abs().sum())), atol=1e-5)
    # no point of the ball does better (the maximum of a linear function over a box is this corner)
    corners = x[:1] + 0.1 * torch.sign(torch.randn(2000, 5))
    others = (victim.forward(corners).mean - victim.forward(x[:1]).mean) @ unit
    assert float(others.max()) <= float(gain[0]) + 1e-5


def test_it_is_the_paad_directional_actor_with_a_constant_director():
    torch.manual_seed(2)
    net = nn.Sequential(nn.Linear(5, 32), nn.Tanh(), nn.Linear(32, 3))

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.net, self.log_std = net, nn.Parameter(torch.full((3,), -0.5))

        def forward(self, x):
            return self.net(x), self.log_std

    victim = TorchVictim(Head(), "gaussian", OBS, ACT)
    x = victim.preprocess(np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32))
    for direction in push_directions(3):
        push = parse_threat(push_spec(0.075, direction)).perturb(x, victim, _rng(6))
        director = torch.tensor([direction]).to(x).repeat(6, 1)
        paad = AttackActor("directional", 0.075).perturb(x, victim, director, _rng(6))
        assert torch.allclose(push, paad, atol=1e-6), direction
        assert float((push - x).abs().max()) <= 0.075 + 1e-6


def test_pgd_push_does_at_least_as_well_as_one_step():
    torch.manual_seed(4)
    victim = TorchVictim(nn.Sequential(nn.Linear(5, 32), nn.Tanh(), nn.Linear(32, 3), nn.Tanh()), "deterministic",
                         OBS, ACT)
    x = victim.preprocess(np.random.default_rng(5).normal(size=(8, 5)).astype(np.float32))
    unit = (torch.tensor([0.0, 1.0, -1.0]) / 2 ** 0.5).to(x)

    def gain(spec):
        x_adv = parse_threat(spec).perturb(x, victim, _rng(8))
        return (victim.forward(x_adv).action - victim.forward(x).action) @ unit

    one, many = gain("push:eps=0.2,direction=0|1|-1"), gain("push:eps=0.2,direction=0|1|-1,steps=20")
    assert bool((one > 0).all()) and bool((many >= one - 1e-6).all())


def test_the_sweep_directions_and_specs():
    dirs = push_directions(3)
    assert len(dirs) == 14 and len({tuple(d) for d in dirs}) == 14
    assert dirs[:2] == [[1, 0, 0], [-1, 0, 0]] and [1, 1, 1] in dirs and [-1, -1, -1] in dirs
    assert len(push_directions(4)) == 8 + 16
    walker = push_directions(6)  # beyond 4 dimensions: the axes and the two uniform corners only
    assert len(walker) == 14 and walker[-2:] == [[1] * 6, [-1] * 6]
    assert push_spec(0.075, [1, -1, 0]) == "push:eps=0.075,direction=1|-1|0"
    assert parse_threat(push_spec(0.075, [0, 0, 1], steps=10)).params.direction == [0.0, 0.0, 1.0]


def test_bad_directions_and_victims_are_refused_clearly():
    victim = TorchVictim(LinearGaussian(torch.ones(3, 5)), "gaussian", OBS, ACT)
    with pytest.raises(UserError, match="direction has 2 numbers but the agent's actions have 3 dimensions"):
        parse_threat("push:eps=0.1,direction=1|0").check_victim(victim)
    with pytest.raises(UserError, match="all zeros"):
        parse_threat("push:eps=0.1,direction=0|0|0").check_victim(victim)
    discrete = TorchVictim(nn.Linear(5, 3), "categorical", OBS, gym.spaces.Discrete(3))
    with pytest.raises(UserError, match="push does not apply to a categorical policy"):
        parse_threat("push:eps=0.1,direction=1").check_victim(discrete)
    with pytest.raises(UserError, match="direction"):
        parse_threat("push:eps=0.1")


def test_the_central_action_is_the_deterministic_action_or_the_gaussian_mean():
    """What push, the continuous targeted attack and PA-AD's actor move: the mean, never log σ."""
    from rlgauntlet.victims.base import PolicyOutput

    mean, log_std, action = torch.tensor([[0.1, -0.2]]), torch.tensor([[-3.0, 1.0]]), torch.tensor([[0.5, 0.7]])
    assert torch.equal(PolicyOutput("gaussian", mean=mean, log_std=log_std).central_action(), mean)
    assert torch.equal(PolicyOutput("deterministic", action=action).central_action(), action)
    with pytest.raises(ValueError, match="no continuous action"):
        PolicyOutput("q", q=torch.zeros(1, 3)).central_action()
