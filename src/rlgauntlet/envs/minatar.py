"""MinAtar (Young & Tian 2019): miniature Atari games on a 10×10 grid of object channels, the
project's CPU-scale pixel testbed.

The ids are the package's own Gymnasium registrations with the minimal action set,
``MinAtar/Breakout-v1``, ``MinAtar/SpaceInvaders-v1``, ``MinAtar/Freeway-v1``,
``MinAtar/Asterix-v1`` and ``MinAtar/Seaquest-v1``. The ``minatar`` preset gives:

* observations channel-first, ``uint8`` in {0, 255}, shape (C, 10, 10): an image to SB3 and
  to the victims, so the network input is {0, 1} per channel and an ε is in ``pixel01`` units,
  as for Atari (the package gives (10, 10, C) booleans);
* the game as the MinAtar paper plays it: sticky actions with probability 0.1 and difficulty
  ramping, both drawn from the game's own RandomState, which ``reset(seed=k)`` seeds, and
  every episode a fresh game (episode k of an evaluation is then the same game whatever else
  runs, and whatever the env played before);
* episodes cut at :data:`MAX_EPISODE_STEPS` (``truncated``): a good Breakout agent never
  loses, and the games themselves set no limit (Freeway ends itself at 2,500 steps).

Example:
    >>> from rlgauntlet.envs import make_env
    >>> env = make_env("MinAtar/Breakout-v1")
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, obs.dtype, int(env.action_space.n)
    ((4, 10, 10), dtype('uint8'), 3)
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np

PREFIX = "MinAtar/"
GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
#: the step limit of an episode (the games set none, except Freeway's own 2,500)
MAX_EPISODE_STEPS = 10_000

_registered = False


def register_minatar() -> None:
    """Register the package's Gymnasium ids (once). The package logs a warning when seaborn,
    which only its human rendering uses, is missing: silenced here."""
    global _registered
    if _registered:
        return
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        from minatar.gym import register_envs
    finally:
        root.setLevel(level)
    register_envs()
    _registered = True


class MinAtarImage(gym.ObservationWrapper):
    """(10, 10, C) booleans → (C, 10, 10) ``uint8`` in {0, 255}: channel-first image frames.

    Example:
        >>> register_minatar()
        >>> env = MinAtarImage(gym.make("MinAtar/Breakout-v1"))
        >>> obs, _ = env.reset(seed=1)
        >>> sorted(set(obs.flatten().tolist()))
        [0, 255]
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        h, w, c = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 255, (c, h, w), np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        # Every episode starts as a fresh game: the package keeps the previous episode's last
        # action for its sticky actions, so without this episode k would depend on what the
        # same env played before it (and results on the number of envs).
        self.env.unwrapped.game.last_action = 0
        return super().reset(seed=seed, options=options)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1))).astype(np.uint8) * np.uint8(255)
