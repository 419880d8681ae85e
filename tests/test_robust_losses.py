"""The robust training losses against hand computations on a fixed tiny network and batch:
RADIAL-DQN (paper Eq. 5), RADIAL-PPO (its PPO form), SA-DQN's hinge, and the margin bounds
SA-DQN uses. The hand computations use plain interval arithmetic in NumPy (corners, not the
centre/radius form the library uses), so a shared mistake is unlikely."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.bounds import ibp, ibp_margins
from rlgauntlet.training.live import PPOTerms
from rlgauntlet.training.defences.radial import radial_dqn_loss, radial_ppo_policy_loss
from rlgauntlet.training.defences.sa_dqn import sa_dqn_regularizer

W1 = np.array([[1.0, -2.0], [0.5, 1.0], [-1.0, 0.25]])
B1 = np.array([0.1, -0.2, 0.3])
W2 = np.array([[1.0, -1.0, 2.0], [-0.5, 1.5, 0.5], [0.25, 0.25, -1.0]])
B2 = np.array([0.0, 0.1, -0.1])
X = np.array([[0.3, -0.4], [1.0, 0.5]])


def _net() -> nn.Sequential:
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 3)).double()
    with torch.no_grad():
        for layer, w, b in ((net[0], W1, B1), (net[2], W2, B2)):
            layer.weight.copy_(torch.tensor(w))
            layer.bias.copy_(torch.tensor(b))
    return net.requires_grad_(False)


def _interval_linear(w, b, lower, upper):
    """[lower, upper] through x ↦ Wx + b by corners: each weight picks the bound that
    minimises (maximises) its term."""
    low = b + np.where(w > 0, w * lower[None], w * upper[None]).sum(axis=1)
    high = b + np.where(w > 0, w * upper[None], w * lower[None]).sum(axis=1)
    return low, high


def _hand_bounds(x, eps):
    l1, u1 = _interval_linear(W1, B1, x - eps, x + eps)
    return _interval_linear(W2, B2, np.maximum(l1, 0), np.maximum(u1, 0))


def _hand_q(x):
    return W2 @ np.maximum(W1 @ x + B1, 0) + B2


def _huber(d):
    d = np.abs(d)
    return np.where(d < 1, 0.5 * d ** 2, d - 0.5)


def test_interval_bounds_equal_the_hand_computation():
    lower, upper = ibp(_net(), torch.tensor(X), 0.2)
    for row, x in enumerate(X):
        low, high = _hand_bounds(x, 0.2)
        np.testing.assert_allclose(lower[row].numpy(), low, rtol=1e-12)
        np.testing.assert_allclose(upper[row].numpy(), high, rtol=1e-12)


def test_radial_dqn_loss_equals_the_hand_computation():
    """Eq. 5: the worst-case term sums the Huber of each action's worse bound distance over the
    actions and averages over the batch; an implementation that averaged over actions, or
    took only the taken action, gives another number."""
    eps, kappa = 0.3, 0.6
    actions, target = np.array([2, 0]), np.array([1.5, -0.25])
    q_all = _net()(torch.tensor(X))
    lower, upper = ibp(_net(), torch.tensor(X), eps)
    loss, worst = radial_dqn_loss(q_all, lower, upper, torch.tensor(actions), torch.tensor(target), kappa)

    standard, worst_rows = [], []
    for x, a, y in zip(X, actions, target):
        q = _hand_q(x)
        low, high = _hand_bounds(x, eps)
        standard.append(_huber(q[a] - y))
        y_all = q.copy()
        y_all[a] = y
        worst_rows.append(_huber(np.maximum(np.abs(high - y_all), np.abs(low - y_all))).sum())
    expected_worst = np.mean(worst_rows)
    assert worst.item() == pytest.approx(expected_worst, rel=1e-12)
    assert loss.item() == pytest.approx(kappa * np.mean(standard) + (1 - kappa) * expected_worst, rel=1e-12)


def test_radial_ppo_policy_loss_equals_the_hand_computation():
    """The worst-case log-probability is the taken action's lower logit bound against the
    others' upper bounds where A ≥ 0, and the reverse where A < 0, in the clipped surrogate."""
    lower = np.array([[0.0, -1.0, 0.5], [-0.5, 0.2, 0.1]])
    upper = lower + np.array([[0.4, 0.3, 0.2], [0.6, 0.1, 0.5]])
    actions, advantages = np.array([1, 2]), np.array([1.2, -0.7])
    log_prob, old_log_prob, clip, kappa = np.array([-1.0, -0.9]), np.array([-1.1, -1.2]), 0.2, 0.5

    def surrogate(logp):
        ratio = np.exp(logp - old_log_prob)
        return -np.minimum(advantages * ratio, advantages * np.clip(ratio, 1 - clip, 1 + clip)).mean()

    worst = []
    for row, a in enumerate(actions):
        taken_low = advantages[row] >= 0
        logits = np.where(np.arange(3) == a, lower[row] if taken_low else upper[row],
                          upper[row] if taken_low else lower[row])
        worst.append(logits[a] - np.log(np.exp(logits).sum()))
    t = torch.tensor

    def torch_surrogate(logp):
        ratio = torch.exp(logp - t(old_log_prob))
        adv = t(advantages)
        return -torch.min(adv * ratio, adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()

    terms = PPOTerms(t(actions), t(advantages), t(log_prob), torch_surrogate, t(0.0), t(0.0))
    loss, worst_loss = radial_ppo_policy_loss(terms, t(lower), t(upper), kappa)
    assert worst_loss.item() == pytest.approx(surrogate(np.array(worst)), rel=1e-12)
    assert loss.item() == pytest.approx(kappa * surrogate(log_prob) + (1 - kappa) * surrogate(np.array(worst)),
                                        rel=1e-12)


def test_margin_bounds_are_exact_on_a_linear_network_and_sound_and_tighter_on_a_deep_one():
    """On one linear layer the margin bound is the exact minimum (w_y − w_a)·x + Δb − ε‖w_y − w_a‖₁;
    through a ReLU it holds at random points of the ball and is at least lower[y] − upper[a]."""
    linear = nn.Linear(2, 3).double()
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(W1))
        linear.bias.copy_(torch.tensor(B1))
    linear.requires_grad_(False)
    labels = torch.tensor([0, 2])
    margins = ibp_margins(linear, torch.tensor(X), 0.1, labels)
    for row, (x, y) in enumerate(zip(X, labels.tolist())):
        diff_w, diff_b = W1[y] - W1, B1[y] - B1
        np.testing.assert_allclose(margins[row].numpy(), diff_w @ x + diff_b - 0.1 * np.abs(diff_w).sum(axis=1),
                                   rtol=1e-12, atol=1e-15)

    net, eps = _net(), 0.25
    margins = ibp_margins(net, torch.tensor(X), eps, labels)
    lower, upper = ibp(net, torch.tensor(X), eps)
    loose = lower.gather(1, labels[:, None]) - upper
    assert (margins >= loose - 1e-12).all() and (margins > loose + 1e-6).any()
    points = torch.tensor(X)[:, None] + eps * (2 * torch.rand(2, 4000, 2, dtype=torch.float64) - 1)
    out = net(points)  # (2, 4000, 3)
    sampled = out.gather(2, labels[:, None, None].expand(-1, 4000, 1)) - out
    assert (sampled.min(dim=1).values >= margins - 1e-12).all()


