"""Training recipes as data: every preset ``rlgauntlet train --preset NAME`` runs.

* :mod:`~rlgauntlet.training.recipes.zoo`: the zoo agents' fixed recipes (env, SB3 algorithm and
  hyperparameters, envs, budget, seed, target return), with RL Baselines3 Zoo's tuned values;
* :mod:`~rlgauntlet.training.recipes.atla`: the alternating-training recipes (ATLA, PA-ATLA),
  the agent's and the adversary's, used by :mod:`rlgauntlet.training.defences.atla`.

Example:
    >>> get_preset("cartpole-ppo").algo
    'ppo'
"""

from __future__ import annotations

from rlgauntlet.errors import UserError
from rlgauntlet.training.recipes.atla import ATLA_PRESETS, METHODS, ATLAPreset, agent_recipe, get_atla_preset
from rlgauntlet.training.recipes.zoo import PRESETS, ROBUST_BAR, TrainPreset, linear_schedule, register_preset

__all__ = ["ATLA_PRESETS", "ATLAPreset", "METHODS", "PRESETS", "ROBUST_BAR", "TrainPreset", "agent_recipe",
           "get_atla_preset", "get_preset", "linear_schedule", "register_preset"]


def get_preset(name: str) -> TrainPreset:
    """Return the preset called ``name`` or raise a :class:`UserError` listing the known ones.
    An alternating-training preset (ATLA, PA-ATLA) gives its agent's recipe."""
    if name in PRESETS:
        return PRESETS[name]
    if name in ATLA_PRESETS:
        return agent_recipe(ATLA_PRESETS[name])
    raise UserError(f"unknown training preset {name!r}; choose one of: {', '.join(sorted([*PRESETS, *ATLA_PRESETS]))}")


