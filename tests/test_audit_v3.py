"""Known answers for the third mutation audit's survivors (hardening v3): each test fails on one
of the one-line bugs the audit made, on a case where the wrong implementation gives another
number (never a degenerate case: a trimmed mean over more than four runs, κ away from 0.5, a
replay buffer that has wrapped, target and online networks that disagree).

The names say which audited bug each test catches; docs/testing.md has the audit's table.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec


# --- the gauntlet's statistics ----------------------------------------------------------------------

def test_a_worst_case_rows_standard_error_is_scipys_sem_of_the_pooled_episodes():
    """ddof 1 over √n of every seed's episodes pooled (ddof 0 gives 1.118 here, not 1.291)."""
    from rlgauntlet.gauntlet.summary import pool_episodes

    reports = [{"evaluations": [{"spec": "pgd:eps=0.1", "returns": [1.0, 2.0], "return_mean": 1.5}]},
               {"evaluations": [{"spec": "pgd:eps=0.1", "returns": [3.0, 4.0, 5.0], "return_mean": 4.0},
                                {"spec": "ignored", "returns": [9.0], "return_mean": 9.0}]}]
    rows = pool_episodes(reports, lambda spec: None if spec == "ignored" else spec)
    row = rows["pgd:eps=0.1"]
    assert set(rows) == {"pgd:eps=0.1"}
    assert row["return_mean"] == pytest.approx(3.0)
    assert row["return_sem"] == pytest.approx(float(stats.sem([1.0, 2.0, 3.0, 4.0, 5.0])), rel=1e-12)
    assert row["episodes"] == 5 and row["seed_means"] == [1.5, 4.0]


def _plan_stub(tmp_path: Path, seeds: list[int]):
    from rlgauntlet.gauntlet.protocols import get_protocol

    protocol = get_protocol("classic")
    return SimpleNamespace(protocol=protocol, store=tmp_path / "g.sqlite", sha="ab" * 32, env="CartPole-v1",
                           seeds=seeds, settings=protocol.levels["quick"])


def test_the_certification_and_checks_caches_are_keyed_by_the_seed(tmp_path):
    """Another --seeds must not reuse the certification or checks computed with another seed."""
    from rlgauntlet.gauntlet.cache import cache_file

    for what in ("certified", "checks"):
        first, other = cache_file(_plan_stub(tmp_path, [0, 1]), what), cache_file(_plan_stub(tmp_path, [5, 6]), what)
        assert first != other
        assert cache_file(_plan_stub(tmp_path, [0, 1]), what) == first  # and the same seeds find it again


def test_the_checks_standard_error_is_over_the_square_root_of_n():
    from rlgauntlet.gauntlet.checks import _mean_se

    values = torch.tensor([0.0, 1.0, 1.0, 3.0, 7.0, 2.0, 2.0, 0.5, 4.0], dtype=torch.float64)
    mean, se = _mean_se(values)
    assert mean == pytest.approx(float(np.mean(values.numpy())))
    assert se == pytest.approx(float(stats.sem(values.numpy())), rel=1e-12)  # /n gives a third of it here
    assert _mean_se(torch.tensor([1.0, 4.0], dtype=torch.float64)) == pytest.approx((2.5, 1.5))  # two values: a sem
    assert _mean_se(torch.tensor([3.0], dtype=torch.float64)) == (3.0, 0.0)  # one value: no spread, never NaN


@pytest.mark.parametrize("gap_in_se, fires", [(-3.0, True), (-1.0, False), (0.0, False), (1.0, False),
                                               (3.0, False)])
def test_worse_than_random_fires_only_below_two_standard_errors(gap_in_se, fires):
    """A gap of 1 SE below random is noise; 3 SE below is a warning; above random never is."""
    from rlgauntlet.gauntlet.checks import Z, significantly_below_zero

    assert Z == 2.0
    assert significantly_below_zero(gap_in_se * 0.05, 0.05) is fires
    assert significantly_below_zero(-1e-12, 0.0) is False  # a rounding-sized gap with no spread


def test_iqm_interval_point_is_scipys_25_percent_trimmed_mean():
    """Eight runs with outliers: the trimmed mean (4.5) is far from the plain mean (27.5)."""
    from rlgauntlet.metrics.aggregates import iqm_interval

    scores = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 192.0]
    point, low, high = iqm_interval([scores], resamples=200)
    assert point == pytest.approx(float(stats.trim_mean(scores, 0.25)), rel=1e-12)
    assert low is not None and low <= point <= high
    two_tasks = [[1.0, 2.0, 3.0, 100.0], [5.0, 6.0, 7.0, 8.0, 9.0, -50.0, 10.0, 11.0]]
    assert iqm_interval(two_tasks, resamples=200)[0] == pytest.approx(
        float(stats.trim_mean(np.concatenate(two_tasks), 0.25)), rel=1e-12)


def _gauntlet_store(path: Path, runs: list[tuple[str, object, float]]) -> None:
    """A store with one gauntlet run per (method, version, score at the current headline ε)."""
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.experiments.store import ResultsStore, run_key

    headline = get_protocol("classic").headline_eps
    store = ResultsStore(path)
    for i, (method, version, score) in enumerate(runs):
        meta = {"protocol": "classic", "version": version, "level": "quick", "env": "CartPole-v1",
                "agent": f"{method}{i}", "sha256": f"{method}{i}", "method": method}
        run = store.create_run(run_key(meta), meta, kind="gauntlet")
        store.add_metric(run, f"worst_case@{headline}", score)
        store.add_metric(run, "clean_return", 500.0)
    store.close()


def test_the_leaderboard_scores_no_unknown_protocol_version(tmp_path):
    """A version this code does not know has no known headline ε: its agents are unscored,
    never ranked at today's headline, and a board of nothing else is a one-line error naming it."""
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    current = get_protocol("classic").version
    _gauntlet_store(tmp_path / "mixed.sqlite", [("known", current, 100.0), ("future", 999, 400.0)])
    boards = {b["version"]: b for b in leaderboard([tmp_path / "mixed.sqlite"])["boards"]}
    assert [r["method"] for r in boards[current]["rows"]] == ["known"]
    assert boards[999]["rows"] == [] and boards[999]["unscored"] == ["future"]
    from rlgauntlet.report.leaderboard import render_leaderboard

    page = render_leaderboard(leaderboard([tmp_path / "mixed.sqlite"]), tmp_path / "board.html").read_text()
    assert "ε = None" not in page and "Nothing ranked" in page and "version 999" in page
    _gauntlet_store(tmp_path / "future.sqlite", [("future", 999, 400.0), ("older", "x", 1.0)])
    with pytest.raises(UserError, match="999") as err:
        leaderboard([tmp_path / "future.sqlite"])
    assert "\n" not in str(err.value)


def test_a_non_finite_worst_case_is_never_ranked_and_says_why(tmp_path):
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    version = get_protocol("classic").version
    _gauntlet_store(tmp_path / "s.sqlite", [("broken", version, math.inf), ("fine", version, 10.0),
                                            ("nan", version, math.nan)])
    board = leaderboard([tmp_path / "s.sqlite"])["boards"][0]
    assert [r["method"] for r in board["rows"]] == ["fine"]
    assert sorted(board["unscored"]) == ["broken", "nan"]
    reasons = " ".join(m["reason"] for m in board["missing"])
    assert "not a finite number" in reasons
    json.dumps(board, allow_nan=False)  # nothing non-finite reaches the JSON


def test_fpr_at_95_tpr_reads_the_first_point_that_reaches_it_on_tied_scores():
    """20 OOD scores, 19 above every ID score but one tie: the TPR reaches 0.95 exactly at the
    threshold 1.0, where one ID score of ten ties and the FPR is 0.1 (one point later: 0.2)."""
    from rlgauntlet.metrics.detection import fpr_at_tpr

    ood = [2.0] * 18 + [1.0, 0.0]
    id_scores = [1.0, 0.5, 0.5, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]
    assert fpr_at_tpr(id_scores, ood, 0.95) == pytest.approx(0.1)
    assert fpr_at_tpr(id_scores, ood, 0.90) == pytest.approx(0.0)


