"""Rollout engine: seeding invariance, perturbation records, bad observations."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import TorchVictim, load_victim


def _returns(records):
    return [r.episode_return for r in sorted(records, key=lambda r: r.episode)]


@pytest.mark.parametrize("deterministic", [True, False])
def test_episode_results_do_not_depend_on_n_envs(tiny_models, deterministic):
    victim = load_victim(f"sb3:{tiny_models['ppo_cont']}")
    threat = parse_threat("gaussian_noise:std=0.3,p=0.5")
    runs = {
        n: sorted(
            (r.episode, r.episode_return, r.length, r.perturbed_steps, r.action_changes, r.linf_sum)
            for r in evaluate_episodes(lambda: make_env("Pendulum-v1"), victim, threat, range(5), seed=7,
                                       n_envs=n, deterministic=deterministic)
        )
        for n in (1, 3, 5)
    }
    assert runs[1] == runs[3] == runs[5]
    assert len({r[1] for r in runs[1]}) > 1  # episodes differ from one another


def test_cli_n_envs_1_and_4_identical_per_episode_returns(tiny_models, tmp_path, cli_env):
    outs = []
    for n in (1, 4):
        out = tmp_path / f"n{n}.json"
        subprocess.run(
            [sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", f"sb3:{tiny_models['dqn']}",
             "--env", "CartPole-v1", "--threat", "uniform_noise:eps=0.05,p=0.5", "--episodes", "6",
             "--seed", "3", "--n-envs", str(n), "--out", str(out)],
            check=True, capture_output=True, env=cli_env,
        )
        outs.append(json.loads(out.read_text()))
    for a, b in zip(outs[0]["evaluations"], outs[1]["evaluations"]):
        assert a["returns"] == b["returns"]
        assert a["lengths"] == b["lengths"]


def test_same_seed_same_numbers_different_seed_different(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['sac']}")
    run = lambda seed: _returns(evaluate_episodes(lambda: make_env("Pendulum-v1"), victim, None, range(3), seed))  # noqa: E731
    assert run(1) == run(1)
    assert run(1) != run(2)


def test_zero_noise_is_recorded_as_perturbed_but_unchanged(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['ppo']}")
    (rec,) = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, parse_threat("gaussian_noise:std=0"), [0], 0)
    assert rec.perturbed_steps == rec.length and rec.action_changes == 0 and rec.linf_max == 0.0


def test_noise_is_applied_and_measured(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['ppo']}")
    (rec,) = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, parse_threat("uniform_noise:eps=0.5"), [0], 0)
    assert rec.perturbed_steps == rec.length
    assert 0.25 < rec.linf_sum / rec.perturbed_steps <= 0.5  # E[max of 4 |U(-.5,.5)|] = 0.4
    assert rec.linf_max <= 0.5 + 1e-6


def test_schedule_p_perturbs_about_p_of_steps(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['sac']}")
    recs = evaluate_episodes(lambda: make_env("Pendulum-v1"), victim, parse_threat("gaussian_noise:std=0.1,p=0.3"), range(4), 0, n_envs=4)
    steps = sum(r.length for r in recs)
    frac = sum(r.perturbed_steps for r in recs) / steps
    # 800 Bernoulli(0.3) draws: 4.5 standard deviations ≈ 0.073
    assert abs(frac - 0.3) < 0.073


class NaNAfter(gym.Wrapper):
    def __init__(self, env, after):
        super().__init__(env)
        self.after, self.t = after, 0

    def reset(self, **kw):
        self.t = 0
        return self.env.reset(**kw)

    def step(self, a):
        obs, r, term, trunc, info = self.env.step(a)
        self.t += 1
        if self.t >= self.after and self.unwrapped.np_random_seed == 2:
            obs = obs * np.nan
        return obs, r, term, trunc, info


def test_nan_observations_raise_clear_error_and_keep_finished_episodes():
    env = make_env("CartPole-v1")
    net = nn.Sequential(nn.Linear(4, 2))
    victim = TorchVictim(net, "q", env.observation_space, env.action_space)
    finished = []
    with pytest.raises(UserError, match=r"non-finite observations .* episode\(s\) \[2\]"):
        evaluate_episodes(lambda: NaNAfter(make_env("CartPole-v1"), 3), victim, None, range(4), seed=0,
                          on_episode=finished.append)
    assert [r.episode for r in finished] == [0, 1]


def test_action_change_every_k_estimates_the_rate_with_fewer_checks(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['ppo']}")
    threat = parse_threat("uniform_noise:eps=0.3")
    full = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, threat, range(4), 0, n_envs=4)
    sampled = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, threat, range(4), 0, n_envs=4,
                                action_change_every=5)
    assert [r.episode_return for r in full] == [r.episode_return for r in sampled]  # acting is unchanged
    assert all(r.action_checks == r.perturbed_steps for r in full)
    assert all(r.action_checks == -(-r.length // 5) for r in sampled)  # steps 0, 5, 10, ...
    rate = lambda recs: sum(r.action_changes for r in recs) / sum(r.action_checks for r in recs)  # noqa: E731
    assert abs(rate(full) - rate(sampled)) < 0.1


def test_plain_gymnasium_env_returns_are_summed(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['sac']}")
    (with_preset,) = evaluate_episodes(lambda: make_env("Pendulum-v1"), victim, None, [0], seed=3)
    (plain,) = evaluate_episodes(lambda: gym.make("Pendulum-v1"), victim, None, [0], seed=3)
    assert plain.episode_return == pytest.approx(with_preset.episode_return) and plain.episode_return < 0


def test_episode_cut_by_an_outer_time_limit_does_not_leak_into_the_next():
    """With one env, episode k+1 must start a new game after a time limit cut episode k:
    the records equal those of each episode run on its own env."""
    env = make_env("PongNoFrameskip-v4")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4 * 84 * 84, 6))
    victim = TorchVictim(net, "categorical", env.observation_space, env.action_space)

    def capped():
        return gym.wrappers.TimeLimit(make_env("PongNoFrameskip-v4"), max_episode_steps=150)

    in_turn = evaluate_episodes(capped, victim, None, range(3), seed=0, n_envs=1, deterministic=False)
    alone = [evaluate_episodes(capped, victim, None, [k], seed=0, deterministic=False)[0] for k in range(3)]
    assert [(r.episode_return, r.length) for r in in_turn] == [(r.episode_return, r.length) for r in alone]
    assert all(r.length == 150 for r in in_turn)


def test_perceptual_every_is_part_of_a_runs_key_only_when_not_the_default(tiny_models):
    """Runs recorded before the option existed keep their keys (resume finds them); a run that
    sampled SSIM on other steps is another run."""
    from rlgauntlet.experiments.runs import run_identity
    from rlgauntlet.experiments.store import run_key

    victim = load_victim(f"sb3:{tiny_models['ppo']}")
    threat = parse_threat("uniform_noise:eps=0.3")
    default, _ = run_identity({"id": "CartPole-v1"}, victim, threat, 0)
    assert "perceptual_every" not in default
    assert run_identity({"id": "CartPole-v1"}, victim, threat, 0, perceptual_every=10)[0] == default
    never, _ = run_identity({"id": "CartPole-v1"}, victim, threat, 0, perceptual_every=0)
    assert never["perceptual_every"] == 0 and run_key(never) != run_key(default)
