"""SA-PPO's regulariser against closed forms: the worst policy shift in an ℓ∞ ball of a linear
Gaussian policy, the soundness of its IBP bound, and the official SGLD loop's reach."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlgauntlet.training.defences.sa_ppo import SAPPO, ibp_shift_bound, policy_shift, sgld_perturbation


def _linear_gaussian():
    """A PPO whose actor is μ(x) = w·x + b (no hidden layer) on Pendulum, σ = 0.5."""
    from rlgauntlet.victims.sb3 import SB3Victim

    model = SAPPO("MlpPolicy", "Pendulum-v1", seed=0, device="cpu", n_steps=64, batch_size=32,
                  policy_kwargs=dict(net_arch=dict(pi=[], vf=[8]), log_std_init=float(np.log(0.5))))
    with torch.no_grad():  # SB3 starts the head at gain 0.01; weights of order 1 make the loop's steps gradient-led
        model.policy.action_net.weight.copy_(torch.tensor([[1.0, -2.0, 0.5]]))
    return model, SB3Victim.from_model(model)


def test_ibp_bound_is_the_closed_form_worst_shift_of_a_linear_gaussian_policy():
    model, victim = _linear_gaussian()
    w = model.policy.action_net.weight.detach()[0]
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    eps = 0.1
    expected = (eps * w.abs().sum() / 0.5) ** 2  # max over |δ|∞ ≤ ε of (w·δ / σ)²: a corner, ε‖w‖₁/σ
    bound = ibp_shift_bound(victim, x, eps)
    torch.testing.assert_close(bound, expected.expand(16), rtol=1e-5, atol=1e-7)
    assert float(ibp_shift_bound(victim, x, 0.0).abs().max()) < 1e-10


def test_sgld_reaches_most_of_the_worst_shift_and_never_beyond_the_bound():
    """From a random corner step, 10 signed steps of ε/10 end each coordinate at ±ε or at
    ±0.9ε (when it started on the wrong side): at least 0.81 of the maximum, never more."""
    model, victim = _linear_gaussian()
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(1))
    eps = 0.2
    g = torch.Generator().manual_seed(2)
    x_adv = sgld_perturbation(victim, x, eps, steps=10, generator=g)
    assert float((x_adv - x).abs().max()) <= eps + 1e-6
    reached = policy_shift(victim.forward(x), victim.forward(x_adv))
    bound = ibp_shift_bound(victim, x, eps)
    assert bool((reached <= bound * (1 + 1e-5)).all()) and bool((reached >= 0.81 * bound * (1 - 1e-5)).all())
    random_points = x + (torch.rand(200, *x.shape, generator=g) * 2 - 1) * eps
    sampled = torch.stack([policy_shift(victim.forward(x), victim.forward(p)) for p in random_points])
    assert float((reached >= sampled.max(dim=0).values * 0.999).float().mean()) > 0.9  # beats random search


def test_categorical_bound_is_sound_and_the_clean_policy_is_held_fixed():
    from rlgauntlet.victims.sb3 import SB3Victim

    model = SAPPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu", n_steps=64, batch_size=32,
                  policy_kwargs=dict(net_arch=[16]))
    victim = SB3Victim.from_model(model)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(3))
    eps = 0.3
    bound = ibp_shift_bound(victim, x, eps)
    g = torch.Generator().manual_seed(4)
    corners = x + torch.where(torch.rand(500, *x.shape, generator=g) < 0.5, -eps, eps)
    inside = x + (torch.rand(500, *x.shape, generator=g) * 2 - 1) * eps
    with torch.no_grad():
        clean = victim.forward(x)
        shifts = torch.stack([policy_shift(clean, victim.forward(p)) for p in torch.cat([corners, inside])])
    assert bool((shifts <= bound.detach() + 1e-6).all())  # sound on 1,000 points, half of them corners
    # KL(π(x) ‖ π(x̃)) written out, with π(x) fixed: only the perturbed side carries gradient
    out = victim.forward(inside[0])
    p, q = torch.softmax(clean.logits, -1), torch.softmax(out.logits, -1)
    torch.testing.assert_close(policy_shift(clean, out), (p * (p.log() - q.log())).sum(-1), rtol=1e-4, atol=1e-6)
    model.policy.zero_grad()
    model.regulariser(x, eps).backward()
    assert float(model.policy.action_net.weight.grad.abs().sum()) > 0


@pytest.mark.parametrize("method", ["sgld", "ibp"])
def test_sa_ppo_learns_with_its_term_and_ramps_eps(method):
    model = SAPPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu", n_steps=128, batch_size=64, n_epochs=2,
                  sa_eps=0.1, sa_kappa=0.3, sa_method=method, ramp_fraction=0.5)
    model._current_progress_remaining = 1.0
    assert model.current_eps() == 0.0
    model._current_progress_remaining = 0.75
    assert model.current_eps() == pytest.approx(0.05)
    model._current_progress_remaining = 0.1
    assert model.current_eps() == pytest.approx(0.1)
    terms = []
    regulariser = model.regulariser
    model.regulariser = lambda x, eps: terms.append((eps, regulariser(x, eps))) or terms[-1][1]
    model.learn(512)
    assert terms and all(eps > 0 for eps, _ in terms) and all(float(t) > 0 for _, t in terms)
    assert terms[-1][0] == pytest.approx(0.1)  # past the ramp by the last update


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_the_sgld_gradient_through_the_hand_walked_vjp_equals_autograd(env_id):
    """Known answer: autograd's gradient of R(x, ·) at a point of the ball, for a Gaussian and
    a categorical SB3 MLP policy (the live victim SA-PPO trains). SGLD takes the sign of the
    gradient plus tiny noise, so its magnitude matters too: compared, not just its sign."""
    from rlgauntlet.training.defences.sa_ppo import shift_gradient
    from rlgauntlet.victims.sb3 import SB3Victim

    model = SAPPO("MlpPolicy", env_id, seed=0, device="cpu", n_steps=64, batch_size=32)
    with torch.no_grad():  # SB3 starts the head at gain 0.01: a trained policy's gradients are larger
        model.policy.action_net.weight.mul_(100)
    victim = SB3Victim.from_model(model)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(32, *model.observation_space.shape, generator=g)
    x_adv = x + (torch.rand(x.shape, generator=g) * 2 - 1) * 0.3
    with torch.no_grad():
        clean = victim.forward(x)
    assert victim.output_and_vjp(x_adv, torch.ones_like) is not None
    fast = shift_gradient(victim, clean, x_adv)
    victim.output_and_vjp = lambda *_: None
    slow = shift_gradient(victim, clean, x_adv)
    assert float(slow.abs().max()) > 1e-2
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-6)