# --- attacks ------------------------------------------------------------------------------------------

def test_a_pgd_push_runs_its_steps():
    """push_spec with steps=10 names 10 steps, and on a nonlinear policy 10 steps end elsewhere
    than one FGSM step (the audited bug made every push one step)."""
    import torch.nn as nn

    from rlgauntlet.common.seeding import BatchRNG, episode_generator
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.threats.attacks.push import push_spec
    from rlgauntlet.victims.torch_module import TorchVictim

    assert parse_threat(push_spec(0.1, [1, -1], steps=10)).params.steps == 10
    assert parse_threat(push_spec(0.1, [1, -1])).params.steps == 1
    import gymnasium as gym

    class Bumps(nn.Module):
        """action = (cos 4x₀, −cos 4x₁): ⟨action, (1, −1)⟩ peaks at x₀ = x₁ = 0, inside the ball
        of a point 0.2 away, where one FGSM step of 0.3 overshoots it by 0.1."""

        def forward(self, x):
            return torch.stack([torch.cos(4 * x[:, 0]), -torch.cos(4 * x[:, 1])], dim=1) + 0 * x[:, 2:3]

    victim = TorchVictim(Bumps(), "deterministic", gym.spaces.Box(-5, 5, (3,)), gym.spaces.Box(-1, 1, (2,)),
                         budget_space="raw", precision="float64")
    x = torch.tensor([[0.2, -0.2, 0.0], [-0.25, 0.15, 1.0]], dtype=torch.float64).repeat(4, 1)

    def run(steps):
        rng = BatchRNG([episode_generator(0, k, "threat") for k in range(8)])
        return parse_threat(push_spec(0.3, [1, -1], steps=steps)).perturb(x, victim, rng)

    one, ten = run(1), run(10)
    assert (one - x).abs().max() <= 0.3 + 1e-12 and (ten - x).abs().max() <= 0.3 + 1e-12
    direction = torch.tensor([1.0, -1.0], dtype=torch.float64) / math.sqrt(2)
    progress = [float((victim.forward(z).action @ direction).mean()) for z in (one, ten)]
    assert progress[1] > progress[0] + 0.05  # ten steps find the peak one step jumps over (1.41 vs 1.29)


# --- defences -----------------------------------------------------------------------------------------

def test_radial_ppo_weights_the_worst_case_by_one_minus_kappa():
    """κ = 0.25: κ·nominal + 0.75·worst; κ and 1 − κ swapped gives another number."""
    from rlgauntlet.training.live import PPOTerms
    from rlgauntlet.training.defences.radial import radial_ppo_policy_loss, softmax_bounds

    t = torch.tensor
    lower = t([[0.0, -1.0, 0.5], [-0.5, 0.2, 0.1]], dtype=torch.float64)
    upper = lower + t([[0.4, 0.3, 0.2], [0.6, 0.1, 0.5]], dtype=torch.float64)
    actions, advantages = t([1, 2]), t([1.2, -0.7], dtype=torch.float64)
    log_prob = t([-1.0, -0.9], dtype=torch.float64)
    terms = PPOTerms(actions, advantages, log_prob, lambda logp: -(advantages * logp.exp()).mean(), t(0.0), t(0.0))
    loss, worst = radial_ppo_policy_loss(terms, lower, upper, 0.25)
    nominal = terms.surrogate(log_prob)
    assert worst.item() != pytest.approx(nominal.item())
    assert loss.item() == pytest.approx(0.25 * nominal.item() + 0.75 * worst.item(), rel=1e-12)
    low, high = softmax_bounds(lower, upper, actions)
    assert (low <= high).all()


def test_radial_ppo_training_passes_lower_then_upper_bounds_and_its_kappa(monkeypatch):
    """The training step, not only the loss: the bounds it hands over are (lower, upper) of the
    live network at the current ε, and its κ is the algorithm's."""
    from rlgauntlet.training.defences import radial

    seen = []
    real = radial.radial_ppo_policy_loss

    def spy(terms, lower, upper, kappa):
        seen.append((lower.detach().clone(), upper.detach().clone(), kappa))
        return real(terms, lower, upper, kappa)

    monkeypatch.setattr(radial, "radial_ppo_policy_loss", spy)
    model = radial.RadialPPO("MlpPolicy", "CartPole-v1", seed=0, n_steps=64, batch_size=64, n_epochs=1,
                             radial_eps=0.05, ramp_fraction=0.1, kappa=0.3)
    model.learn(128)
    assert seen, "RadialPPO never computed its worst-case term"
    for lower, upper, kappa in seen:
        assert kappa == 0.3
        assert (lower <= upper).all() and (upper - lower).max() > 0


def _fixed_batch(model, batch: int = 8, seed: int = 0):
    """A replay sample of ``batch`` rows drawn once with a fixed generator, so the training step
    and the hand computation see the same data."""
    buffer = model.replay_buffer
    rng = np.random.default_rng(seed)
    upper = buffer.buffer_size if buffer.full else buffer.pos
    idx = rng.integers(0, upper, size=batch)
    return buffer._get_samples(idx, env=None)


