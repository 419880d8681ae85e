"""Noise threats: budgets respected (property tests), valid range kept."""

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import TorchVictim

PIXEL_SPACE = gym.spaces.Box(0, 255, (8, 8, 2), np.uint8)
VECTOR_SPACE = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACTIONS = gym.spaces.Discrete(3)


def _pixel_victim():
    net = nn.Sequential(nn.Flatten(), nn.Linear(128, 3))
    return TorchVictim(net, "q", PIXEL_SPACE, ACTIONS)


def _rng(n, seed):
    return BatchRNG([episode_generator(seed, k, "threat") for k in range(n)])


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.0, 1.0), seed=st.integers(0, 2**31), batch=st.integers(1, 6))
def test_uniform_noise_stays_in_eps_ball_and_pixel_range(eps, seed, batch):
    victim = _pixel_victim()
    obs = np.random.default_rng(seed).integers(0, 256, size=(batch, 8, 8, 2), dtype=np.uint8)
    x = victim.preprocess(obs)
    threat = parse_threat(f"uniform_noise:eps={eps!r}")
    x_adv = threat.perturb(x, victim, _rng(batch, seed))
    assert x_adv.shape == x.shape
    assert float((x_adv - x).abs().max()) <= eps + 1e-6
    assert float(x_adv.min()) >= 0.0 and float(x_adv.max()) <= 1.0


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(1e-4, 10.0), seed=st.integers(0, 2**31))
def test_uniform_noise_on_vectors_within_eps_and_not_trivial(eps, seed):
    victim = TorchVictim(nn.Linear(5, 3), "q", VECTOR_SPACE, ACTIONS)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(seed % 1000)) * 100
    x_adv = parse_threat(f"uniform_noise:eps={eps!r}").perturb(x, victim, _rng(4, seed))
    delta = (x_adv - x).abs()
    ulp = torch.finfo(x.dtype).eps * float(x.abs().max())  # x + δ rounds to x's float32 grid
    assert float(delta.max()) <= eps * (1 + 1e-5) + ulp
    assert float(delta.max()) > 0.1 * eps  # 20 uniform draws: some coordinate is far from 0


def test_gaussian_noise_has_requested_std_and_keeps_pixels_valid():
    victim = TorchVictim(nn.Linear(5, 3), "q", VECTOR_SPACE, ACTIONS)
    x = torch.zeros(64, 5)
    x_adv = parse_threat("gaussian_noise:std=0.2").perturb(x, victim, _rng(64, 0))
    assert abs(float(x_adv.std()) - 0.2) < 0.02
    pv = _pixel_victim()
    xp = torch.full((4, 2, 8, 8), 0.99)
    out = parse_threat("gaussian_noise:std=0.5").perturb(xp, pv, _rng(4, 0))
    assert float(out.max()) <= 1.0 and float(out.min()) >= 0.0


def test_rows_draw_from_their_own_episode_stream():
    victim = TorchVictim(nn.Linear(5, 3), "q", VECTOR_SPACE, ACTIONS)
    threat = parse_threat("gaussian_noise:std=1")
    x = torch.zeros(3, 5)
    batch = threat.perturb(x, victim, BatchRNG([episode_generator(0, k, "threat") for k in (0, 1, 2)]))
    alone = threat.perturb(x[1:2], victim, BatchRNG([episode_generator(0, 1, "threat")]))
    torch.testing.assert_close(batch[1:2], alone)
