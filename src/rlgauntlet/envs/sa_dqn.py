"""SA-DQN's Atari evaluation envs (Zhang et al. 2020, ``chenhongge/SA_DQN``), rebuilt in Gymnasium
so that its released Q-networks see exactly the frames they were trained on.

The released agents do not see SB3's Atari frames: their code (``common/wrappers.py``,
``test.py``, ``config/*.json``) plays ``{Game}NoFrameskip-v4`` through

1. no-op reset (1–30 no-ops) and frame skip 4 with the max over the last two frames;
2. fire reset where the game has FIRE; no episodic life and raw rewards at test time;
3. the *first n actions* of the game's minimal action set (``restrict_actions``: Pong 4, the
   games with ``true`` 6, Freeway its own 3);
4. one grey frame (OpenCV's RGB→grey), 4 black columns added left and right (160 → 168), the
   central 168 rows kept, moved down by ``crop_shift`` rows (Pong 10, RoadRunner 20), resized to
   84×84 with ``INTER_AREA`` — **no frame stack**;
5. at most 15,000 agent steps per episode (``max_frames_per_episode``).

Their last wrapper swaps the frame's axes (``np.swapaxes(obs, 2, 0)``: the network sees the
image transposed, width first). Here the env gives the frame as an image, (1, 84, 84) with
rows first, so that natural perturbations (rotation, shifting) mean what they say; the victim
(:mod:`rlgauntlet.victims.sa_dqn`) transposes it for the network, which then sees exactly what
the authors' network saw.

The ids are the package's registrations, one per game of the release: ``SADQN/Pong-v0``,
``SADQN/Freeway-v0``, ``SADQN/BankHeist-v0``, ``SADQN/RoadRunner-v0`` (preset ``sa_dqn``,
protocol ``pixel``). :data:`GAMES` is the configs' data.

Example:
    >>> from rlgauntlet.envs import make_env
    >>> env = make_env("SADQN/Pong-v0")
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, obs.dtype, int(env.action_space.n)
    ((1, 84, 84), dtype('uint8'), 4)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

PREFIX = "SADQN/"
#: each game's wrapper settings, from SA_DQN's ``config/{Game}_*.json`` (the same in the
#: natural, convex and PGD configs): rows the crop moves down, and how many of the minimal
#: action set's first actions the agent uses (None: all of them)
GAMES: dict[str, dict[str, int | None]] = {
    "Pong": {"crop_shift": 10, "actions": 4},
    "Freeway": {"crop_shift": 0, "actions": None},
    "BankHeist": {"crop_shift": 0, "actions": 6},
    "RoadRunner": {"crop_shift": 20, "actions": 6},
}
#: ``test_config.max_frames_per_episode`` of SA_DQN's ``defaults.json`` (agent steps)
MAX_EPISODE_STEPS = 15_000
FRAME_SIZE = 84
NOOP_MAX = 30
FRAME_SKIP = 4

_registered = False


def central_crop_frame(rgb: np.ndarray, crop_shift: int) -> np.ndarray:
    """One RGB Atari screen (210, 160, 3) uint8 → SA-DQN's (84, 84) uint8 grey frame: OpenCV's
    grey, 4 black columns each side, the central 168 rows moved down by ``crop_shift``,
    ``INTER_AREA`` resize (``WarpFrame`` with ``central_crop`` in ``common/wrappers.py``)."""
    import cv2

    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    pad = np.zeros((grey.shape[0], 4), dtype=grey.dtype)
    grey = np.concatenate((pad, grey, pad), axis=1)
    height, width = grey.shape
    offset = (height - width) // 2
    grey = grey[offset + crop_shift:height - offset + crop_shift]
    return cv2.resize(grey, (FRAME_SIZE, FRAME_SIZE), interpolation=cv2.INTER_AREA)


class CentralCropFrame(gym.ObservationWrapper):
    """SA-DQN's frame (:func:`central_crop_frame`) as a (1, 84, 84) uint8 image, rows first."""

    def __init__(self, env: gym.Env, crop_shift: int) -> None:
        super().__init__(env)
        self.crop_shift = crop_shift
        self.observation_space = gym.spaces.Box(0, 255, (1, FRAME_SIZE, FRAME_SIZE), np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return central_crop_frame(observation, self.crop_shift)[None]


class FirstActions(gym.ActionWrapper):
    """Only the first ``n`` actions of the wrapped env (SA-DQN's ``RestrictedActionEnv``): the
    action index passes through unchanged."""

    def __init__(self, env: gym.Env, n: int) -> None:
        super().__init__(env)
        if not 0 < n <= env.action_space.n:
            raise ValueError(f"{n} actions asked of an env with {env.action_space.n}")
        self.action_space = gym.spaces.Discrete(n)

    def action(self, action: Any) -> Any:
        return action


def make_sa_dqn_env(game: str, **kwargs: Any) -> gym.Env:
    """The evaluation env of SA-DQN's ``test.py`` for ``game`` (see the module docstring)."""
    import ale_py
    from stable_baselines3.common.atari_wrappers import FireResetEnv, MaxAndSkipEnv, NoopResetEnv

    gym.register_envs(ale_py)
    settings = GAMES[game]
    env = gym.make(f"{game}NoFrameskip-v4", **kwargs)
    env = MaxAndSkipEnv(NoopResetEnv(env, noop_max=NOOP_MAX), skip=FRAME_SKIP)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env)
    if settings["actions"] is not None:
        env = FirstActions(env, settings["actions"])
    env = CentralCropFrame(env, settings["crop_shift"])
    return gym.wrappers.TimeLimit(env, MAX_EPISODE_STEPS)


def register_sa_dqn() -> None:
    """Register ``SADQN/{Game}-v0`` for every game of :data:`GAMES` (once)."""
    global _registered
    if _registered:
        return
    for game in GAMES:
        gym.register(f"{PREFIX}{game}-v0", entry_point=make_sa_dqn_env, kwargs={"game": game})
    _registered = True
