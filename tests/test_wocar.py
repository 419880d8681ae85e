"""WocaR-PPO: the worst-case action in the attacker's box, the worst-case Bellman target, its fixed
point on a two-state MDP solved by hand, the rollout's transitions in order, and the wiring of a
training step (the worst-case Q fitted first, then carried into the advantage)."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
import torch.nn as nn

from rlgauntlet.training.defences.wocar import (WocaRPPO, WorstCaseQ, fit_worst_q, worst_actions,
                                                worst_case_targets)


class LinearQ(nn.Module):
    """Q(x, a) = c·a + d·x: the worst action in a box is its corner against c's signs."""

    def __init__(self, c: list[float], d: float) -> None:
        super().__init__()
        self.c, self.d = th.tensor(c), d

    def forward(self, x: th.Tensor, a: th.Tensor) -> th.Tensor:
        return (a * self.c).sum(-1, keepdim=True) + self.d * x.sum(-1, keepdim=True)


def test_the_worst_action_is_the_box_corner_against_the_gradient():
    q = LinearQ([2.0, -1.0], 0.5)
    lower, upper = th.tensor([[-0.3, -0.2]]), th.tensor([[0.1, 0.4]])
    a = worst_actions(q, th.zeros(1, 3), lower, upper, start=th.tensor([[0.0, 0.1]]), steps=50)
    assert th.allclose(a, th.tensor([[-0.3, 0.4]]))  # c > 0: the lowest; c < 0: the highest


def test_the_worst_case_target_known_answer():
    """y = r + γ (1 − done) Q̄(x', ā): with Q̄ = 2a₁ − a₂ + 0.5·Σx and the box above, by hand."""
    q = LinearQ([2.0, -1.0], 0.5)
    lower, upper = th.tensor([[-0.3, -0.2]] * 2), th.tensor([[0.1, 0.4]] * 2)
    next_x = th.tensor([[1.0, 0.0, 1.0], [3.0, 0.0, 0.0]])
    y = worst_case_targets(q, th.tensor([1.0, 2.0]), next_x, th.tensor([1.0, 0.0]),
                           lambda x: (lower, upper, th.zeros(2, 2)), gamma=0.9, steps=50)
    worst_q = 2 * -0.3 - 0.4 + 0.5 * 2.0
    assert y.tolist() == pytest.approx([1.0 + 0.9 * worst_q, 2.0])  # the second transition ended


class TableQ(nn.Module):
    """Q(s, a) = V[s] + k·a on states 0 and 1 (the input's first feature), V learned, k fixed."""

    def __init__(self, k: float) -> None:
        super().__init__()
        self.v, self.k = nn.Parameter(th.zeros(2)), k

    def forward(self, x: th.Tensor, a: th.Tensor) -> th.Tensor:
        s = x[:, :1]
        return self.v[0] * (1 - s) + self.v[1] * s + self.k * a.sum(-1, keepdim=True)


def test_the_fitted_worst_case_q_reaches_the_hand_solved_fixed_point():
    """A two-state MDP: s0 → s1 with reward 1, s1 → s0 with reward 0, never ending; an attacker can
    move the action anywhere in [−δ, δ] and Q(s, a) = V[s] + k a. The worst-case Bellman equations
    V0 = 1 + γ(V1 − kδ), V1 = γ(V0 − kδ) give, for γ = 0.5, k = 1, δ = 0.2: V0 = 0.85 / 0.75 and
    V1 = V0 / 2 − 0.1. (With the best action instead, V0 would be 1.4 / 0.75 − …: a sign error fails.)"""
    gamma, k, delta = 0.5, 1.0, 0.2
    q = TableQ(k)
    target = TableQ(k)
    target.load_state_dict(q.state_dict())
    x = th.tensor([[0.0], [1.0]])
    next_x = th.tensor([[1.0], [0.0]])
    actions = th.zeros(2, 1)  # the taken actions: V alone is regressed
    box = lambda nx: (th.full((len(nx), 1), -delta), th.full((len(nx), 1), delta), th.zeros(len(nx), 1))  # noqa: E731
    optimizer = th.optim.SGD(q.parameters(), lr=0.5)
    fit_worst_q(q, target, optimizer, x, actions, th.tensor([1.0, 0.0]), next_x, th.ones(2), box, gamma,
                epochs=300, minibatches=1, tau=1.0, steps=20, generator=th.Generator().manual_seed(0))
    v0 = 0.85 / 0.75
    assert q.v.detach().tolist() == pytest.approx([v0, v0 / 2 - 0.1], abs=1e-4)


