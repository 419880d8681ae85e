"""White-box attacks: budgets respected (property tests), targets reached, stronger than noise."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import TorchVictim, load_victim

torch.manual_seed(0)
PIXELS = gym.spaces.Box(0, 255, (6, 6, 2), np.uint8)
VECTOR = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class GaussianHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.log_std = nn.Parameter(torch.full((2,), -0.5))

    def forward(self, x):
        return self.body(x), self.log_std


def _victims():
    torch.manual_seed(1)
    pixel_q = TorchVictim(nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)), "q", PIXELS, DISCRETE)
    vec_cat = TorchVictim(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)), "categorical", VECTOR, DISCRETE)
    vec_gauss = TorchVictim(GaussianHead(), "gaussian", VECTOR, BOX)
    vec_det = TorchVictim(nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2), nn.Tanh()), "deterministic", VECTOR, BOX)
    return {"pixel_q": pixel_q, "vec_cat": vec_cat, "vec_gauss": vec_gauss, "vec_det": vec_det}


VICTIMS = _victims()
ATTACKS = {
    "random": ("pixel_q", "vec_cat", "vec_gauss", "vec_det"),
    "fgsm": ("pixel_q", "vec_cat"),
    "pgd": ("pixel_q", "vec_cat"),
    "pgd:objective=minq": ("pixel_q",),
    "momentum": ("pixel_q", "vec_cat"),
    "maxdiff": ("pixel_q", "vec_cat", "vec_gauss", "vec_det"),
    "targeted:action=2": ("pixel_q", "vec_cat"),
    "targeted:loss=ce,action=1": ("pixel_q", "vec_cat"),
    "targeted:loss=margin,action=0": ("pixel_q", "vec_cat"),
    "push:direction=1|-1": ("vec_gauss", "vec_det"),
    "push:direction=0|1,steps=5": ("vec_gauss", "vec_det"),
}
CASES = [(a, v) for a, vs in ATTACKS.items() for v in vs]


def _input(victim, seed, batch=3):
    rng = np.random.default_rng(seed)
    if victim.budget_space == "pixel01":
        obs = rng.integers(0, 256, size=(batch, *PIXELS.shape), dtype=np.uint8)
        obs[0] = 0  # a corner of the valid range
        obs[1] = 255
    else:
        obs = rng.normal(size=(batch, 4)).astype(np.float32)
    return victim.preprocess(obs)


def _spec(attack, eps, norm):
    head, _, rest = attack.partition(":")
    parts = [f"eps={eps!r}"] + ([rest] if rest else [])
    if head != "random":
        parts.append(f"norm={norm}")
    return f"{head}:{','.join(parts)}"


@pytest.mark.parametrize("attack, victim_name", CASES)
@pytest.mark.parametrize("norm", ["linf", "l2"])
@settings(max_examples=15, deadline=None)
@given(eps=st.floats(0.0, 0.5), seed=st.integers(0, 10_000))
def test_attack_output_in_eps_ball_and_valid_range(attack, victim_name, norm, eps, seed):
    if attack == "random" and norm == "l2":
        return
    victim = VICTIMS[victim_name]
    threat = parse_threat(_spec(attack, eps, norm))
    threat.check_victim(victim)
    x = _input(victim, seed)
    x_adv = threat.perturb(x, victim, BatchRNG([episode_generator(seed, k, "threat") for k in range(3)]))
    delta = (x_adv - x).reshape(3, -1)
    size = delta.abs().amax(dim=1) if norm == "linf" else delta.norm(dim=1)
    assert float(size.max()) <= eps * (1 + 1e-6) + 2.5e-7  # one float32 ulp at 1.0
    if victim.budget_space == "pixel01":
        assert float(x_adv.min()) >= 0.0 and float(x_adv.max()) <= 1.0
    assert torch.isfinite(x_adv).all()


def test_attacks_move_the_input():
    """A white-box attack that silently does nothing is a bug: at a real budget it moves x."""
    victim = VICTIMS["vec_cat"]
    x = _input(victim, 0)
    rng = BatchRNG([episode_generator(0, k, "threat") for k in range(3)])
    for spec in ("fgsm:eps=0.1", "pgd:eps=0.1", "momentum:eps=0.1", "maxdiff:eps=0.1", "targeted:eps=0.1,action=0"):
        delta = parse_threat(spec).perturb(x, victim, rng) - x
        assert float(delta.abs().max()) > 0.05, spec


def test_objectives_that_do_not_fit_the_victim_fail_clearly():
    with pytest.raises(UserError, match="minbest does not apply to a gaussian policy"):
        parse_threat("pgd:eps=0.1").check_victim(VICTIMS["vec_gauss"])
    with pytest.raises(UserError, match="minq does not apply to a categorical policy"):
        parse_threat("pgd:eps=0.1,objective=minq").check_victim(VICTIMS["vec_cat"])
    with pytest.raises(UserError, match="action=5 but the agent has 3 actions"):
        parse_threat("targeted:eps=0.1,action=5").check_victim(VICTIMS["vec_cat"])
    with pytest.raises(UserError, match="give the target with action=INDEX"):
        parse_threat("targeted:eps=0.1").check_victim(VICTIMS["vec_cat"])
    with pytest.raises(UserError, match="cw changes a discrete action"):
        parse_threat("cw").check_victim(VICTIMS["vec_det"])


def test_targeted_reaches_every_target_that_brute_force_finds_reachable():
    torch.manual_seed(3)
    space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    victim = TorchVictim(nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 4)), "q", space, gym.spaces.Discrete(4))
    eps = 0.3
    grid = torch.linspace(-eps, eps, 121, dtype=victim.dtype)
    offsets = torch.cartesian_prod(grid, grid)  # (121², 2) over the ℓ∞ ball
    points = torch.randn(100, 2, generator=torch.Generator().manual_seed(0), dtype=victim.dtype)
    checked = 0
    for i, x in enumerate(points):
        with torch.no_grad():
            reach = victim.forward(x + offsets).q.argmax(dim=1)
            clean = int(victim.forward(x[None]).q.argmax())
        for target in range(4):
            share = float((reach == target).double().mean())
            if target == clean or share < 0.01:
                continue
            threat = parse_threat(f"targeted:eps={eps},action={target},steps=50,restarts=5")
            x_adv = threat.perturb(x[None], victim, BatchRNG([episode_generator(i, target, "threat")]))
            assert float((x_adv - x).abs().max()) <= eps + 1e-9
            assert int(victim.forward(x_adv).q.argmax()) == target, (i, target, share)
            checked += 1
    assert checked >= 20


def test_targeted_continuous_moves_action_toward_target():
    victim = VICTIMS["vec_det"]
    x = _input(victim, 5, batch=8)
    target = torch.full((8, 2), 0.9, dtype=victim.dtype)
    threat = parse_threat("targeted:eps=0.5,steps=30")
    x_adv = threat.perturb_toward(x, victim, target, BatchRNG([episode_generator(0, k, "threat") for k in range(8)]))
    before = (victim.forward(x).action - target).norm(dim=1)
    after = (victim.forward(x_adv).action - target).norm(dim=1)
    assert bool((after < before).all())


def test_cw_finds_small_action_changing_perturbation():
    victim = VICTIMS["pixel_q"]
    x = _input(victim, 2)
    rng = BatchRNG([episode_generator(0, k, "threat") for k in range(3)])
    x_adv = parse_threat("cw:steps=50,search_steps=4,lr=0.05").perturb(x, victim, rng)
    changed = victim.forward(x_adv).q.argmax(1) != victim.forward(x).q.argmax(1)
    assert bool(changed.all())
    assert float(x_adv.min()) >= 0 and float(x_adv.max()) <= 1
    # the minimal distortion is no larger than what a large FGSM step needs
    assert float((x_adv - x).reshape(3, -1).norm(dim=1).max()) < 2.0


def _mean_return(agent, spec, episodes=10):
    victim = load_victim(agent)
    threat = parse_threat(spec) if spec else None
    recs = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, threat, range(episodes), seed=0, n_envs=episodes)
    changed = sum(r.action_changes for r in recs) / max(1, sum(r.perturbed_steps for r in recs))
    return float(np.mean([r.episode_return for r in recs])), changed


@pytest.mark.parametrize(
    "agent, eps, attack",
    [
        ("zoo:cartpole-ppo", 0.13, "pgd"),
        ("zoo:cartpole-ppo", 0.12, "pgd:objective=maxdiff"),
        ("zoo:cartpole-dqn", 0.1, "pgd:objective=maxdiff"),
    ],
)
def test_attack_collapses_cartpole_where_uniform_noise_does_not(agent, eps, attack):
    clean, _ = _mean_return(agent, None)
    noise, _ = _mean_return(agent, f"uniform_noise:eps={eps}")
    attacked, change_rate = _mean_return(agent, f"{attack},eps={eps}" if ":" in attack else f"{attack}:eps={eps}")
    assert noise >= 0.8 * clean
    assert attacked <= 0.3 * clean
    assert change_rate >= 0.3


def test_minbest_and_minq_beat_uniform_noise_on_dqn():
    clean, _ = _mean_return("zoo:cartpole-dqn", None)
    noise, _ = _mean_return("zoo:cartpole-dqn", "uniform_noise:eps=0.12")
    minbest, _ = _mean_return("zoo:cartpole-dqn", "pgd:eps=0.12")
    minq, _ = _mean_return("zoo:cartpole-dqn", "pgd:eps=0.12,objective=minq")
    assert minbest < 0.5 * noise and minq < 0.5 * noise
