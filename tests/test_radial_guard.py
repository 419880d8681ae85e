"""RADIAL-PPO's guarded ε ramp: it advances one update's share of the ramp after a healthy
update, goes back as much after an unhealthy one, and its position survives a resume."""

import json
from collections import deque

import pytest
from stable_baselines3.common.logger import configure

from rlgauntlet.training.radial import RadialPPO, radial_eps_at


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