def _model(**kwargs) -> WocaRPPO:
    return WocaRPPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=32, n_epochs=1, seed=0, sa_eps=0.05,
                    sa_kappa=0.1, sa_steps=2, q_epochs=1, q_pgd_steps=5, **kwargs)


def test_the_rollouts_transitions_are_read_in_order(monkeypatch):
    """What Q_w is fitted on: (x_t, a_t, r_t, x_{t+1}, not done) in rollout order, the rollout's
    last observation after its last step (read while the buffer is still in rollout order)."""
    from rlgauntlet.training.defences import wocar

    model = _model()
    seen = {}
    real_fit = wocar.fit_worst_q

    def spy(q, q_target, optimizer, x, actions, rewards, next_x, not_done, *rest, **kwargs):
        box, gamma, epochs, minibatches, tau, steps = rest
        seen.update(settings=(gamma, epochs, minibatches, tau, steps))
        buffer = model.rollout_buffer
        seen.update(x=x, actions=actions, rewards=rewards, next_x=next_x, not_done=not_done,
                    obs=th.as_tensor(buffer.observations[:, 0].copy()), buffer_actions=th.as_tensor(buffer.actions[:, 0].copy()),
                    buffer_rewards=th.as_tensor(buffer.rewards[:, 0].copy()),
                    last=th.as_tensor(np.asarray(model._last_obs)[0], dtype=th.float32))
        return real_fit(q, q_target, optimizer, x, actions, rewards, next_x, not_done, *rest, **kwargs)

    monkeypatch.setattr(wocar, "fit_worst_q", spy)
    model.learn(64)
    assert th.allclose(seen["x"], seen["obs"]) and th.allclose(seen["next_x"][:-1], seen["obs"][1:])
    assert th.allclose(seen["next_x"][-1], seen["last"])
    assert seen["not_done"].tolist() == [1.0] * 64  # Pendulum's 200-step episodes: none ends in the first 64
    assert th.allclose(seen["rewards"], seen["buffer_rewards"]) and th.allclose(seen["actions"], seen["buffer_actions"])
    # γ, the epochs, 64 transitions in minibatches of 32, τ and the PGD steps of the preset
    assert seen["settings"] == (model.gamma, model.q_epochs, 2, model.q_tau, model.q_pgd_steps)


def test_a_training_step_fits_the_worst_case_q_then_carries_it_into_the_advantage(monkeypatch):
    """Wiring: Q_w is fitted (its weights move) before the policy update, and the advantage the
    surrogate uses is Â + w·normalised Q̄_w(x, a) with the ramped w."""
    from rlgauntlet.training.defences import wocar

    model = _model(q_weight=0.8)
    before = [p.clone() for p in model.worst_q.parameters()]
    order, seen = [], []
    real_fit, real_terms = wocar.fit_worst_q, wocar.SAPPO._ppo_terms
    monkeypatch.setattr(wocar, "fit_worst_q", lambda *a, **k: order.append("q") or real_fit(*a, **k))

    def terms(self, data, clip_range):
        order.append("policy")
        plain = real_terms(self, data, clip_range)
        seen.append((plain.advantages.clone(), data.observations.clone(), plain.actions.clone()))
        return plain

    monkeypatch.setattr(wocar.SAPPO, "_ppo_terms", terms)
    model.learn(128)  # two rollouts: the weight has ramped above 0 by the second
    assert order[0] == "q" and order.count("q") == 2 and "policy" in order[order.index("q"):]
    assert any(not th.allclose(a, b) for a, b in zip(before, model.worst_q.parameters()))
    w = model.current_q_weight()
    assert w > 0
    plain_adv, observations, actions = seen[-1]

    class Data:
        pass

    data = Data()
    data.observations, data.old_log_prob = observations, th.zeros(len(observations))
    worst = model.worst_q_target(observations.float(), actions.float()).squeeze(-1).detach()
    expected = plain_adv + w * (worst - worst.mean()) / (worst.std() + 1e-8)
    from rlgauntlet.training.live import PPOTerms

    # SA-PPO's terms as recorded for that minibatch; WocaR's override must add w·normalised Q̄_w to them
    monkeypatch.setattr(wocar.SAPPO, "_ppo_terms",
                        lambda self, d, c: PPOTerms(actions, plain_adv, th.zeros(len(actions)), None, th.zeros(()),
                                                    th.zeros(())))
    combined = WocaRPPO._ppo_terms(model, data, 0.2)
    assert th.allclose(combined.advantages, expected, atol=1e-5)


