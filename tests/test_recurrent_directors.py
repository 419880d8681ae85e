"""Recurrent directors (issue: the gauntlet at least as strong as the papers' own attackers): a
PA-AD or SA-RL director that is an LSTM (sb3-contrib RecurrentPPO) remembers the episode; trained
by attack-train --recurrent, applied by the learned threats with one memory per episode."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("sb3_contrib")

from rlgauntlet.engine.rollout import evaluate_episodes  # noqa: E402
from rlgauntlet.errors import UserError  # noqa: E402
from rlgauntlet.experiments.attacker_job import train_attacker  # noqa: E402
from rlgauntlet.threats import parse_threat  # noqa: E402
from rlgauntlet.victims import load_victim  # noqa: E402


@pytest.fixture(scope="module")
def recurrent_attacker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("attacker") / "paad-lstm"
    manifest = train_attacker("zoo:cartpole-ppo", "CartPole-v1", "paad", eps=0.1, steps=512, run_dir=folder, seed=0,
                              eval_episodes=0, log=lambda line: None, recurrent=True,
                              hyperparams=dict(n_envs=2, policy="MlpPolicy", n_steps=128, batch_size=64, n_epochs=2,
                                               learning_rate=3e-4, gamma=0.99, policy_kwargs=dict(net_arch=[16])))
    return folder, manifest


def test_a_recurrent_director_is_recorded_and_loads_as_an_lstm(recurrent_attacker):
    folder, manifest = recurrent_attacker
    written = json.loads((folder / "manifest.json").read_text())
    assert written["recurrent"] is True and manifest["hyperparams"]["policy"] == "MlpLstmPolicy"
    threat = parse_threat(f"paad:attacker={folder},eps=0.1")
    assert threat.director.recurrent and threat.director.initial_state()[0].shape == (1, 64)


def test_the_director_acts_as_recurrent_ppo_does_through_an_episode(recurrent_attacker):
    """Known answer: the director's own predict, its state carried, on the clean inputs of an
    episode; the threat's director_actions with its per-episode memory give the same actions."""
    from sb3_contrib import RecurrentPPO

    from rlgauntlet.threats.base import Memory

    folder, _ = recurrent_attacker
    threat = parse_threat(f"paad:attacker={folder},eps=0.1")
    own = RecurrentPPO.load(folder / "attacker.zip", device="cpu")
    victim = load_victim("zoo:cartpole-ppo")
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    state, start = None, np.ones(1, dtype=bool)
    memory = Memory([threat.new_state()], torch.zeros(1, dtype=torch.long))
    for _ in range(30):
        x = victim.preprocess(obs[None])
        expected, state = own.predict(x.numpy().astype(np.float32), state=state, episode_start=start, deterministic=True)
        got = threat.director_actions(x, memory)
        np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)
        start = np.zeros(1, dtype=bool)
        obs, _, terminated, truncated, _ = env.step(int(victim.act(obs[None])[0]))
        if terminated or truncated:
            break


def test_one_memory_per_episode_whatever_the_envs(recurrent_attacker):
    folder, _ = recurrent_attacker
    victim = load_victim("zoo:cartpole-ppo")
    threat = parse_threat(f"paad:attacker={folder},eps=0.1")
    returns = {}
    for n_envs in (1, 3):
        records = evaluate_episodes(lambda: gym.make("CartPole-v1"), victim, threat, [0, 1, 2], 5, n_envs, True)
        returns[n_envs] = [r.episode_return for r in sorted(records, key=lambda r: r.episode)]
        assert all(0.0 < r.linf_max <= 0.1 + 1e-9 for r in records)
    assert returns[1] == returns[3]


