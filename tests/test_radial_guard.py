"""RADIAL-PPO's guarded ε ramp: it advances one update's share of the ramp after a healthy
update, goes back as much after an unhealthy one, and its position survives a resume."""

import json
from collections import deque

import pytest
from stable_baselines3.common.logger import configure

from rlgauntlet.training.defences.radial import RadialPPO, radial_eps_at


def _model(**guard) -> RadialPPO:
    model = RadialPPO("MlpPolicy", "CartPole-v1", seed=0, radial_eps=1e-2, eps_start=1e-6, ramp_fraction=0.5,
                      n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=dict(net_arch=[16]), **guard)
    model.set_logger(configure(None, []))
    model._total_timesteps = 1280  # the ramp spans 640 steps: one 64-step update is a tenth of it
    return model


def test_the_guard_moves_the_ramp_by_one_updates_share_each_way_and_stays_in_0_1():
    model = _model(guard_max_width=1.0)
    model._current_progress_remaining = 1.0
    for _ in range(3):
        model._guard_ramp(width=0.5, steps=64)
    assert model.ramp_position == pytest.approx(0.3)
    model._guard_ramp(width=2.0, steps=64)  # bounds wider than the cap: one share back
    assert model.ramp_position == pytest.approx(0.2)
    assert model.current_eps() == pytest.approx(radial_eps_at(0.2, 1e-2, 1e-6))
    for _ in range(5):
        model._guard_ramp(width=2.0, steps=64)
    assert model.ramp_position == 0.0  # clamped at the start (np.clip returns the bound itself): ε = eps_start
    for _ in range(15):
        model._guard_ramp(width=None, steps=64)  # ε = 0: no bounds, nothing to hold the ramp back
    assert model.ramp_position == 1.0 and model.current_eps() == pytest.approx(1e-2)


def test_the_return_floor_holds_the_ramp_only_once_enough_episodes_are_known():
    model = _model(guard_min_return=20.0, guard_episodes=10)
    model._current_progress_remaining = 1.0
    model.ep_info_buffer = deque([{"r": 5.0, "l": 5}] * 9, maxlen=100)
    model._guard_ramp(width=123.0, steps=64)  # 9 < 10 episodes: the return is not known yet; no width cap
    assert model.ramp_position == pytest.approx(0.1)
    model.ep_info_buffer.append({"r": 5.0, "l": 5})
    model._guard_ramp(width=0.0, steps=64)  # mean 5 < 20: back
    assert model.ramp_position == pytest.approx(0.0)
    model.ep_info_buffer.extend([{"r": 25.0, "l": 25}] * 10)  # the last ten average 25
    model._guard_ramp(width=0.0, steps=64)
    assert model.ramp_position == pytest.approx(0.1)


def test_a_guard_no_network_meets_keeps_eps_at_its_start_through_training_and_a_loose_one_follows_the_ramp():
    strict = _model(guard_max_width=1e-12)
    strict.learn(256)
    assert strict.ramp_position == 0.0 and strict.current_eps() == pytest.approx(1e-6)
    loose = _model(guard_max_width=1e9)
    loose.learn(256)  # four healthy updates of 64 steps on a ramp over 128 steps (half of 256): at its end
    assert loose.ramp_position == pytest.approx(1.0)
    loose = _model(guard_max_width=1e9)
    loose.ramp_fraction = 2.0  # a ramp twice the budget: each healthy 64-step update of 640 is 1/20 of it
    loose.learn(640)
    # the ramp starts where the plain one stands at the first update (one rollout in: 1/20) and each of
    # the ten updates adds 1/20: the position after an update is the next update's, one rollout on
    assert loose.ramp_position == pytest.approx(11 / 20)
    assert loose.ramp_position == pytest.approx((loose.num_timesteps + 64) / (2.0 * 640))


def test_the_ramp_position_is_saved_in_progress_and_restored_on_resume(tmp_path):
    from rlgauntlet.training.checkpoints import resume

    model = _model(guard_max_width=1.0)
    model._current_progress_remaining = 1.0
    model.ramp_position = 0.37
    model.save(tmp_path / "model.zip")
    progress = {"num_timesteps": 0, "schedule": model.schedule_state()}
    assert progress["schedule"] == {"eps": pytest.approx(radial_eps_at(0.37, 1e-2, 1e-6)), "ramp_position": 0.37}
    fresh = _model(guard_max_width=1.0)
    resume(fresh, tmp_path, json.loads(json.dumps(progress)))
    # exact: a float survives a JSON round trip bit for bit (repr is shortest round-tripping)
    assert fresh.ramp_position == 0.37 and fresh.current_eps() == pytest.approx(model.current_eps())


def test_train_preset_writes_the_schedule_into_the_checkpoints_progress(tmp_path):
    from rlgauntlet.training.sb3_train import train_preset

    ckpt = train_preset("cartpole-radial-ppo", tmp_path / "run", total_timesteps=256, stop_at_target=False,
                        log=lambda message: None)
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["schedule"]["eps"] > 0 and progress["history"][-1]["schedule"] == progress["schedule"]


def test_the_greedy_floor_holds_the_ramp_while_the_sampled_return_is_high():
    model = _model(guard_min_return=20.0, guard_greedy_return=18.0)
    model._current_progress_remaining = 1.0
    model.ep_info_buffer = deque([{"r": 25.0, "l": 25}] * 10, maxlen=100)  # sampled games: healthy
    model._guard_ramp(width=0.0, steps=64)  # no greedy games yet: not held back
    assert model.ramp_position == pytest.approx(0.1)
    model.record_greedy_return(8.5)  # Pong's case: the greedy game fell, the sampled one did not
    model._guard_ramp(width=0.0, steps=64)
    assert model.ramp_position == pytest.approx(0.0)
    model.record_greedy_return(18.0)  # at the floor is healthy
    model._guard_ramp(width=0.0, steps=64)
    assert model.ramp_position == pytest.approx(0.1)
    state = json.loads(json.dumps(model.schedule_state()))
    assert state["greedy_return"] == 18.0
    fresh = _model(guard_min_return=20.0, guard_greedy_return=18.0)
    fresh.load_schedule_state(state)  # a resumed run remembers the last greedy games until it plays new ones
    assert fresh.greedy_return == 18.0 and fresh.ramp_position == pytest.approx(0.1)


