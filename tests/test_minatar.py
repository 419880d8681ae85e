"""MinAtar: the games as the package plays them, channel-first image frames, seeding,
snapshots, and the MinAtar paper's DQN network loaded as data and bounded by IBP."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlgauntlet.envs import make_env, restore, snapshot
from rlgauntlet.envs.minatar import MAX_EPISODE_STEPS

BREAKOUT = "MinAtar/Breakout-v1"


@pytest.mark.parametrize("game", ["breakout", "space_invaders"])
def test_frames_are_the_packages_own_game_transposed_to_channel_first_images(game):
    """An independent reference: the package's ``Environment`` seeded alike and given the same
    (minimal-set) actions has the same state, reward and end, step by step."""
    from minatar import Environment

    env_id = {"breakout": BREAKOUT, "space_invaders": "MinAtar/SpaceInvaders-v1"}[game]
    env = make_env(env_id)
    obs, _ = env.reset(seed=7)
    reference = Environment(game)
    reference.seed(7)
    reference.reset()
    actions = env.unwrapped.action_set
    rng = np.random.default_rng(0)
    for _ in range(300):
        expected = np.transpose(reference.state(), (2, 0, 1)).astype(np.uint8) * 255
        np.testing.assert_array_equal(obs, expected)  # bit-exact: the same booleans, copied
        a = int(rng.integers(len(actions)))
        obs, reward, terminated, truncated, _ = env.step(a)
        ref_reward, ref_done = reference.act(actions[a])
        assert (reward, terminated, truncated) == (ref_reward, ref_done, False)
        if terminated:
            break


def test_minimal_action_sets_and_the_step_limit():
    assert make_env(BREAKOUT).action_space.n == 3 and make_env("MinAtar/SpaceInvaders-v1").action_space.n == 4
    env = make_env(BREAKOUT)
    assert env.spec.max_episode_steps == MAX_EPISODE_STEPS


def _trajectory(env, seed: int, steps: int = 200) -> list:
    obs, _ = env.reset(seed=seed)
    out, rng = [obs], np.random.default_rng(1)
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        out.append(obs)
        if terminated or truncated:
            obs, _ = env.reset()
    return out


def test_episode_seeds_fix_the_game_and_differ_between_seeds():
    a, b, c = (_trajectory(make_env("MinAtar/SpaceInvaders-v1"), s) for s in (3, 3, 4))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))  # bit-exact: same seed, same game
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_snapshot_restores_the_game_and_its_random_state():
    env = make_env("MinAtar/Asterix-v1")  # enemies and sticky actions draw from the game's RandomState
    env.reset(seed=2)
    for _ in range(20):
        env.step(0)
    snap = snapshot(env)
    rng = np.random.default_rng(5)
    actions = [int(rng.integers(env.action_space.n)) for _ in range(100)]

    def play():
        return [env.step(a)[:3] for a in actions]

    first = play()
    restore(env, snap)
    second = play()
    assert all(np.array_equal(x[0], y[0]) and x[1:] == y[1:] for x, y in zip(first, second))  # bit-exact replay


def test_the_papers_dqn_loads_as_data_acts_like_sb3_and_is_bounded_soundly(tmp_path, monkeypatch):
    import cloudpickle
    import stable_baselines3 as sb3

    from rlgauntlet.bounds import ibp
    from rlgauntlet.envs import make_train_vec_env
    from rlgauntlet.training.recipes import PRESETS
    from rlgauntlet.victims import load_victim

    recipe = dict(PRESETS["minatar-breakout-dqn"].hyperparams)
    recipe.update(learning_starts=50, buffer_size=1000)
    model = sb3.DQN(recipe.pop("policy"), make_train_vec_env(BREAKOUT, 1, 0), seed=0, device="cpu", **recipe)
    model.learn(300)
    model.save(tmp_path / "dqn.zip")
    conv = model.q_net.features_extractor.cnn[0]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size) == (4, 16, (3, 3))
    assert model.q_net.features_extractor.linear[0].out_features == 128

    def refuse(*args, **kwargs):
        raise AssertionError("unpickled a field of the agent file")

    monkeypatch.setattr(cloudpickle, "loads", refuse)
    victim = load_victim(f"sb3:{tmp_path / 'dqn.zip'}", precision="float32")
    assert victim.budget_space == "pixel01" and victim.input_bounds == (0.0, 1.0)
    env = make_env(BREAKOUT)
    frames = np.stack(_trajectory(env, 0, 63))
    expected, _ = model.predict(frames, deterministic=True)
    np.testing.assert_array_equal(victim.act(frames), expected)
    x = victim.preprocess(frames)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        nominal = victim.forward(x).q
        lower0, upper0 = ibp(victim, x, 0.0)
        torch.testing.assert_close(lower0, nominal, rtol=1e-5, atol=1e-5)  # float32 rounding only
        lower, upper = ibp(victim, x, 0.1)
        for _ in range(20):
            noisy = (x + (torch.rand(x.shape, generator=g) * 2 - 1) * 0.1).clamp(0, 1)
            q = victim.forward(noisy).q
            assert bool((q >= lower - 1e-5).all()) and bool((q <= upper + 1e-5).all())


def test_an_attack_on_minatar_frames_keeps_its_pixel01_budget(tmp_path):
    import stable_baselines3 as sb3

    from rlgauntlet.envs import make_train_vec_env
    from rlgauntlet.experiments.evaluate import evaluate
    from rlgauntlet.training.recipes import PRESETS

    recipe = dict(PRESETS["minatar-breakout-dqn"].hyperparams)
    recipe.update(learning_starts=50, buffer_size=1000)
    model = sb3.DQN(recipe.pop("policy"), make_train_vec_env(BREAKOUT, 1, 0), seed=0, device="cpu", **recipe)
    model.learn(100)
    model.save(tmp_path / "dqn.zip")
    report = evaluate(f"sb3:{tmp_path / 'dqn.zip'}", BREAKOUT, threats=["pgd:eps=0.1,steps=3"], episodes=2,
                      n_envs=2, impact=False)
    attacked = report.evaluations[1]
    assert attacked["budget_space"] == "pixel01" and 0 < attacked["linf_max"] <= 0.1 + 1e-6


def test_a_pa_ad_director_trains_on_minatar_with_the_papers_network(tmp_path):
    """The MinAtar director setting: the MinAtar CNN (the Nature CNN's 8×8 stride-4 kernel
    does not fit 10×10 frames), recorded by name as plain data, and an actor in budget."""
    import json

    import stable_baselines3 as sb3

    from rlgauntlet.envs import make_train_vec_env
    from rlgauntlet.experiments.attacker_job import train_attacker
    from rlgauntlet.training.recipes import PRESETS

    recipe = dict(PRESETS["minatar-breakout-dqn"].hyperparams)
    recipe.update(learning_starts=50, buffer_size=1000)
    model = sb3.DQN(recipe.pop("policy"), make_train_vec_env(BREAKOUT, 1, 0), seed=0, device="cpu", **recipe)
    model.save(tmp_path / "dqn.zip")
    run = tmp_path / "paad"
    manifest = train_attacker(f"sb3:{tmp_path / 'dqn.zip'}", BREAKOUT, "paad", 3 / 255, 1024, run, eval_episodes=0,
                              log=lambda line: None)
    progress = json.loads((run / "checkpoint" / "progress.json").read_text())
    assert progress["hyperparams"]["policy_kwargs"]["features_extractor_class"] == "MinAtarCNN"
    state = torch.load(run / "checkpoint" / "policy.pt", weights_only=True)
    assert tuple(state["features_extractor.cnn.0.weight"].shape) == (16, 4, 3, 3)
    assert manifest["variant"] == "stochastic"


def test_sticky_actions_as_a_world_shift_known_answer():
    """At sticky_action_prob = 1 the game repeats its first last action (no-op) forever, so
    any policy plays the no-op game; the default 0.1 comes back when the episode ends."""
    from minatar import Environment

    from rlgauntlet.threats import parse_threat

    env = make_env(BREAKOUT)
    threat = parse_threat("physics:param=sticky_action_prob,value=1")
    record = threat.enter_world(env)
    assert record["default"] == pytest.approx(0.1) and record["value"] == pytest.approx(1.0)
    obs, _ = env.reset(seed=3)
    reference = Environment("breakout")
    reference.seed(3)
    reference.reset()
    rng = np.random.default_rng(0)
    for _ in range(200):
        np.testing.assert_array_equal(obs, np.transpose(reference.state(), (2, 0, 1)).astype(np.uint8) * 255)
        obs, reward, terminated, _, _ = env.step(int(rng.integers(3)))
        assert (reward, terminated) == reference.act(0)
        if terminated:
            break
    threat.exit_world(env)
    assert env.unwrapped.game.sticky_action_prob == pytest.approx(0.1)


def test_episode_returns_do_not_depend_on_the_number_of_envs():
    """Episode k is the same game on any env, whatever it played before: the package carries
    the previous episode's last action into the next for its sticky actions, which the
    adapter resets (with it, the zoo agent's 20-episode mean read 12.0 on 4 envs, 12.2 on 20)."""
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.victims import load_victim

    victim = load_victim("zoo:minatar-breakout-dqn")
    returns = {}
    for n_envs in (4, 20):
        records = evaluate_episodes(lambda: make_env(BREAKOUT), victim, None, range(20), 0, n_envs=n_envs)
        returns[n_envs] = sorted((r.episode, r.episode_return, r.length) for r in records)
    assert returns[4] == returns[20]  # exact: the same games, step by step