def test_wocar_refuses_discrete_actions():
    with pytest.raises(ValueError, match="Box actions"):
        WocaRPPO("MlpPolicy", "CartPole-v1")


def test_the_worst_case_q_is_saved_and_resumed_with_the_policy(tmp_path):
    from rlgauntlet.training.checkpoints import load_checkpoint_zip

    model = _model()
    model.learn(64)
    model.save(tmp_path / "model.zip")
    fresh = _model()
    load_checkpoint_zip(fresh, tmp_path / "model.zip")
    for a, b in zip(model.worst_q.state_dict().values(), fresh.worst_q.state_dict().values()):
        assert th.equal(a, b)
    assert fresh.worst_q_optimizer.state_dict()["state"]  # Adam's moments came back too
    assert isinstance(fresh.worst_q, WorstCaseQ) and np.isfinite(float(fresh.worst_q_target.net[0].weight.sum()))


def test_an_episodes_end_stops_the_worst_case_bootstrap(monkeypatch):
    """Pendulum's episodes end after 200 steps (a time limit, counted as an end as the official
    not_dones do): in a 256-step rollout exactly transition 199 is not continued."""
    from rlgauntlet.training.defences import wocar

    model = WocaRPPO("MlpPolicy", "Pendulum-v1", n_steps=256, batch_size=128, n_epochs=1, seed=0, q_epochs=1,
                     q_pgd_steps=2, sa_steps=1)
    seen = []
    real_fit = wocar.fit_worst_q
    monkeypatch.setattr(wocar, "fit_worst_q", lambda *a, **k: seen.append(a[7].clone()) or real_fit(*a, **k))
    model.learn(256)
    [not_done] = seen
    assert [i for i, v in enumerate(not_done.tolist()) if v == 0.0] == [199]


def test_the_worst_action_search_steps_by_signs_inside_the_box():
    """Known answers the corner test cannot tell apart: a start outside the box is projected first;
    a tiny gradient still moves a full step (signs, not the gradient's size); a quadratic Q whose
    minimum is inside the box ends within one step of it."""
    q = LinearQ([0.01, -0.01], 0.0)
    lower, upper = th.tensor([[-0.3, -0.2]]), th.tensor([[0.1, 0.4]])
    a = worst_actions(q, th.zeros(1, 3), lower, upper, start=th.tensor([[0.0, 0.0]]), steps=50)
    assert th.allclose(a, th.tensor([[-0.3, 0.4]]))
    outside = worst_actions(q, th.zeros(1, 3), lower, upper, start=th.tensor([[5.0, -5.0]]), steps=1)
    assert th.allclose(outside, th.tensor([[-0.3, 0.4]]))  # projected, then one step of the whole box

    class Bowl(nn.Module):
        def forward(self, x, a):
            return ((a - 0.3) ** 2).sum(-1, keepdim=True)

    box = th.tensor([[-1.0]]), th.tensor([[1.0]])
    found = worst_actions(Bowl(), th.zeros(1, 1), *box, start=th.zeros(1, 1), steps=50)
    assert abs(float(found) - 0.3) <= 2.0 / 50 + 1e-6


def test_the_worst_case_weight_ramps_linearly_and_is_capped():
    model = _model(q_weight=0.8)
    for remaining, expected in ((1.0, 0.0), (0.5, 0.4), (0.0, 0.8)):
        model._current_progress_remaining = remaining
        assert model.current_q_weight() == pytest.approx(expected)
    model.q_weight = 1.5
    model._current_progress_remaining = 0.0
    assert model.current_q_weight() == 1.0


