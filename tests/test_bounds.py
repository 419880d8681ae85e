"""IBP: sound on random networks of every supported shape and on every zoo agent (sampled
points and corners of the ε-ball stay inside the bounds), exact at ε = 0, tight on a known case."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.bounds import ibp
from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.victims import load_victim
from rlgauntlet.victims.base import Affine

N_POINTS = 10_000


def _points(x, eps, n, input_bounds=None, generator=None):
    """n points of the ε-ball around x (1, ...): half uniform inside, half corners x ± ε."""
    shape = (n, *x.shape[1:])
    inside = (torch.rand(shape, generator=generator, dtype=x.dtype) * 2 - 1) * eps
    corners = torch.where(torch.rand(shape, generator=generator) < 0.5, -eps, eps).to(x.dtype)
    pts = x + torch.cat([inside[: n // 2], corners[n // 2:]])
    return pts if input_bounds is None else pts.clamp(*input_bounds)


def _assert_inside(values, lower, upper, tol):
    assert bool((values >= lower - tol).all()) and bool((values <= upper + tol).all()), \
        float(torch.maximum(lower - values, values - upper).max())


NETS = {
    "mlp_relu": lambda: nn.Sequential(nn.Linear(5, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3)),
    "mlp_tanh_affine": lambda: nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 2), nn.Tanh(),
                                             Affine(torch.tensor([2.0, -0.5]), torch.tensor([0.1, 0.3]))),
    "cnn": lambda: nn.Sequential(nn.Conv2d(2, 4, 3, stride=2), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                                 nn.Flatten(), nn.Identity(), nn.Linear(4 * 4 * 4, 3)),
}


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_random_networks_are_bounded_soundly(name, dtype):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(1)
    net = NETS[name]().to(dtype)
    x = torch.randn((1, 2, 9, 9) if name == "cnn" else (1, 5), generator=g, dtype=dtype)
    for eps in (0.01, 0.3):
        lower, upper = ibp(net, x, eps)
        with torch.no_grad():
            _assert_inside(net(_points(x, eps, N_POINTS, generator=g)), lower, upper,
                           tol=1e-12 if dtype == torch.float64 else 1e-5)  # rounding only
        assert bool((upper - lower > 0).all())
    with torch.no_grad():
        lower, upper = ibp(net, x, 0.0)
        # at ε = 0 both bounds are the network's output, up to the rounding of a different
        # summation order (the bounds go through |W|·r with r = 0): a few ulps of the dtype
        tol = 64 * torch.finfo(dtype).eps
        torch.testing.assert_close(lower, net(x), rtol=tol, atol=tol)
        torch.testing.assert_close(upper, net(x), rtol=tol, atol=tol)


def test_known_answer_on_a_linear_layer():
    """For y = Wx + b the interval is exact: y(x) ± |W|·ε."""
    layer = nn.Linear(2, 2).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, -2.0], [0.5, 0.0]]))
        layer.bias.copy_(torch.tensor([0.0, 1.0]))
    lower, upper = ibp([layer], torch.tensor([[1.0, 1.0]], dtype=torch.float64), 0.1)
    assert torch.allclose(lower, torch.tensor([[-1.3, 1.45]], dtype=torch.float64))
    assert torch.allclose(upper, torch.tensor([[-0.7, 1.55]], dtype=torch.float64))
    relu_lower, relu_upper = ibp([layer, nn.ReLU()], torch.tensor([[1.0, 1.0]], dtype=torch.float64), 0.1)
    assert torch.equal(relu_lower[0, 0], torch.tensor(0.0, dtype=torch.float64)) and relu_upper[0, 1] == upper[0, 1]


def test_input_bounds_clip_the_box():
    net = nn.Sequential(nn.Identity())
    lower, upper = ibp(net, torch.tensor([[0.0, 0.5, 1.0]]), 0.2, input_bounds=(0.0, 1.0))
    assert lower.tolist() == [[0.0, pytest.approx(0.3), pytest.approx(0.8)]]
    assert upper.tolist() == [[pytest.approx(0.2), pytest.approx(0.7), 1.0]]


def test_a_layer_it_cannot_bound_is_named():
    with pytest.raises(UserError, match="cannot pass a BatchNorm1d layer"):
        ibp(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), torch.zeros(2, 2), 0.1)


ZOO = [("cartpole-dqn", "CartPole-v1", 0.1), ("cartpole-ppo", "CartPole-v1", 0.1), ("pendulum-td3", "Pendulum-v1", 0.1),
       ("hopper-ppo", "Hopper-v5", 0.075), ("pong-ppo", "PongNoFrameskip-v4", 1 / 255)]


def _primary(out):
    return next(t for t in (out.q, out.logits, out.mean, out.action) if t is not None)


@pytest.mark.parametrize("name, env_id, eps", ZOO)
def test_every_zoo_agent_is_bounded_soundly_and_exactly_at_zero(name, env_id, eps):
    victim = load_victim(f"zoo:{name}")
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    for _ in range(30):
        obs, *_ = env.step(env.action_space.sample())
    x = victim.preprocess(np.asarray(obs)[None])
    with torch.no_grad():
        lower, upper = ibp(victim, x, eps)
        zero_lower, zero_upper = ibp(victim, x, 0.0)
        nominal = _primary(victim.forward(x))
        tol = 64 * torch.finfo(nominal.dtype).eps * max(1.0, float(nominal.abs().max()))  # rounding only
        torch.testing.assert_close(zero_lower, nominal, rtol=tol, atol=tol)
        torch.testing.assert_close(zero_upper, nominal, rtol=tol, atol=tol)
        g = torch.Generator().manual_seed(0)
        image = victim.budget_space == "pixel01"
        tol = 1e-4 if image else 1e-9  # float32 CNN: a few ulps of outputs of order 10
        # the Pong CNN's 4×84×84 inputs: 2,000 points of the ball (12 s for 10,000 on two cores); a bound
        # that is not sound leaves out a share of them, not one in thousands
        for chunk in range(0, 2_000 if image else N_POINTS, 500):
            pts = _points(x, eps, 500, victim.input_bounds, generator=g)
            _assert_inside(_primary(victim.forward(pts)), lower, upper, tol)


def test_bounds_flow_gradients_through_a_trainable_sb3_policy():
    import stable_baselines3 as sb3

    from rlgauntlet.victims.sb3 import SB3Victim

    model = sb3.DQN("MlpPolicy", "CartPole-v1", seed=0, policy_kwargs=dict(net_arch=[16]))
    victim = SB3Victim.from_model(model)
    lower, upper = ibp(victim, torch.zeros(3, 4), 0.1)
    (upper - lower).sum().backward()
    assert all(p.grad is not None for p in model.q_net.parameters())


def _reference_ibp(layers, lower, upper):
    """IBP written out corner by corner, layer by layer (no shortcuts): the check on the fast paths."""
    for layer in layers:
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            centre, radius = (upper + lower) / 2, (upper - lower) / 2
            if isinstance(layer, nn.Linear):
                mid, rad = layer(centre), radius @ layer.weight.abs().T
            else:
                mid = layer(centre)
                rad = torch.nn.functional.conv2d(radius, layer.weight.abs(), None, layer.stride, layer.padding)
            lower, upper = mid - rad, mid + rad
        else:
            lower, upper = layer(lower), layer(upper)
    return lower, upper


SHORTCUT_NETS = {
    # a conv straight into Flatten (the radius varies per channel there), a padded conv (border
    # outputs see fewer inputs), two affine layers in a row
    "conv_flatten": lambda: nn.Sequential(nn.Conv2d(2, 3, 3, stride=2), nn.Flatten(), nn.Linear(3 * 4 * 4, 2)),
    "padded_conv": lambda: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 81, 2)),
    "linear_linear": lambda: nn.Sequential(nn.Linear(5, 4), nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)),
}


@pytest.mark.parametrize("name", list(SHORTCUT_NETS))
def test_ibp_equals_plain_corner_propagation(name):
    """Scalar ε, per-row ε and an input range that clips the ball (or not) give the bounds of a
    plain corner-by-corner propagation written here (a check for any shortcut in ``ibp``)."""
    torch.manual_seed(2)
    net = SHORTCUT_NETS[name]().double()
    shape = (3, 2, 9, 9) if "conv" in name else (3, 5)
    x = torch.rand(shape, dtype=torch.float64)
    per_row = torch.tensor([0.01, 0.05, 0.2], dtype=torch.float64).reshape(3, *([1] * (len(shape) - 1)))
    with torch.no_grad():
        for eps in (0.05, per_row):
            for bounds in (None, (0.0, 1.0), (-5.0, 5.0)):
                lower, upper = ibp(net, x, eps, input_bounds=bounds)
                lo, hi = x - eps, x + eps
                if bounds is not None:
                    lo, hi = lo.clamp(*bounds), hi.clamp(*bounds)
                ref_lower, ref_upper = _reference_ibp(list(net), lo, hi)
                assert torch.allclose(lower, ref_lower, atol=1e-12) and torch.allclose(upper, ref_upper, atol=1e-12)
