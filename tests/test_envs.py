"""Env presets: the wrapper chain follows from the id."""

import numpy as np
import pytest

from rlgauntlet.envs import make_env, resolve_preset
from rlgauntlet.errors import UserError


@pytest.mark.parametrize(
    "env_id, preset, shape",
    [
        ("CartPole-v1", "classic", (4,)),
        ("Acrobot-v1", "classic", (6,)),
        ("MountainCar-v0", "classic", (2,)),
        ("Pendulum-v1", "classic", (3,)),
        ("Hopper-v5", "mujoco", (11,)),
        ("Walker2d-v5", "mujoco", (17,)),
        ("HalfCheetah-v5", "mujoco", (17,)),
        ("Ant-v5", "mujoco", (105,)),
        ("PongNoFrameskip-v4", "atari", (84, 84, 4)),
        ("SADQN/Pong-v0", "sa_dqn", (1, 84, 84)),
    ],
)
def test_presets_make_working_envs(env_id, preset, shape):
    assert resolve_preset(env_id) == preset
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    assert obs.shape == shape == env.observation_space.shape
    obs, _, _, _, info = env.step(env.action_space.sample())
    assert "real_done" in info and "raw_return" in info
    env.close()


def test_atari_frame_stack_matches_vec_frame_stack_layout():
    env = make_env("PongNoFrameskip-v4")
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.uint8
    assert not obs[..., :3].any() and obs[..., 3].any()  # zeros, then the first frame last
    prev = obs
    obs, *_ = env.step(0)
    np.testing.assert_array_equal(obs[..., 2], prev[..., 3])  # frames shift towards the front


def test_a_wrapper_under_the_preset_changes_the_screen_the_atari_chain_sees():
    """``under``: a white screen under SB3's Atari wrappers reaches the stack as white frames
    (grey 255 after the resize), where the game's own screen does not."""
    import gymnasium as gym

    class WhiteScreen(gym.ObservationWrapper):
        def observation(self, observation):
            return np.full_like(observation, 255)

    plain = make_env("PongNoFrameskip-v4")
    white = make_env("PongNoFrameskip-v4", under=WhiteScreen)
    assert (white.reset(seed=0)[0][..., -1] == 255).all() and not (plain.reset(seed=0)[0][..., -1] == 255).all()
    assert "real_done" in white.step(0)[-1]  # the episode's bookkeeping stays innermost
    with pytest.raises(UserError, match="SA-DQN's own Atari frames"):
        make_env("PongNoFrameskip-v4", "sa_dqn")
    with pytest.raises(UserError, match="drop --preset atari"):
        make_env("SADQN/Pong-v0", "atari")


def test_preset_override_and_errors():
    assert resolve_preset("PongNoFrameskip-v4", "none") == "none"
    assert make_env("PongNoFrameskip-v4", "none").observation_space.shape == (210, 160, 3)
    with pytest.raises(UserError, match="unknown preset"):
        resolve_preset("CartPole-v1", "fancy")
    with pytest.raises(UserError, match="cannot make env"):
        make_env("CartPole-v9")


def test_only_the_chosen_old_versions_are_made_without_the_out_of_date_warning():
    """Walker2d-v4 (the published Walker2d agents' physics) is made quietly; any other old
    version keeps Gymnasium's warning: a blanket filter, or one left installed after the make,
    fails here."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_env("Walker2d-v4").close()
        quiet = [str(w.message) for w in caught if "out of date" in str(w.message)]
        make_env("Hopper-v4").close()
        warned = [str(w.message) for w in caught if "out of date" in str(w.message)]
    assert quiet == []
    assert len(warned) == 1 and "Hopper-v4" in warned[0]


def test_mujoco_warnings_about_gymnasium_model_files_are_dropped_and_others_kept(capfd):
    """HalfCheetah's model file makes MuJoCo print a ``settotalmass`` deprecation per env made
    (thousands of lines in a gauntlet): made here, nothing of it reaches stderr; any other MuJoCo
    warning still does, and the handler in place before is back after the make (a filter left
    installed, or one that drops every warning, fails here)."""
    mujoco = pytest.importorskip("mujoco")
    from rlgauntlet.envs.presets import _mujoco_warnings_filtered, make_train_vec_env

    before = mujoco.get_mju_user_warning()
    make_env("HalfCheetah-v5").close()
    make_train_vec_env("HalfCheetah-v5", n_envs=2, seed=0).close()  # the attackers' and trainers' envs
    assert "settotalmass" not in capfd.readouterr().err
    assert mujoco.get_mju_user_warning() is before
    with _mujoco_warnings_filtered():  # no handler before it: a kept warning is printed as MuJoCo does
        mujoco.get_mju_user_warning()("Nan, Inf or huge value in QACC at DOF 0")
    assert capfd.readouterr().err == "WARNING: Nan, Inf or huge value in QACC at DOF 0\n"


def test_a_callers_own_mujoco_warning_handler_still_gets_the_other_warnings():
    """A user's handler, installed before, keeps every warning but the dropped ones while an env
    is made, and is back after (a filter that printed instead, or kept its own handler, fails)."""
    mujoco = pytest.importorskip("mujoco")
    from rlgauntlet.envs.presets import _mujoco_warnings_filtered

    seen: list[str] = []
    mujoco.set_mju_user_warning(seen.append)
    try:
        with _mujoco_warnings_filtered():
            handler = mujoco.get_mju_user_warning()
            handler("compiler attribute 'settotalmass' is deprecated and will be removed")
            handler("Nan, Inf or huge value in QACC at DOF 0")
        assert mujoco.get_mju_user_warning() == seen.append
    finally:
        mujoco.set_mju_user_warning(None)
    assert seen == ["Nan, Inf or huge value in QACC at DOF 0"]