def test_the_wocar_surrogate_is_ppos_clipped_objective_on_the_combined_advantage(monkeypatch):
    """Known answer by hand: −mean(min(Â′·r, Â′·clip(r, 1 − c, 1 + c))) with r = exp(logp − old)."""
    from rlgauntlet.training.defences import wocar
    from rlgauntlet.training.live import PPOTerms

    model = _model(q_weight=0.8)
    model._current_progress_remaining = 0.5
    actions = th.tensor([[0.1], [-0.2], [0.3], [0.0]])
    plain_adv = th.tensor([1.0, -1.0, 0.5, -0.5])
    monkeypatch.setattr(wocar.SAPPO, "_ppo_terms", lambda self, d, c: PPOTerms(
        actions, plain_adv, th.zeros(4), None, th.zeros(()), th.zeros(())))

    class Data:
        observations = th.tensor([[0.1, 0.2, 0.3], [0.0, -0.1, 0.2], [0.5, 0.1, -0.3], [0.2, 0.2, 0.2]])
        old_log_prob = th.zeros(4)

    terms = WocaRPPO._ppo_terms(model, Data, 0.2)
    logp = th.tensor([0.5, -0.5, 0.05, 0.0])
    ratio = logp.exp()
    adv = terms.advantages
    expected = -th.min(adv * ratio, adv * ratio.clamp(0.8, 1.2)).mean()
    assert float(terms.surrogate(logp)) == pytest.approx(float(expected), rel=1e-6)
    worst = model.worst_q_target(Data.observations, actions).squeeze(-1).detach()
    assert th.allclose(adv, plain_adv + 0.4 * (worst - worst.mean()) / (worst.std() + 1e-8), atol=1e-6)


@pytest.mark.parametrize("hidden", [(64, 64), (16,), (8, 8, 8)])
def test_the_worst_case_qs_own_action_gradient_is_autograds(hidden):
    """WorstCaseQ's hand-written ∂Q/∂a against autograd's on random networks and inputs: a wrong
    layer order, a missing tanh derivative or the x part of the first layer used for a would fail;
    and the search over a box lands on the same actions either way."""
    from rlgauntlet.training.defences.wocar import autograd_action_gradient

    th.manual_seed(0)
    q = WorstCaseQ(11, 3, hidden=hidden)
    for p in q.parameters():
        p.data.mul_(3.0)  # past tanh's linear range, where the derivative matters
    x, a = th.randn(64, 11), th.rand(64, 3) * 2 - 1
    assert th.allclose(q.action_gradient(x)(a), autograd_action_gradient(q, x)(a), rtol=1e-4, atol=1e-6)
    lower, upper = a - 0.2, a + 0.2
    by_hand = worst_actions(q, x, lower, upper, a, steps=20)

    class Opaque(nn.Module):  # the same Q, searched through autograd
        def forward(self, x, a):
            return q(x, a)

    assert th.allclose(by_hand, worst_actions(Opaque(), x, lower, upper, a, steps=20), atol=1e-6)
    assert (q(x, by_hand) <= q(x, a) + 1e-6).all()


def test_the_fit_searches_the_worst_action_on_the_online_q_and_values_it_with_the_target(monkeypatch):
    """The official worst_q_step: ā = argmin over the box of q_net, y = r + γ target_q_net(x', ā).
    The two networks here disagree on which corner is worst, so searching on the target (or valuing
    with the online network) gives another y; the one fit step's regression target is read back."""
    online, target = LinearQ([2.0, -1.0], 0.0), LinearQ([-2.0, 1.0], 0.0)
    lower, upper = th.tensor([[-0.3, -0.2]]), th.tensor([[0.1, 0.4]])
    box = lambda nx: (lower.expand(len(nx), -1), upper.expand(len(nx), -1), th.zeros(len(nx), 2))  # noqa: E731
    seen = []

    class Recorder(nn.Module):  # Q(x, a) = w·x, fitted by one SGD step; records the target it was fitted to
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(th.zeros(1))

        def forward(self, x, a):
            return self.w * x.sum(-1, keepdim=True) + online(x, a)

    q = Recorder()
    import rlgauntlet.training.defences.wocar as wocar

    real = wocar.worst_case_targets

    def spy(*args, **kwargs):
        y = real(*args, **kwargs)
        seen.append(float(y))
        return y

    monkeypatch.setattr(wocar, "worst_case_targets", spy)
    fit_worst_q(q, target, th.optim.SGD(q.parameters(), lr=0.0), th.ones(1, 3), th.zeros(1, 2), th.tensor([1.0]),
                th.ones(1, 3), th.ones(1), box, gamma=0.5, epochs=1, minibatches=1, tau=0.0, steps=50)
    # online's worst corner: a₁ low, a₂ high (−0.3, 0.4); the target there: −2·(−0.3) + 0.4 = 1.0.
    # Searched on the target instead (its corner (0.1, −0.2)): y = 1 + 0.5·(−0.4) = 0.8; valued by
    # the online network at its own corner: y = 1 + 0.5·(−1.0) = 0.5
    assert seen == pytest.approx([1.0 + 0.5 * 1.0])