def test_sa_dqn_regularizer_is_zero_at_eps_zero_and_the_hinge_of_the_margin_bound_otherwise():
    net = _net()
    x = torch.tensor(X)
    # bit-exact on purpose: at ε = 0 the term is defined as 0 (returned, not computed), as in the official code
    assert torch.equal(sa_dqn_regularizer(net, x, 0.0), torch.zeros(2))
    eps, hinge = 0.3, 1.0
    reg = sa_dqn_regularizer(net, x, eps, hinge)
    labels = net(x).argmax(dim=1)
    margins = ibp_margins(net, x, eps, labels).numpy()
    for row, y in enumerate(labels.tolist()):
        others = np.delete(margins[row], y)
        assert reg[row].item() == pytest.approx(-min(others.min(), hinge), rel=1e-12)
    # sound: at least the hinge of the worst margin found at random points of the ball
    points = x[:, None] + eps * (2 * torch.rand(2, 4000, 2, dtype=torch.float64) - 1)
    out = net(points)
    q_label = out.gather(2, labels[:, None, None].expand(-1, 4000, 1))
    is_label = torch.nn.functional.one_hot(labels, 3).bool()[:, None].expand(-1, 4000, -1)
    worst_gap = (out - q_label).masked_fill(is_label, -np.inf).amax(dim=(1, 2))
    assert (reg >= worst_gap.clamp(min=-hinge) - 1e-12).all()
    # positive where the bound lets another action win, −c where a gap of c is certified
    assert (reg > 0).any()
    assert sa_dqn_regularizer(net, x, 1e-4, hinge=1e-3)[0].item() == pytest.approx(-1e-3)


def test_sa_dqn_trains_and_its_term_is_reported(tmp_path):
    from rlgauntlet.training.defences.sa_dqn import SADQN

    model = SADQN("MlpPolicy", "CartPole-v1", seed=0, sa_eps=0.05, sa_kappa=0.1, ramp_fraction=0.5,
                  learning_starts=64, train_freq=64, batch_size=16, buffer_size=1000)
    model.learn(256)
    assert model.current_eps() == pytest.approx(0.05)
    assert np.isfinite(model.logger.name_to_value["sa/regularizer"])
    with pytest.raises(ValueError, match="sa_hinge"):
        SADQN("MlpPolicy", "CartPole-v1", sa_hinge=0.0)