def test_greedy_returns_play_env_i_from_seed_plus_i_as_a_lone_gymnasium_env_does():
    import gymnasium as gym
    from stable_baselines3 import PPO

    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.greedy_eval import greedy_returns

    model = PPO("MlpPolicy", "CartPole-v1", seed=3, policy_kwargs=dict(net_arch=[8]))  # untrained: games differ by seed
    games = make_train_vec_env("CartPole-v1", 4, seed=0)
    got = greedy_returns(model, games, seed=100)
    expected = []
    for i in range(4):  # the independent answer: each game alone, from its own seed
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=100 + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total, done = total + reward, terminated or truncated
        expected.append(total)
    assert len(set(expected)) > 1  # otherwise a wrong seed would pass unseen
    assert got == pytest.approx(expected)
    assert greedy_returns(model, games, seed=100) == pytest.approx(expected)  # the same games every time
    games.close()


def test_the_greedy_games_callback_plays_at_the_first_rollout_end_then_every_n_steps():
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.greedy_eval import GreedyEvalCallback

    model = _model(guard_greedy_return=1e9)  # a floor no game reaches: every update after the first games goes back
    lines: list[str] = []
    callback = GreedyEvalCallback(make_train_vec_env("CartPole-v1", 2, seed=0), every=128, seed=50,
                                  log=lines.append)
    model.learn(320, callback=callback)  # rollouts end at 64, 128, 192, 256, 320
    assert [line.split(" steps")[0] for line in lines] == ["greedy games at 64", "greedy games at 192",
                                                                 "greedy games at 320"]
    assert model.greedy_return is not None and model.ramp_position == 0.0  # held at the start: ε = eps_start
    assert model.current_eps() == pytest.approx(1e-6)


def test_a_greedy_guard_on_a_vecnormalize_preset_is_refused(monkeypatch):
    import dataclasses

    from rlgauntlet.errors import UserError
    from rlgauntlet.training.kit import greedy_games_callback
    from rlgauntlet.training.recipes import get_preset

    preset = dataclasses.replace(get_preset("cartpole-radial-ppo"), normalize=True)
    with pytest.raises(UserError, match="greedy-games guard needs a preset without VecNormalize"):
        greedy_games_callback(_model(guard_greedy_return=1.0), preset, print)


def test_train_preset_plays_the_greedy_games_of_a_preset_that_asks_and_keeps_their_return(tmp_path, monkeypatch):
    import dataclasses

    from rlgauntlet.training import recipes as presets
    from rlgauntlet.training.sb3_train import train_preset

    base = presets.get_preset("cartpole-radial-ppo")
    guarded = dataclasses.replace(base, hyperparams={**base.hyperparams, "guard_greedy_return": 450.0,
                                                     "guard_greedy_every": 64, "guard_greedy_games": 2})
    monkeypatch.setitem(presets.PRESETS, "cartpole-radial-ppo", guarded)
    lines: list[str] = []
    ckpt = train_preset("cartpole-radial-ppo", tmp_path / "run", total_timesteps=256, stop_at_target=False,
                        log=lines.append)
    progress = json.loads((ckpt / "progress.json").read_text())
    assert any("greedy games at" in line for line in lines)
    assert progress["schedule"]["greedy_return"] > 0 and "ramp_position" in progress["schedule"]


def test_a_guarded_training_resumes_exactly_and_plays_its_greedy_games_when_it_would_have(tmp_path, monkeypatch):
    """A guard that watches greedy games: the step of the next games is kept in the progress, so a
    run stopped by its time budget and resumed plays them at the same steps as the run never stopped
    (not at its first rollout's end), and ends with its weights, bit for bit (the property under
    test), and its guard's state."""
    import dataclasses
    import time

    import torch

    from rlgauntlet.training import recipes as presets
    from rlgauntlet.training.sb3_train import train_preset
    from rlgauntlet.victims.sb3_files import read_sb3_zip

    base = presets.get_preset("cartpole-radial-ppo")
    guarded = dataclasses.replace(base, hyperparams={**base.hyperparams, "guard_greedy_return": 450.0,
                                                     "guard_greedy_every": 600, "guard_greedy_games": 2})
    monkeypatch.setitem(presets.PRESETS, "cartpole-radial-ppo", guarded)

    def run(folder, **kwargs):
        lines: list[str] = []
        ckpt = train_preset("cartpole-radial-ppo", folder, total_timesteps=1024, stop_at_target=False,
                            log=lines.append, **kwargs)
        return ckpt, [line.split("greedy games at ")[1].split(" ")[0] for line in lines if "greedy games at" in line]

    one, games_one = run(tmp_path / "one")
    _, games_first = run(tmp_path / "two", deadline=time.monotonic())
    two, games_second = run(tmp_path / "two")
    assert games_first + games_second == games_one and len(games_one) >= 2
    w1, w2 = (read_sb3_zip(c / "model.zip")[1] for c in (one, two))
    assert all(torch.equal(w1[k], w2[k]) for k in w1)  # bit-exactness is the property under test
    p1, p2 = (json.loads((c / "progress.json").read_text()) for c in (one, two))
    assert p2["schedule"] == p1["schedule"] and p2["resumes"] == [{"steps": 256, "exact": True}]