def _dqn_model(cls, **kwargs):
    model = cls("MlpPolicy", "CartPole-v1", seed=0, learning_starts=10_000, buffer_size=1000, batch_size=8,
                policy_kwargs={"net_arch": [16]}, **kwargs)
    model.learn(300)  # fills the buffer, trains nothing (learning_starts not reached)
    # a target network that disagrees with the online one: the online net with its two actions'
    # output rows swapped, so the online net's best action is the target net's worst (Double DQN
    # then takes the smaller Q, plain DQN the larger)
    model.q_net_target.load_state_dict(model.q_net.state_dict())
    last = [m for m in model.q_net_target.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.weight.copy_(last.weight.flip(0))
        last.bias.copy_(last.bias.flip(0))
    return model


def _run_one_step(model, monkeypatch):
    data = _fixed_batch(model)
    monkeypatch.setattr(model.replay_buffer, "sample", lambda batch_size, env=None: data)
    losses = []
    real = model._optimize
    monkeypatch.setattr(model, "_optimize", lambda loss: (losses.append(loss.detach().clone()), real(loss)))
    return data, losses


def test_radial_dqn_training_step_uses_double_dqn_targets(monkeypatch):
    """The online net picks the next action, the target net values it (docs: Double DQN); the
    loss the step optimises is Eq. 5 on that target, at the step's κ and ε, from the bounds."""
    from rlgauntlet.bounds import ibp
    from rlgauntlet.training.defences.radial import RadialDQN, radial_dqn_loss

    model = _dqn_model(RadialDQN, radial_eps=0.05, ramp_fraction=0.1, kappa_end=0.3)
    data, losses = _run_one_step(model, monkeypatch)
    with torch.no_grad():
        next_online = model.q_net(data.next_observations)
        next_target = model.q_net_target(data.next_observations)
        double = next_target.gather(1, next_online.argmax(1, keepdim=True)).flatten()
        plain = next_target.max(1).values
        assert not torch.allclose(double, plain), "the constructed nets must disagree"
        target = data.rewards.flatten() + (1 - data.dones.flatten()) * model.gamma * double
        q_all = model.q_net(data.observations)
        eps, kappa = model.current_eps(), model.current_kappa()
        assert eps == pytest.approx(0.05) and kappa == pytest.approx(0.3)
        lower, upper = ibp(model._victim(), model._network_input(data.observations), eps)
        expected, _ = radial_dqn_loss(q_all, lower, upper, data.actions.long().flatten(), target, kappa)
    model.train(gradient_steps=1, batch_size=8)
    assert len(losses) == 1
    assert losses[0].item() == pytest.approx(expected.item(), rel=1e-6)


def test_sa_dqn_training_step_averages_the_hinge_over_the_batch(monkeypatch):
    """L = TD + κ·mean(hinge): the sum over a batch of 8 gives another number."""
    from rlgauntlet.training.defences.sa_dqn import SADQN, sa_dqn_regularizer

    model = _dqn_model(SADQN, sa_eps=0.05, sa_kappa=0.7, ramp_fraction=0.1)
    data, losses = _run_one_step(model, monkeypatch)
    with torch.no_grad():
        next_q = model.q_net_target(data.next_observations).max(1).values
        target = data.rewards.flatten() + (1 - data.dones.flatten()) * model.gamma * next_q
        q_all = model.q_net(data.observations)
        td = F.smooth_l1_loss(q_all.gather(1, data.actions.long()).flatten(), target)
    reg = sa_dqn_regularizer(model._victim(), model._network_input(data.observations), model.current_eps(),
                             model.sa_hinge, q_clean=q_all).detach()
    assert reg.abs().sum() > 0 and not torch.allclose(reg.mean(), reg.sum())
    model.train(gradient_steps=1, batch_size=8)
    assert losses[0].item() == pytest.approx((td + 0.7 * reg.mean()).item(), rel=1e-6)


def test_the_atla_adversarys_budget_never_exceeds_its_eps():
    """A ramp over a third of the run reaches ε at a third and stays there (unclamped it would
    reach 3ε at the end)."""
    from rlgauntlet.training.defences.atla import ATLAPreset, adversary_eps

    preset = ATLAPreset("p", "cartpole-ppo", "atla", eps=0.1, total_agent_steps=3000, eps_ramp=1 / 3)
    steps = np.arange(0, 3001, 50)
    values = np.array([adversary_eps(preset, int(s)) for s in steps])
    assert values.max() <= 0.1 + 1e-15
    np.testing.assert_allclose(values, np.minimum(0.1, 0.1 * steps / 1000), rtol=1e-12, atol=1e-15)
    assert adversary_eps(ATLAPreset("q", "cartpole-ppo", "atla", eps=0.1, total_agent_steps=3000), 0) == 0.1


def test_atla_clean_games_read_the_agents_current_normaliser():
    """The checkpoints' clean games normalise with the agent's statistics as they are now, not
    with the games' own (never updated) ones."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.defences.atla import CLEAN_GAMES, _clean_return
    from rlgauntlet.training.greedy_eval import greedy_returns
    from rlgauntlet.training.kit import GREEDY_SEED_OFFSET

    # a linear policy that pushes toward the pole's fall (logit of "right" = 5·(angle + angular
    # velocity), normalised): with the games' own statistics (mean 0, var 1) it balances for a while;
    # with the agent's (the pole angle's mean moved to 0.5) it always pushes left and falls at once
    agent = PPO("MlpPolicy", "CartPole-v1", seed=3, policy_kwargs={"net_arch": []})
    with torch.no_grad():
        agent.policy.action_net.weight.copy_(torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 5.0, 5.0]]))
        agent.policy.action_net.bias.zero_()
    agent_env = VecNormalize(make_train_vec_env("CartPole-v1", 2, 0), norm_reward=False)
    agent_env.obs_rms.mean = np.array([0.0, 0.0, 0.5, 0.0])
    agent_env.obs_rms.var = np.array([1.0, 1.0, 1.0, 1.0])
    games = VecNormalize(make_train_vec_env("CartPole-v1", CLEAN_GAMES, 7), norm_reward=False, training=False)
    stale = games.obs_rms
    result = _clean_return(agent, games, agent_env, 0)
    assert games.obs_rms is agent_env.obs_rms and games.obs_rms is not stale
    reference = VecNormalize(make_train_vec_env("CartPole-v1", CLEAN_GAMES, 7), norm_reward=False, training=False)
    reference.obs_rms = agent_env.obs_rms
    assert result == pytest.approx(float(np.mean(greedy_returns(agent, reference, 0 + GREEDY_SEED_OFFSET))))
    with_stale = VecNormalize(make_train_vec_env("CartPole-v1", CLEAN_GAMES, 7), norm_reward=False, training=False)
    assert result != pytest.approx(float(np.mean(greedy_returns(agent, with_stale, 0 + GREEDY_SEED_OFFSET))))


def _time_limit(env) -> int | None:
    while env is not None:
        if type(env).__name__ == "TimeLimit":
            return env._max_episode_steps
        env = getattr(env, "env", None)
    return None


def test_minatar_training_envs_have_the_evaluation_envs_step_limit():
    pytest.importorskip("minatar")
    from rlgauntlet.envs import make_env
    from rlgauntlet.envs.minatar import MAX_EPISODE_STEPS
    from rlgauntlet.envs.presets import make_train_vec_env

    evaluation = make_env("MinAtar/Breakout-v1")
    training = make_train_vec_env("MinAtar/Breakout-v1", 2, 0)
    assert _time_limit(evaluation) == MAX_EPISODE_STEPS
    assert [_time_limit(e) for e in training.envs] == [MAX_EPISODE_STEPS] * 2
    evaluation.close()
    training.close()


# --- safety rules ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("generator", ["jupyter 7.1", "Rlgauntlet", "rlgauntlet-fork 1.0", "", None, 1])
def test_a_foreign_json_with_a_generator_field_is_not_ours(tmp_path, generator):
    from rlgauntlet.common.outputs import check_output, written_by_us

    path = tmp_path / "notes.json"
    path.write_text(json.dumps({"generator": generator, "cells": []}))
    before = path.read_bytes()
    assert not written_by_us(path)
    with pytest.raises(UserError, match="not written by rlgauntlet"):
        check_output(path, kind="evaluation")
    assert path.read_bytes() == before


def test_a_real_png_of_another_program_is_not_ours(tmp_path):
    """A real PNG (matplotlib's own Software chunk, and one with none): refused; ours accepted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlgauntlet.common.outputs import check_output, save_figure, written_by_us

    fig = plt.figure(figsize=(1, 1))
    theirs, bare, ours = tmp_path / "theirs.png", tmp_path / "bare.png", tmp_path / "ours.png"
    fig.savefig(theirs)
    fig.savefig(bare, metadata={"Software": None})
    save_figure(fig, ours, kind="spectrum plot")
    plt.close(fig)
    for path in (theirs, bare):
        assert path.read_bytes().startswith(b"\x89PNG")
        assert not written_by_us(path)
        with pytest.raises(UserError, match="not written by rlgauntlet"):
            check_output(path, kind="spectrum plot")
    assert written_by_us(ours) and check_output(ours, kind="spectrum plot") == ours
    with pytest.raises(UserError, match="spectrum plot output, not a reward-vs-budget plot"):
        check_output(ours, kind="reward-vs-budget plot")


# --- resume -------------------------------------------------------------------------------------------

def test_a_wrapped_replay_buffer_resumes_full(tmp_path):
    """About 70 transitions into a buffer of 50: full, wrapped; the resumed buffer samples all 50."""
    from stable_baselines3 import DQN

    from rlgauntlet.training.checkpoints import load_replay_buffer, save_replay_buffer

    def build():
        return DQN("MlpPolicy", "CartPole-v1", buffer_size=50, learning_starts=1000, seed=0,
                   policy_kwargs={"net_arch": [8]})

    model = build()
    model.learn(70)
    pos = model.num_timesteps % 50
    assert model.num_timesteps > 50 and model.replay_buffer.full and model.replay_buffer.pos == pos != 0
    save_replay_buffer(model, tmp_path / "replay_buffer.npz")
    fresh = build()
    assert load_replay_buffer(fresh, tmp_path)
    assert fresh.replay_buffer.full is True and fresh.replay_buffer.pos == pos and fresh.replay_buffer.size() == 50
    # bit-exact on purpose: the arrays are copies
    assert np.array_equal(fresh.replay_buffer.observations, model.replay_buffer.observations)


def test_a_resumed_sac_run_restores_its_entropy_coefficient_and_full_buffer(tmp_path, monkeypatch):
    """A SAC checkpoint (through train_preset, the path users resume) whose buffer has wrapped
    and whose log α has moved: a fresh model resumed from it equals the saved state."""
    import dataclasses
    import io
    import zipfile

    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.training import recipes as presets
    from rlgauntlet.training.checkpoints import load_checkpoint_zip, load_replay_buffer
    from rlgauntlet.training.kit import build_model
    from rlgauntlet.training.sb3_train import train_preset

    tiny = dataclasses.replace(
        presets.PRESETS["pendulum-td3"], name="tiny-sac", algo="sac", total_timesteps=300, checkpoint_every=300,
        target_return=0.0, stop_at_target=False, action_noise_std=None,
        hyperparams=dict(policy="MlpPolicy", buffer_size=200, learning_starts=50, batch_size=16,
                         learning_rate=3e-3, policy_kwargs=dict(net_arch=[16])))
    monkeypatch.setitem(presets.PRESETS, "tiny-sac", tiny)
    ckpt = train_preset("tiny-sac", tmp_path / "run", stop_at_target=False, log=lambda s: None)
    with zipfile.ZipFile(ckpt / "model.zip") as archive:
        variables = torch.load(io.BytesIO(archive.read("pytorch_variables.pth")), weights_only=True)
        optimizers = {name: torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                      for name in archive.namelist() if name.endswith("optimizer.pth")}
    saved_log_alpha = variables["log_ent_coef"]
    assert abs(float(saved_log_alpha)) > 1e-3  # it moved: the test is not at the initial 0
    model = build_model(tiny, make_vec_env("Pendulum-v1", n_envs=1, seed=5), "cpu")
    assert not torch.allclose(model.log_ent_coef.detach(), saved_log_alpha)
    load_checkpoint_zip(model, ckpt / "model.zip")
    assert load_replay_buffer(model, ckpt)
    # bit-exact on purpose: loaded copies
    assert torch.equal(model.log_ent_coef.detach(), saved_log_alpha)
    assert "ent_coef_optimizer.pth" in {n.split("/")[-1] for n in optimizers}
    assert model.ent_coef_optimizer.state_dict()["state"].keys() == \
        optimizers["ent_coef_optimizer.pth"]["state"].keys() != set()
    assert model.replay_buffer.full and model.replay_buffer.pos == 300 % 200
    assert model.num_timesteps == 300


# --- the job layer ----------------------------------------------------------------------------------------

def test_a_library_functions_default_options_keep_an_agent_specs_settings(monkeypatch):
    """evaluate(AgentSpec(precision="float32", ...)) with evaluate's own defaults loads float32:
    only an option the caller changed overrides the spec's."""
    from rlgauntlet import evaluate
    from rlgauntlet.experiments import agents
    from rlgauntlet.experiments.agents import AgentSpec, as_agent_spec

    spec = AgentSpec(agent="zoo:cartpole-ppo", precision="float32", preset="classic")
    kept = as_agent_spec(spec, precision="auto", device="cpu", allow_pickle=False, preset=None)
    assert kept.precision == "float32" and kept.preset == "classic"
    assert as_agent_spec(spec, precision="float64").precision == "float64"  # a changed option wins
    loaded = []
    real = AgentSpec.load

    def spy(self, env):
        loaded.append(self)
        return real(self, env)

    monkeypatch.setattr(agents.AgentSpec, "load", spy)
    report = evaluate(spec, "CartPole-v1", [], episodes=1, n_envs=1, impact=False)
    assert loaded and all(s.precision == "float32" for s in loaded)
    assert report.evaluations[0]["episodes"] == 1


# --- follow-ups of the mutation check over the audited modules (docs/testing.md) -------------------

def test_the_iqm_interval_is_scipys_percentile_bootstrap_with_2000_resamples():
    """One task of 12 runs: the interval equals scipy's own percentile bootstrap of the trimmed
    mean, 2000 resamples, drawn with default_rng(seed), written out here independently."""
    from rlgauntlet.metrics.aggregates import iqm_interval

    scores = np.random.default_rng(11).normal(100.0, 15.0, size=12)  # continuous: every resample count shows
    reference = stats.bootstrap((scores,), lambda s, axis=-1: stats.trim_mean(s, 0.25, axis=axis),
                                n_resamples=2000, confidence_level=0.95, method="percentile",
                                rng=np.random.default_rng(3)).confidence_interval
    point, low, high = iqm_interval([scores], seed=3)
    assert (low, high) == pytest.approx((reference.low, reference.high), rel=1e-12)
    two = iqm_interval([[1.0, 5.0]], resamples=200)  # two runs already resample
    assert two[1] is not None and two[1] <= 3.0 <= two[2]


def test_the_improvement_interval_resamples_each_method_apart():
    """Methods of 3 and 5 runs (unpaired: a paired bootstrap cannot even draw them): the interval
    equals scipy's unpaired percentile bootstrap of P(X > Y) written out here."""
    from rlgauntlet.metrics.aggregates import improvement_interval, probability_of_improvement

    x, y = np.array([5.0, 7.0, 2.0]), np.array([1.0, 6.0, 3.0, 4.0, 2.0])

    def p(a, b):
        return float(((a[:, None] > b[None, :]).sum() + 0.5 * (a[:, None] == b[None, :]).sum()) / (len(a) * len(b)))

    reference = stats.bootstrap((x, y), p, n_resamples=2000, confidence_level=0.95, method="percentile",
                                vectorized=False, paired=False, rng=np.random.default_rng(0)).confidence_interval
    point, low, high = improvement_interval(x, y)
    assert point == pytest.approx(p(x, y))
    assert probability_of_improvement(x, y) == pytest.approx(p(x, y))
    assert (low, high) == pytest.approx((reference.low, reference.high), rel=1e-12)
    assert improvement_interval([1.0, 2.0], [0.0, 3.0], resamples=100)[1] is not None  # 2 runs each resample
    assert improvement_interval([1.0], [0.0, 3.0]) == (0.5, None, None)


def test_a_board_pairs_every_method_once_and_averages_its_agents_clean_returns(tmp_path):
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.experiments.store import ResultsStore, run_key
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    version, headline = get_protocol("classic").version, get_protocol("classic").headline_eps
    store = ResultsStore(tmp_path / "b.sqlite")
    for i, (method, score, clean) in enumerate([("a", 300.0, 400.0), ("a", 200.0, 500.0), ("b", 100.0, 450.0),
                                                ("c", 50.0, 300.0)]):
        meta = {"protocol": "classic", "version": version, "level": "quick", "env": "CartPole-v1",
                "agent": f"x{i}", "sha256": f"x{i}", "method": method}
        run = store.create_run(run_key(meta), meta, kind="gauntlet")
        store.add_metric(run, f"worst_case@{headline}", score)
        store.add_metric(run, "clean_return", clean)
    store.close()
    board = leaderboard([tmp_path / "b.sqlite"])["boards"][0]
    assert [(q["x"], q["y"]) for q in board["pairs"]] == [("a", "b"), ("a", "c"), ("b", "c")]
    assert board["rows"][0]["clean"] == pytest.approx(450.0)  # the mean over method a's two agents


def test_an_output_kind_is_read_back_from_each_format(tmp_path):
    """JSON, PNG and HTML marks carry the kind; a re-run replaces its own kind; an earlier
    version's mark (no kind) is not taken for any kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlgauntlet.common.outputs import check_output, output_kind, save_figure, write_json

    write_json(tmp_path / "a.json", {"x": 1}, kind="evaluation")
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["output_kind"] == "evaluation" and data["x"] == 1 and data["generator"].startswith("rlgauntlet ")
    assert (tmp_path / "a.json").read_text().endswith("}\n")
    fig = plt.figure(figsize=(1, 1))
    save_figure(fig, tmp_path / "deep" / "p.png", kind="spectrum plot")
    plt.close(fig)
    (tmp_path / "r.html").write_text('<html><head><meta name="generator" content="rlgauntlet 0.1.0">\n'
                                     '<meta name="rlgauntlet-output" content="report"></head></html>')
    (tmp_path / "old.json").write_text(json.dumps({"generator": "rlgauntlet 0.0.9"}))
    (tmp_path / "old.html").write_text('<meta name="generator" content="rlgauntlet 0.0.9">')
    assert [output_kind(tmp_path / n) for n in ("a.json", "deep/p.png", "r.html", "old.json", "old.html")] == \
        ["evaluation", "spectrum plot", "report", "", ""]
    assert output_kind(tmp_path / "missing.json") is None
    assert check_output(tmp_path / "a.json", kind="evaluation") == tmp_path / "a.json"
    for name, kind in (("old.json", "evaluation"), ("old.html", "report")):
        with pytest.raises(UserError, match="earlier version"):
            check_output(tmp_path / name, kind=kind)


def _evil(target: Path) -> bytes:
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {target}",))

    return pickle.dumps(Evil())


def _ppo(seed: int = 0):
    from stable_baselines3 import PPO

    return PPO("MlpPolicy", "CartPole-v1", seed=seed, n_steps=32, batch_size=32, n_epochs=1,
               policy_kwargs={"net_arch": [8]})


def test_a_checkpoint_of_parts_resumes_weights_optimizer_and_the_last_step_count(tmp_path):
    """policy.pt and optimizer.pt (the lent machine's form) come back exactly; without a
    num_timesteps the step count is the last history entry's, not an earlier one's."""
    from rlgauntlet.training.checkpoints import has_checkpoint, load_checkpoint_parts, resume

    trained = _ppo()
    trained.learn(64)
    torch.save(trained.policy.state_dict(), tmp_path / "policy.pt")
    torch.save(trained.policy.optimizer.state_dict(), tmp_path / "optimizer.pt")
    assert has_checkpoint(tmp_path) and not has_checkpoint(tmp_path / "none")
    fresh = _ppo(seed=1)
    load_checkpoint_parts(fresh, tmp_path, {"history": [{"steps": 32}, {"steps": 64}]})
    assert fresh.num_timesteps == 64
    # bit-exact on purpose: loaded copies
    assert all(torch.equal(fresh.policy.state_dict()[k], v) for k, v in trained.policy.state_dict().items())
    assert fresh.policy.optimizer.state_dict()["state"].keys() == trained.policy.optimizer.state_dict()["state"].keys()
    other = _ppo(seed=2)
    resume(other, tmp_path, {"num_timesteps": 96, "history": [{"steps": 64}]})
    assert other.num_timesteps == 96


def test_checkpoint_files_holding_code_are_refused_and_never_run(tmp_path):
    """A pickle payload in policy.pt, in the zip's .pth entries, in the replay buffer's arrays or
    in an optimizer file to compact: one-line refusal, the payload never runs."""
    import zipfile

    from rlgauntlet.training.checkpoints import (compact_optimizer_state, load_checkpoint_parts,
                                                 load_checkpoint_zip, load_replay_buffer)

    marker = tmp_path / "pwned"
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "policy.pt").write_bytes(_evil(marker))
    (parts / "optimizer.pt").write_bytes(_evil(marker))
    with pytest.raises(UserError, match="more than weights.*new --run-dir"):
        load_checkpoint_parts(_ppo(), parts, {"num_timesteps": 1})
    torch.save(_ppo().policy.state_dict(), parts / "policy.pt")  # real weights, the payload in the optimizer only
    with pytest.raises(UserError, match="more than weights.*new --run-dir"):
        load_checkpoint_parts(_ppo(), parts, {"num_timesteps": 1})
    model = _ppo()
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as zin, zipfile.ZipFile(tmp_path / "evil.zip", "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, _evil(marker) if item.filename == "policy.pth" else zin.read(item.filename))
    with pytest.raises(UserError, match="more than weights.*new --run-dir") as err:
        load_checkpoint_zip(_ppo(), tmp_path / "evil.zip")
    assert "--allow-pickle" not in str(err.value)  # no option unpickles a checkpoint: never suggested
    with pytest.raises(UserError, match="not one of|does not fit"):  # another network: not loaded loosely
        from stable_baselines3 import PPO

        PPO("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [8, 8]}).save(tmp_path / "deeper.zip")
        load_checkpoint_zip(_ppo(), tmp_path / "deeper.zip")
    (tmp_path / "opt.pt").write_bytes(_evil(marker))
    with pytest.raises(Exception):
        compact_optimizer_state(tmp_path / "opt.pt", tmp_path / "compact.pt")
    from stable_baselines3 import DQN

    dqn = DQN("MlpPolicy", "CartPole-v1", buffer_size=20, learning_starts=100, policy_kwargs={"net_arch": [8]})
    buffer_folder = tmp_path / "buffer"
    buffer_folder.mkdir()

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    with open(buffer_folder / "replay_buffer.npz", "wb") as f:
        np.savez(f, observations=np.array([Evil()], dtype=object), pos=np.int64(0), full=np.bool_(False))
    with pytest.raises(UserError, match="not a replay buffer of plain arrays"):
        load_replay_buffer(dqn, buffer_folder)
    assert load_replay_buffer(dqn, tmp_path / "parts") is False  # no buffer there: nothing restored
    assert not marker.exists()


def _with_dones(data):
    """The fixed batch with every other transition terminal (so the (1 − done) factor matters)."""
    dones = torch.zeros_like(data.dones)
    dones[::2] = 1.0
    return data._replace(dones=dones)


def test_sa_dqn_schedule_targets_and_settings(monkeypatch):
    """ε ramps linearly (half of sa_eps a quarter of the way through a ramp over half the run);
    terminal transitions have no bootstrap term; the settings' edges are accepted, beyond refused;
    the logged regulariser is the mean over the gradient steps."""
    from rlgauntlet.training.defences import sa_dqn as module
    from rlgauntlet.training.defences.sa_dqn import SADQN

    model = _dqn_model(SADQN, sa_eps=0.04, sa_kappa=0.7, ramp_fraction=0.5)
    model._current_progress_remaining = 0.75
    assert model.current_eps() == pytest.approx(0.02)
    model._current_progress_remaining = 0.0
    data = _with_dones(_fixed_batch(model))
    monkeypatch.setattr(model.replay_buffer, "sample", lambda batch_size, env=None: data)
    losses, regs = [], []
    real_opt, real_reg = model._optimize, module.sa_dqn_regularizer
    monkeypatch.setattr(model, "_optimize", lambda loss: (losses.append(loss.detach().clone()), real_opt(loss)))
    monkeypatch.setattr(module, "sa_dqn_regularizer",
                        lambda *a, **k: (lambda r: (regs.append(float(r.detach().mean())), r)[1])(real_reg(*a, **k)))
    with torch.no_grad():
        next_q = model.q_net_target(data.next_observations).max(1).values
        target = data.rewards.flatten() + (1 - data.dones.flatten()) * model.gamma * next_q
        td = F.smooth_l1_loss(model.q_net(data.observations).gather(1, data.actions.long()).flatten(), target)
    model.train(gradient_steps=2, batch_size=8)
    assert losses[0].item() == pytest.approx(td.item() + 0.7 * regs[0], rel=1e-6)
    assert model.logger.name_to_value["sa/regularizer"] == pytest.approx(np.mean(regs))
    for ok in (dict(ramp_fraction=0.0), dict(ramp_fraction=1.0), dict(sa_eps=0.0)):
        SADQN("MlpPolicy", "CartPole-v1", **ok)
    for bad in (dict(ramp_fraction=1.5), dict(sa_eps=-0.1), dict(sa_hinge=0.0)):
        with pytest.raises(ValueError):
            SADQN("MlpPolicy", "CartPole-v1", **bad)


def test_radial_dqn_kappa_ramp_and_terminal_targets(monkeypatch):
    from rlgauntlet.training.defences import radial

    model = _dqn_model(radial.RadialDQN, radial_eps=0.05, ramp_fraction=0.5, kappa_end=0.5)
    model._current_progress_remaining = 0.75  # half way up the ramp
    assert model.current_kappa() == pytest.approx(0.75) and model.current_eps() == pytest.approx(0.025)
    data = _with_dones(_fixed_batch(model))
    monkeypatch.setattr(model.replay_buffer, "sample", lambda batch_size, env=None: data)
    seen, worst = [], []
    real = radial.radial_dqn_loss

    def spy(*args):
        seen.append(args[4].detach().clone())
        out = real(*args)
        worst.append(out[1].item())
        return out

    monkeypatch.setattr(radial, "radial_dqn_loss", spy)
    with torch.no_grad():
        online = model.q_net(data.next_observations).argmax(1, keepdim=True)
        next_q = model.q_net_target(data.next_observations).gather(1, online).flatten()
        target = data.rewards.flatten() + (1 - data.dones.flatten()) * model.gamma * next_q
    model.train(gradient_steps=2, batch_size=8)
    torch.testing.assert_close(seen[0], target)
    assert len(worst) == 2 and model.logger.name_to_value["radial/worst_case_loss"] == pytest.approx(np.mean(worst))


def test_median_logit_width_is_the_median_of_per_state_mean_widths():
    from rlgauntlet.training.defences.radial import median_logit_width

    lower = torch.zeros(3, 3)
    upper = torch.tensor([[3.0, 0.0, 0.0], [6.0, 3.0, 0.0], [9.0, 9.0, 9.0]])  # mean widths 1, 3, 9
    assert median_logit_width(lower, upper) == pytest.approx(3.0)


def test_radial_ppo_total_loss_counts_and_guard_edges(monkeypatch):
    """The step optimises policy + c_ent·entropy + c_vf·value (SB3's signs); updates are counted
    one per epoch; a width exactly at the cap is healthy; ramp_fraction 0 puts the ramp at its
    end; the settings' edges."""
    from stable_baselines3.common.logger import configure

    from rlgauntlet.training.defences import radial

    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = radial.RadialPPO("MlpPolicy", env, seed=0, n_steps=32, batch_size=64, n_epochs=1, radial_eps=0.05,
                             ramp_fraction=0.1, ent_coef=0.3, vf_coef=0.7, policy_kwargs={"net_arch": [8]})
    terms_seen, policy_losses, losses = [], [], []
    real_terms, real_policy, real_opt = model._ppo_terms, radial.radial_ppo_policy_loss, model._optimize
    monkeypatch.setattr(model, "_ppo_terms", lambda *a: (lambda t: (terms_seen.append(t), t)[1])(real_terms(*a)))
    monkeypatch.setattr(radial, "radial_ppo_policy_loss",
                        lambda *a: (lambda r: (policy_losses.append(r), r)[1])(real_policy(*a)))
    monkeypatch.setattr(model, "_optimize", lambda loss: (losses.append(loss.detach().clone()), real_opt(loss)))
    model.learn(128)  # two rollouts of 2 envs × 32 steps
    assert model._n_updates == 2 and len(losses) == 2
    t, (pl, wc) = terms_seen[-1], policy_losses[-1]
    expected = pl + 0.3 * t.entropy_loss + 0.7 * t.value_loss
    assert losses[-1].item() == pytest.approx(expected.item(), rel=1e-6)
    assert model.logger.name_to_value["radial/worst_case_loss"] == pytest.approx(wc.item(), rel=1e-6)

    guarded = radial.RadialPPO("MlpPolicy", env, seed=0, n_steps=32, batch_size=64, n_epochs=1, radial_eps=0.05,
                               ramp_fraction=0.5, guard_max_width=1.0, policy_kwargs={"net_arch": [8]})
    guarded.set_logger(configure(None, []))
    guarded._total_timesteps, guarded._current_progress_remaining = 1280, 1.0
    guarded._guard_ramp(width=1.0, steps=64)  # at the cap: healthy; 64 of a 640-step ramp
    assert guarded.ramp_position == pytest.approx(0.1)
    guarded.ramp_fraction = 0.0
    guarded.ramp_position = None
    guarded._guard_ramp(width=0.0, steps=64)
    assert guarded.ramp_position == 1.0
    radial.RadialPPO("MlpPolicy", "CartPole-v1", guard_episodes=1, guard_max_width=1e-9)
    for bad in (dict(guard_max_width=0.0), dict(guard_episodes=0)):
        with pytest.raises(ValueError):
            radial.RadialPPO("MlpPolicy", "CartPole-v1", **bad)


def test_radial_ppo_guard_share_counts_every_env(monkeypatch):
    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.training.defences import radial

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = radial.RadialPPO("MlpPolicy", env, seed=0, n_steps=32, batch_size=64, n_epochs=1, radial_eps=0.05,
                             ramp_fraction=0.5, guard_max_width=1e9, policy_kwargs={"net_arch": [8]})
    shares = []
    real = model._guard_ramp
    monkeypatch.setattr(model, "_guard_ramp", lambda width, steps: (shares.append(steps), real(width, steps)))
    model.learn(64)
    assert shares == [64]  # 32 steps × 2 envs


def test_outputs_are_written_into_new_folders_and_odd_files_are_read_safely(tmp_path):
    """Outputs create their folders; a truncated PNG and a symlink loop are read as 'not ours'
    and 'not the store', never a crash."""
    from rlgauntlet.common.outputs import _same, output_kind, write_json
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.report.leaderboard import render_leaderboard

    write_json(tmp_path / "a" / "b" / "c.json", {"x": 1}, kind="evaluation")
    assert output_kind(tmp_path / "a" / "b" / "c.json") == "evaluation"
    _gauntlet_store(tmp_path / "s.sqlite", [("m", __import__("rlgauntlet.gauntlet.protocols", fromlist=["x"])
                                             .get_protocol("classic").version, 1.0)])
    page = render_leaderboard(leaderboard([tmp_path / "s.sqlite"]), tmp_path / "new" / "deeper" / "board.html")
    assert output_kind(page) == "leaderboard page"
    # one whole IHDR chunk, then 2 bytes of the next chunk's length: cut inside a chunk header
    png = b"\x89PNG\r\n\x1a\n" + (13).to_bytes(4, "big") + b"IHDR" + b"\x00" * 17 + b"\x00\x00"
    (tmp_path / "cut.png").write_bytes(png)
    assert output_kind(tmp_path / "cut.png") is None
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert _same(tmp_path / "loop", tmp_path / "s.sqlite") is False


def test_the_checks_random_streams_are_pinned_apart_from_evaluation_episodes():
    """Each draw of the checks is the threat stream of episode 10⁶·(1 + its index) + k: pinned,
    so a change of the scheme (which changes every stored check) must be deliberate."""
    from rlgauntlet.common.seeding import episode_generator
    from rlgauntlet.gauntlet.checks import _DRAWS, _rng

    for index, draw in enumerate(_DRAWS):
        rng = _rng(7, 3, draw)
        for k in range(3):
            expected = torch.rand(4, generator=episode_generator(7, 1_000_000 * (1 + index) + k, "threat"))
            # bit-exact on purpose: the same stream drawn twice (uniform draws are element-wise conversions)
            torch.testing.assert_close(torch.rand(4, generator=rng.generators[k]), expected, rtol=0, atol=0)


def test_a_gradient_that_is_zero_in_one_input_only_has_not_vanished():
    """A linear policy that ignores one input: its gradient is zero there and not elsewhere, so
    it has not vanished (the check is on the largest coordinate); an all-zero one has."""
    import gymnasium as gym
    import torch.nn as nn

    from rlgauntlet.gauntlet.checks import GRADIENT_FLOOR, _gradient_vanishes
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.victims.torch_module import TorchVictim

    def victim(weight):
        net = nn.Linear(4, 2, bias=False).double()
        with torch.no_grad():
            net.weight.copy_(torch.tensor(weight, dtype=torch.float64))
        return TorchVictim(net, "q", gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2), budget_space="raw",
                           precision="float64")

    x = torch.randn(6, 4, dtype=torch.float64)
    attack = parse_threat("pgd:objective=minq,eps=0.1")
    partly = victim([[1.0, 0.0, 2.0, -1.0], [0.5, 0.0, -1.0, 1.0]])
    with torch.enable_grad():
        assert not _gradient_vanishes(attack, partly, x, 0).any()
        assert _gradient_vanishes(attack, victim([[0.0] * 4, [0.0] * 4]), x, 0).all()
    assert GRADIENT_FLOOR == 1e-12


def test_a_forward_that_wobbles_by_rounding_only_is_not_stochastic():
    """Output noise of 1e-8 (below the 1e-6 floor) is rounding, not dropout left on."""
    import gymnasium as gym
    import torch.nn as nn

    from rlgauntlet.envs import make_env
    from rlgauntlet.gauntlet.checks import WOBBLE_FLOOR, check_false_robustness
    from rlgauntlet.victims.torch_module import TorchVictim

    class Jitter(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 2).double()

        def forward(self, x):
            return self.net(x) + 1e-8 * torch.randn(x.shape[0], 2, dtype=x.dtype)

    torch.manual_seed(0)
    victim = TorchVictim(Jitter(), "q", gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2), budget_space="raw",
                         precision="float64")
    result = check_false_robustness(victim, lambda: make_env("CartPole-v1"), [("0.1", 0.1)], states=16)
    assert 0 < result["stochastic_forward_max_change"] < WOBBLE_FLOOR == 1e-6
    assert "stochastic_forward" not in {w["check"] for w in result["warnings"]}


def test_the_vanishing_gradient_check_needs_more_than_half_the_states():
    from rlgauntlet.gauntlet.checks import vanishing_gradient_holds

    assert [vanishing_gradient_holds(f) for f in (0.0, 0.5, 0.5001, 1.0)] == [False, False, True, True]


def test_a_foreign_file_in_the_gauntlet_cache_is_never_replaced(tmp_path):
    from rlgauntlet.common.outputs import write_json
    from rlgauntlet.gauntlet.cache import CACHE_KIND, cached

    theirs = tmp_path / "checks.json"
    theirs.write_text('{"notes": 1}')
    with pytest.raises(UserError, match="not a cache file"):
        cached(theirs, lambda: {"computed": True})
    assert theirs.read_text() == '{"notes": 1}'
    ours = tmp_path / "certified.json"
    assert cached(ours, lambda: {"rows": [1]}) == {"rows": [1]}
    assert cached(ours, lambda: pytest.fail("computed again")) == {"rows": [1]}  # read back, not recomputed
    write_json(tmp_path / "other.json", {"x": 1}, kind="evaluation")
    with pytest.raises(UserError):
        cached(tmp_path / "other.json", lambda: {})
    assert CACHE_KIND == "gauntlet cache"


#: recipe fields added after the digests were recorded, with the value every earlier recipe has: a
#: recipe counts one only when it sets it (so adding a field changes no recorded recipe)
ADDED_LATER = {"push_share": 0.0, "select_clean_min": None, "validate_clean_episodes": 0, "validate_push_episodes": 0, "push_eps_fractions": (1.0,),
               "push_temperature": None, "adversary_recurrent": False, "validate_confirm_episodes": 0,
               "validate_finalists": 0, "select_with_training_return": True}


def _recipe_digests() -> dict[str, str]:
    """sha256 of every training preset's recipe (schedules by their value at the start, notes left out)."""
    import dataclasses
    import hashlib

    from rlgauntlet.training.recipes import ATLA_PRESETS
    from rlgauntlet.training.recipes import PRESETS

    def plain(value):
        if callable(value) and not isinstance(value, type):
            return f"schedule(1.0)={value(1.0)!r}"
        if isinstance(value, type):
            return value.__qualname__
        return repr(value)

    out = {}
    for name, preset in {**PRESETS, **ATLA_PRESETS}.items():
        recipe = {k: v for k, v in dataclasses.asdict(preset).items() if k not in ("notes", "source")
                  and not (k in ADDED_LATER and v == ADDED_LATER[k])}
        text = json.dumps(recipe, sort_keys=True, default=plain)
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


RECIPES = Path(__file__).with_name("recipe_digests.json")


def test_every_training_recipe_is_the_recorded_one():
    """A zoo agent's manifest records the command that trained it (`train --preset NAME`): a recipe
    changed under the same name would make that command train another agent. Change a recipe
    deliberately: give it a new preset name, or regenerate tests/recipe_digests.json
    (`python -c "import sys; sys.path.insert(0, 'tests'); import test_audit_v3 as t; t.write_recipe_digests()"`) in the same commit."""
    recorded = json.loads(RECIPES.read_text())
    now = _recipe_digests()
    changed = sorted(name for name in recorded if name in now and recorded[name] != now[name])
    assert not changed, f"recipes changed under their recorded names: {changed}"
    assert set(now) >= set(recorded), f"presets removed: {sorted(set(recorded) - set(now))}"


def write_recipe_digests() -> None:
    RECIPES.write_text(json.dumps(_recipe_digests(), indent=1, sort_keys=True) + "\n")


def test_a_pickled_buffer_loads_with_allow_pickle_and_a_checkpoint_missing_a_part_is_refused(tmp_path):
    """--allow-pickle resumes an earlier version's pickled buffer (and says it did); a checkpoint
    zip without its optimizer state is refused, never resumed with a fresh optimizer."""
    import zipfile

    from stable_baselines3 import DQN

    from rlgauntlet.training.checkpoints import load_checkpoint_zip, load_replay_buffer

    def build():
        return DQN("MlpPolicy", "CartPole-v1", buffer_size=50, learning_starts=1000, seed=0,
                   policy_kwargs={"net_arch": [8]})

    model = build()
    model.learn(20)
    model.save_replay_buffer(tmp_path / "replay_buffer.pkl")  # our own file, written by this test
    fresh = build()
    assert load_replay_buffer(fresh, tmp_path, allow_pickle=True) is True
    assert fresh.replay_buffer.pos == model.replay_buffer.pos
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as zin, zipfile.ZipFile(tmp_path / "partial.zip", "w") as zout:
        for item in zin.infolist():
            if item.filename != "policy.optimizer.pth":
                zout.writestr(item, zin.read(item.filename))
    with pytest.raises(UserError, match="does not fit this recipe"):
        load_checkpoint_zip(build(), tmp_path / "partial.zip")


def test_the_checks_states_are_every_other_step_of_8_episodes_side_by_side_and_256_by_default():
    """collect_states keeps the inputs of every second step (so the states spread over time), in
    the order the engine meets them; check_false_robustness looks at 256 of them by default."""
    import inspect

    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env
    from rlgauntlet.experiments.agents import load_for_env
    from rlgauntlet.gauntlet.checks import check_false_robustness, collect_states

    victim, preset = load_for_env("zoo:cartpole-dqn", "CartPole-v1")
    every = []

    def record(x):
        every.append(x.detach().clone())
        return len(every) >= 8

    evaluate_episodes(lambda: make_env("CartPole-v1", preset), victim, None, range(64), 3, n_envs=8, on_inputs=record)
    expected = torch.cat(every[1::2])[:24]
    # bit-exact on purpose: a selection of the same episodes' inputs, no arithmetic between them
    torch.testing.assert_close(collect_states(victim, lambda: make_env("CartPole-v1", preset), 3, 24), expected,
                               rtol=0, atol=0)
    assert inspect.signature(check_false_robustness).parameters["states"].default == 256


def test_the_checks_paired_gaps_are_the_differences_of_the_same_states():
    from rlgauntlet.gauntlet.checks import paired_gaps

    attack = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    strong = torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    random = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    gaps = paired_gaps(attack, strong, random)
    for name, diff in (("attack_vs_random", attack - random), ("gain", strong - attack),
                       ("strong_vs_random", strong - random)):
        assert gaps[name] == pytest.approx((float(diff.mean()), float(stats.sem(diff.numpy())))), name
    assert gaps["strong_vs_random"][0] == pytest.approx(-0.25)  # not the sum of the two objectives


# --- the gauntlet's own mutation check follow-ups ----------------------------------------------------

def _task(tmp_path, method="paad", steps=1000):
    from rlgauntlet.gauntlet.plan import AttackerTask

    return AttackerTask(AgentSpec(agent="zoo:cartpole-dqn"), "CartPole-v1", method, "0.1", 0.1, 0, steps,
                        str(tmp_path / method))


def test_an_attacker_is_done_only_at_its_full_budget_and_with_a_readable_manifest(tmp_path):
    paad, sarsa = _task(tmp_path), _task(tmp_path, "robust-sarsa")
    assert not paad.done() and not sarsa.done()  # no manifest yet
    for task, steps, done in ((paad, 999, False), (paad, 1000, True), (paad, 1500, True), (sarsa, 1, True)):
        Path(task.folder).mkdir(exist_ok=True)
        (Path(task.folder) / "manifest.json").write_text(json.dumps({"steps": steps}))
        assert task.done() is done, (task.method, steps)
    (Path(paad.folder) / "manifest.json").write_text("{not json")
    assert paad.done() is False


def _tiny_plan(tmp_path, **changes):
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.gauntlet.plan import GauntletPlan
    from rlgauntlet.gauntlet.protocols import get_protocol

    fields = dict(protocol=get_protocol("classic"), level="quick", spec=AgentSpec(agent="zoo:cartpole-dqn"),
                  env="CartPole-v1", preset="classic", victim=SimpleNamespace(description={}, budget_space="raw"),
                  sha="ab" * 32, seeds=[3, 4], store=tmp_path / "g.sqlite", heuristics=[], natural=[], shifts=[],
                  skipped=[], tasks=[], learned=[], labels={})
    fields.update(changes)
    return GauntletPlan(**fields)


def test_the_gauntlets_cells_are_greedy_with_impact_on_its_seeds(tmp_path):
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.experiments.store import store_of

    from rlgauntlet.experiments.evaluations import checked_threats

    spec = AgentSpec(agent="zoo:cartpole-dqn")
    victim, preset = spec.load("CartPole-v1")
    parsed = dict(zip(["random:eps=0.1"], checked_threats(["random:eps=0.1"], victim, "CartPole-v1", preset)))
    plan = _tiny_plan(tmp_path, spec=spec, victim=victim, preset=preset, heuristics=["random:eps=0.1"], parsed=parsed)
    with store_of(None) as store:  # in memory
        cell_sets = plan.cells(store, ["random:eps=0.1"])
        with pytest.raises(KeyError, match="not in the plan"):  # the frozen plan parses nothing after planning
            plan.cells(store, ["random:eps=0.2"])
    assert [c.seed for c in cell_sets] == [3, 4]
    for cells in cell_sets:
        assert [c.label for c in cells.cells] == ["clean", "random:eps=0.1", "argmin_agent"]  # impact: the argmin agent
        assert all(c.deterministic for c in cells.cells) and cells.episodes == plan.settings.episodes
        assert all(todo == list(range(plan.settings.episodes)) for todo in cells.missing.values())
    assert plan.parsed["random:eps=0.1"] is cell_sets[0].threats["random:eps=0.1"]  # parsed once, by the plan


def test_certification_off_in_the_protocol_is_unavailable_with_its_reason(tmp_path):
    import dataclasses

    from rlgauntlet.gauntlet.run import certified_summary

    plan = _tiny_plan(tmp_path)
    plan = dataclasses.replace(plan, protocol=dataclasses.replace(plan.protocol, certify=False))
    assert certified_summary(plan) == {"available": False, "reason": "the protocol certifies nothing"}


def test_one_episode_has_a_zero_standard_error_not_nan():
    from rlgauntlet.gauntlet.summary import pool_episodes

    rows = pool_episodes([{"evaluations": [{"spec": "clean", "returns": [7.0], "return_mean": 7.0}]}], lambda s: s)
    assert rows["clean"]["return_sem"] == 0.0 and rows["clean"]["return_mean"] == 7.0


def test_a_natural_rows_impact_is_the_mean_over_seeds(tmp_path):
    from rlgauntlet.gauntlet.outcome import Outcome
    from rlgauntlet.gauntlet.summary import summarise

    spec, other = "brightness_contrast:alpha=1.2", "rotation:degrees=3"
    plan = _tiny_plan(tmp_path, natural=[spec, other], labels={spec: spec, other: other})
    reports = [{"evaluations": [{"spec": "clean", "returns": [10.0, 10.0], "return_mean": 10.0},
                                {"spec": spec, "returns": [5.0], "return_mean": 5.0, "impact": impact},
                                {"spec": other, "returns": [9.0], "return_mean": 9.0, "impact": 0.1}]}
               for impact in (0.2, 0.6)]
    summary = summarise(Outcome(plan), reports, None)
    row, second = summary["natural"]["rows"]
    assert row["impact"] == pytest.approx(0.4) and second["impact"] == pytest.approx(0.1)  # means over seeds
    assert summary["natural"]["impact_mean"] == pytest.approx(0.25)  # and over the suite's rows
    assert (row["return_drop"], second["return_drop"]) == pytest.approx((0.5, 0.1))
    assert summary["natural"]["return_drop_mean"] == pytest.approx(0.3)


def test_a_recorded_gauntlet_keeps_only_the_load_options_that_were_set(tmp_path):
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.experiments.store import ResultsStore
    from rlgauntlet.gauntlet.summary import record_result

    out = {"agent": {"method": "m"}, "clean": {"return_mean": 1.0}, "worst_case": [],
           "natural": {"impact_mean": None, "return_drop_mean": 0.0}, "certified": {}, "warnings": [], "seconds": 1.0}
    record_result(_tiny_plan(tmp_path), out)
    record_result(_tiny_plan(tmp_path, store=tmp_path / "h.sqlite",
                             spec=AgentSpec(agent="zoo:cartpole-dqn", allow_pickle=True, kind="q")), out)
    metas = []
    for name in ("g.sqlite", "h.sqlite"):
        store = ResultsStore(tmp_path / name)
        [(_, meta)] = store.runs("gauntlet")
        metas.append(meta["load_options"])
        store.close()
    assert metas == [{}, {"allow_pickle": True, "kind": "q"}]


def test_every_cached_result_and_attacker_of_an_agent_shares_its_folder(tmp_path):
    from rlgauntlet.gauntlet import plan_gauntlet
    from rlgauntlet.gauntlet.cache import cache_file

    plan = plan_gauntlet("zoo:pendulum-td3", "Pendulum-v1", level="quick", store=tmp_path / "g.sqlite")
    folders = {Path(t.folder).parent for t in plan.tasks}
    assert folders == {cache_file(plan, "checks").parent} == {cache_file(plan, "certified").parent}
    assert cache_file(plan, "checks").parent.parent.name == plan.sha[:16]
    methods = {t.method for t in plan.tasks}
    assert "robust-sarsa" in methods
    for t in plan.tasks:
        assert Path(t.folder).name.startswith(f"{t.method}-{'q' if t.method == 'robust-sarsa' else 'eps'}")


def test_robust_sarsa_trains_once_at_the_headline_and_is_judged_at_every_learned_eps(tmp_path):
    """classic at standard learns at every ε of the grid: PA-AD and SA-RL train once per ε,
    Robust Sarsa once (at the headline ε) and its Q function is evaluated at every ε."""
    from rlgauntlet.gauntlet import plan_gauntlet

    plan = plan_gauntlet("zoo:pendulum-td3", "Pendulum-v1", level="standard", seeds=[0], store=tmp_path / "g.sqlite")
    grid, headline = list(plan.protocol.eps_grid), plan.protocol.headline_eps
    by_method = {}
    for t in plan.tasks:
        by_method.setdefault(t.method, []).append(t.eps)
    assert by_method["robust-sarsa"] == [headline]
    assert sorted(set(by_method["paad"])) == sorted(grid)
    assert sorted(label for label in plan.labels.values() if label.startswith("robust_sarsa")) == \
        sorted(f"robust_sarsa:eps={e}" for e in grid)


def test_strongest_of_groups_are_per_budget_and_need_two_attacks(tmp_path):
    import dataclasses

    from rlgauntlet.gauntlet.outcome import Outcome

    plan = _tiny_plan(tmp_path, heuristics=["random:eps=0.05", "pgd:steps=10,eps=0.05", "random:eps=0.1",
                                            "pgd:steps=10,eps=0.2", "random:eps=0.2"])
    plan = dataclasses.replace(plan, protocol=dataclasses.replace(plan.protocol, eps_grid=("0.05", "0.1", "0.2")))
    assert Outcome(plan).strongest_groups() == [["random:eps=0.05", "pgd:steps=10,eps=0.05"],
                                       ["pgd:steps=10,eps=0.2", "random:eps=0.2"]]  # 0.1 has one attack: no group


def test_a_gauntlet_certifies_a_boundable_agent_and_says_so(tmp_path):
    from rlgauntlet.gauntlet import plan_gauntlet
    from rlgauntlet.gauntlet.run import certified_summary

    plan = plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", seeds=[0], store=tmp_path / "g.sqlite")
    result = certified_summary(plan)
    assert result["available"] is True and result["seed"] == 0  # a flag and an integer seed: no float here
    assert [r["eps"] for r in result["rows"]] == list(plan.protocol.eps_grid)
    assert all(0.0 <= r["acr"] <= 1.0 for r in result["rows"])
