"""Greedy games during training: the return a guard can trust.

A training run sees only its *sampled* episodes. For a policy whose logits a robust loss
flattens, the sampled return and the greedy (argmax) return part ways: RADIAL-PPO on Pong kept a
sampled return of 15–16 while its greedy game fell from 19.8 to 8.5. :class:`GreedyEvalCallback`
plays ``games`` greedy games on an env of its own every ``every`` agent steps (at a rollout's
end, before the update) and hands their mean return to the algorithm's ``record_greedy_return``,
where a guard can act on it (RADIAL's ε ramp: ``guard_greedy_return``).

The games are the same games each time: env i of the evaluation env starts from seed
``seed + i`` (an evaluation's episode k uses seed ``seed + k``, as everywhere in rlgauntlet),
so a change in the mean is a change of the policy, not of the games.

Example:
    >>> from rlgauntlet.envs.presets import make_train_vec_env            # doctest: +SKIP
    >>> games = make_train_vec_env("PongNoFrameskip-v4", 8, seed=10_000)  # doctest: +SKIP
    >>> model.learn(1_000_000, callback=GreedyEvalCallback(games, every=100_000, seed=10_000))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback


def greedy_returns(model: Any, env: Any, seed: int) -> list[float]:
    """Play one greedy game in each env of the ``VecEnv`` ``env`` (env i from seed ``seed + i``)
    with ``model.predict(deterministic=True)``; return the games' full returns in env order,
    read from the Monitor's ``episode`` record (unclipped, over all lives). A recurrent model's
    state is carried through each game."""
    env.seed(seed)
    obs = env.reset()
    returns: list[float | None] = [None] * env.num_envs
    # a recurrent model (RecurrentPPO) carries its state through each game, reset at its start; the
    # others ignore both arguments
    state, starts = None, np.ones(env.num_envs, dtype=bool)
    while any(r is None for r in returns):
        actions, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
        obs, _, dones, infos = env.step(actions)
        starts = np.asarray(dones, dtype=bool)
        for i, (done, info) in enumerate(zip(dones, infos)):
            if done and returns[i] is None and "episode" in info:
                returns[i] = float(info["episode"]["r"])
    return [float(r) for r in returns]


class GreedyEvalCallback(BaseCallback):
    """Every ``every`` agent steps, play one greedy game per env of ``env`` and pass the mean
    return to ``model.record_greedy_return`` (the first time at the first rollout's end).

    ``progress``: a training's progress record, where the step of the next games is kept
    (``greedy_next_eval``) and read back when the run resumes exactly, so that the resumed run
    plays its games when the run never stopped would have (without it, at its first rollout's end)."""

    def __init__(self, env: Any, every: int, seed: int, log: Any = None, progress: dict | None = None) -> None:
        super().__init__()
        if every < 1:
            raise ValueError("GreedyEvalCallback needs every ≥ 1 agent steps")
        self.env, self.every, self.seed, self.log, self.progress = env, every, seed, log, progress
        self.next_eval: int | None = None if progress is None else progress.get("greedy_next_eval")

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.next_eval is not None and self.model.num_timesteps < self.next_eval:
            return
        returns = greedy_returns(self.model, self.env, self.seed)
        mean = float(np.mean(returns))
        self.model.record_greedy_return(mean)
        self.next_eval = self.model.num_timesteps + self.every
        if self.progress is not None:
            self.progress["greedy_next_eval"] = self.next_eval
        if self.log is not None:
            self.log(f"greedy games at {self.model.num_timesteps} steps: {mean:.2f} (over {len(returns)})")

    def _on_training_end(self) -> None:
        self.env.close()
