"""The hand-walked input gradient of MLP policies (victims/mlp_vjp.py) and the PA-AD actor's
FGSM through it: known answers from autograd and from the closed forms of the actor tests."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.threats.learned.actor import AttackActor
from rlgauntlet.victims.base import Affine
from rlgauntlet.victims.mlp_vjp import output_and_vjp, plain_mlp
from rlgauntlet.victims.sb3 import SB3Victim


def _rng(n):
    return BatchRNG([episode_generator(0, k, "threat") for k in range(n)])


CHAINS = {
    "tanh": lambda: [nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)],
    "relu-sigmoid": lambda: [nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8), nn.Sigmoid(), nn.Linear(8, 3)],
    "flatten-affine-identity": lambda: [nn.Flatten(), nn.Linear(6, 16), nn.Identity(), nn.Tanh(), nn.Linear(16, 3),
                                        Affine(torch.tensor([2.0, -0.5, 1.5]), torch.tensor([0.1, 0.0, -0.3]))],
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_output_and_vjp_equal_autograd_on_every_handled_layer(name):
    """Known answer: torch's own forward and autograd VJP, for a random cotangent that
    depends on the output (as the actor's softmax VJP does). A wrong derivative of any layer
    (tanh's 1 − y², ReLU's mask on the output, sigmoid's y(1 − y), the affine scale, a
    missing transpose) changes the gradient by far more than the tolerance."""
    torch.manual_seed(0)
    chain = [layer.double() for layer in CHAINS[name]()]
    x = torch.randn(5, 2, 3, dtype=torch.float64) if name.startswith("flatten") else torch.randn(5, 6, dtype=torch.float64)
    weights = torch.randn(5, 3, dtype=torch.float64)
    cotangent_of = lambda out: weights * torch.tanh(out)  # noqa: E731
    out, grad = output_and_vjp(chain, x, cotangent_of)
    z = x.clone().requires_grad_(True)
    reference_out = nn.Sequential(*chain)(z)
    (reference,) = torch.autograd.grad(reference_out, z, cotangent_of(reference_out.detach()))
    assert grad.shape == x.shape
    assert torch.allclose(out, reference_out.detach(), atol=1e-12)
    assert torch.allclose(grad, reference, atol=1e-10)
    assert grad.abs().max() > 1e-3  # not a vacuous zero gradient


def test_plain_mlp_accepts_only_the_handled_layers_and_not_their_subclasses():
    class ScaledLinear(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    assert plain_mlp([nn.Linear(2, 2), nn.Tanh()])
    assert not plain_mlp([])
    assert not plain_mlp([nn.Linear(2, 2), nn.Dropout(0.1)])
    assert not plain_mlp([nn.Conv2d(1, 1, 3)])
    assert not plain_mlp([ScaledLinear(2, 2)])


def _sb3_victim(algo, env_id):
    from stable_baselines3 import DQN, PPO, SAC

    cls = {"ppo": PPO, "dqn": DQN, "sac": SAC}[algo]
    torch.manual_seed(1)
    model = cls("MlpPolicy", gym.make(env_id), seed=1, device="cpu")
    return SB3Victim.from_model(model)


@pytest.mark.parametrize("algo, env_id, variant", [("ppo", "Hopper-v5", "directional"), ("sac", "Pendulum-v1", "directional"),
                                                   ("ppo", "CartPole-v1", "stochastic"), ("dqn", "Acrobot-v1", "stochastic")])
def test_the_actor_fgsm_through_the_hand_walked_vjp_equals_the_autograd_objective(algo, env_id, variant):
    """Known answer: the actor's autograd path (the full objective ‖v(x̃)−v(x)‖ + λ·cos(·, d)
    differentiated at x̃ = x), taken by hiding the victim's VJP. The two land on the same
    corner of the ball wherever the gradient is not within rounding of 0; a VJP of the
    softmax with a wrong sign, or a stochastic direction without its zero-sum coordinate,
    would move other coordinates."""
    victim = _sb3_victim(algo, env_id)
    assert victim.output_and_vjp(torch.zeros(1, *victim.observation_space.shape), torch.ones_like) is not None
    actor = AttackActor(variant, 0.05)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(16, *victim.observation_space.shape, generator=generator)
    width = victim.action_space.n - 1 if variant == "stochastic" else victim.action_space.shape[0]
    director = torch.rand(16, width, generator=generator) * 2 - 1
    fast = actor.perturb(x, victim, director, _rng(16))
    victim.output_and_vjp = lambda *_: None  # the autograd path
    slow = actor.perturb(x, victim, director, _rng(16))
    assert torch.all((fast - x).abs() <= 0.05 + 1e-7)
    moved = (slow - x).abs() > 0.025  # where autograd's gradient had a sign
    assert moved.float().mean() > 0.95
    assert torch.allclose(fast[moved], slow[moved], atol=1e-6)


def test_the_actor_fgsm_keeps_the_closed_form_on_an_sb3_linear_policy():
    """Known answer (as the TorchVictim test of the autograd path): for a categorical policy
    with logits Wx, FGSM gives x + ε·sign(Wᵀ(diag p − p pᵀ) d), d = [free, −Σfree]."""
    victim = _sb3_victim("ppo", "CartPole-v1")
    weight = torch.tensor([[1.0, -2.0, 0.5, 3.0], [-1.0, 1.0, 2.0, 2.5]])
    policy = victim.policy
    with torch.no_grad():  # a linear policy: the hidden layers' output is the input (identity, no tanh)
        policy.mlp_extractor.policy_net = nn.Sequential(nn.Identity())
        policy.action_net = nn.Linear(4, 2, bias=False)
        policy.action_net.weight.copy_(weight)
    x = torch.tensor([[0.1, 0.2, -0.3, 0.4]])
    free = torch.tensor([[0.7]])
    d = torch.tensor([0.7, -0.7])
    p = torch.softmax(weight @ x[0], dim=0)
    expected = x[0] + 0.05 * torch.sign(weight.T @ ((torch.diag(p) - torch.outer(p, p)) @ d))
    out = AttackActor("stochastic", 0.05).perturb(x, victim, free, _rng(1))
    assert torch.allclose(out[0], expected, atol=1e-7)


def test_victims_that_do_not_offer_the_vjp_keep_autograd():
    """Pixel policies, TD3's unscaled action, and victims acting through another one (whose
    forward may differ from the chain) return None."""
    from rlgauntlet.victims.base import DelegatingVictim

    victim = _sb3_victim("ppo", "CartPole-v1")
    assert DelegatingVictim(victim).output_and_vjp(torch.zeros(1, 4), torch.ones_like) is None
    from stable_baselines3 import TD3

    td3 = SB3Victim.from_model(TD3("MlpPolicy", gym.make("Pendulum-v1"), device="cpu"))
    assert td3.output_and_vjp(torch.zeros(1, 3), torch.ones_like) is None


@pytest.mark.parametrize("kind", ["q", "categorical", "deterministic"])
def test_a_torch_sequential_victim_offers_the_vjp_and_the_actor_lands_where_autograd_does(kind):
    """A user's nn.Sequential MLP (its output is the primary one) gets the hand-walked path; the
    PA-AD actor's FGSM through it equals the autograd objective's. Gaussian modules return
    (mean, log_std) and keep autograd."""
    from rlgauntlet.victims import TorchVictim

    torch.manual_seed(4)
    discrete = kind != "deterministic"
    action_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-2.0, 2.0, (3,), np.float32)
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 3))
    with torch.no_grad():
        net[-1].weight.mul_(10)
    victim = TorchVictim(net, kind, gym.spaces.Box(-5.0, 5.0, (4,), np.float32), action_space)
    actor = AttackActor("stochastic" if discrete else "directional", 0.05)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(16, 4, generator=g).to(victim.dtype)
    director = torch.rand(16, 2 if discrete else 3, generator=g) * 2 - 1
    assert victim.output_and_vjp(x, torch.ones_like) is not None
    fast = actor.perturb(x, victim, director, _rng(16))
    victim.output_and_vjp = lambda *_: None
    slow = actor.perturb(x, victim, director, _rng(16))
    moved = (slow - x).abs() > 0.025
    assert moved.float().mean() > 0.95
    torch.testing.assert_close(fast[moved], slow[moved], rtol=0, atol=1e-6)

    class MeanAndLogStd(nn.Module):
        def forward(self, z):
            return z[:, :3], torch.zeros(3)

    gaussian = TorchVictim(nn.Sequential(MeanAndLogStd()), "gaussian", gym.spaces.Box(-5.0, 5.0, (4,), np.float32),
                           gym.spaces.Box(-2.0, 2.0, (3,), np.float32))
    assert gaussian.output_and_vjp(x, torch.ones_like) is None