def test_a_recurrent_director_needs_the_engine_and_robust_sarsa_has_none(recurrent_attacker, tmp_path):
    folder, _ = recurrent_attacker
    threat = parse_threat(f"paad:attacker={folder},eps=0.1")
    victim = load_victim("zoo:cartpole-ppo")
    with pytest.raises(UserError, match="runs in the rollout engine only"):
        threat.perturb(victim.preprocess(np.zeros((1, 4), dtype=np.float32)), victim, None)
    with pytest.raises(UserError, match="--recurrent is for a director"):
        train_attacker("zoo:hopper-ppo", "Hopper-v5", "robust-sarsa", eps=0.075, steps=10, run_dir=tmp_path / "q",
                       recurrent=True)


def test_a_recurrent_director_with_the_two_rate_official_setting_is_refused_in_one_line(tmp_path):
    """--recurrent with --setting official (policy and value at rates of their own, which
    RecurrentPPO's one optimizer cannot give): refused naming the fix, and the fix works."""
    with pytest.raises(UserError, match="use the default director setting") as caught:
        train_attacker("zoo:hopper-ppo", "Hopper-v5", "sarl", eps=0.075, steps=10, run_dir=tmp_path / "a",
                       recurrent=True, setting="official", eval_episodes=0, log=lambda line: None)
    assert "\n" not in str(caught.value)
    from rlgauntlet.training.attackers.attack_train import director_settings, recurrent_settings

    fixed = recurrent_settings(director_settings("Hopper-v5", "default"))
    assert fixed["policy"] == "MlpLstmPolicy" and fixed["policy_kwargs"]["lstm_hidden_size"] == 64


def test_an_lstm_director_finds_the_attack_that_needs_memory_where_a_memoryless_one_cannot(tmp_path):
    """Known answer (tests/memory_task.py): on the cue task the optimal attack takes the victim to
    1 and any director without memory to 2 at best (its input after the cue is always 0). The
    LSTM SA-RL director reaches the optimum; the memoryless one, trained the same way, stays at
    its provable floor."""
    from memory_task import CLEAN_RETURN, ENV_ID, MEMORYLESS_FLOOR, OPTIMAL_ATTACK, CueVictim, register_cue

    from rlgauntlet.training.attackers.attack_train import attacker_config, learn_attacker

    register_cue()
    victim = CueVictim()
    settings = dict(n_envs=8, policy="MlpPolicy", n_steps=32, batch_size=128, n_epochs=4, learning_rate=3e-3,
                    gamma=0.99, gae_lambda=0.95, ent_coef=0.0, clip_range=0.2, policy_kwargs=dict(net_arch=[16]))
    seeds = list(range(20))  # 10 of each cue
    means = {}
    for recurrent, steps in ((True, 12_000), (False, 4_000)):
        folder = tmp_path / f"sarl-{recurrent}"
        config = attacker_config("sarl", ENV_ID, 0.1, 0, None, victim, recurrent=recurrent)
        learn_attacker(victim, config, steps, folder, hyperparams=settings, log=lambda line: None)
        (folder / "manifest.json").write_text(json.dumps({
            "method": "sarl", "variant": "sarl", "eps": 0.1, "env": ENV_ID, "budget_space": "raw",
            "victim": {"sha256": victim.description["sha256"], "vecnormalize_sha256": None}, "input_shape": [1]}))
        (folder / "checkpoint" / "model.zip").rename(folder / "attacker.zip")
        threat = parse_threat(f"sarl:attacker={folder},eps=0.1")
        assert threat.director.recurrent is recurrent
        records = evaluate_episodes(lambda: gym.make(ENV_ID), victim, threat, seeds, 1, 4, True)
        means[recurrent] = float(np.mean([r.episode_return for r in records]))
        assert all(r.linf_max <= 0.1 + 1e-6 for r in records)
    clean = evaluate_episodes(lambda: gym.make(ENV_ID), victim, None, seeds, 1, 4, True)
    assert np.mean([r.episode_return for r in clean]) == CLEAN_RETURN
    assert means[True] == pytest.approx(OPTIMAL_ATTACK)
    assert means[False] >= MEMORYLESS_FLOOR
