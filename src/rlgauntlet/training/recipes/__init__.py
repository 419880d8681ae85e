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

import dataclasses
import hashlib
import json
from typing import Any

from rlgauntlet.errors import UserError
from rlgauntlet.training.recipes.atla import ATLA_PRESETS, METHODS, ATLAPreset, agent_recipe, get_atla_preset
from rlgauntlet.training.recipes.zoo import PRESETS, ROBUST_BAR, TrainPreset, linear_schedule, register_preset

__all__ = ["ATLA_PRESETS", "ATLAPreset", "METHODS", "PRESETS", "ROBUST_BAR", "TrainPreset", "agent_recipe",
           "get_atla_preset", "get_preset", "linear_schedule", "recipe_digest", "register_preset", "training_digest"]


def get_preset(name: str) -> TrainPreset:
    """Return the preset called ``name`` or raise a :class:`UserError` listing the known ones.
    An alternating-training preset (ATLA, PA-ATLA) gives its agent's recipe."""
    if name in PRESETS:
        return PRESETS[name]
    if name in ATLA_PRESETS:
        return agent_recipe(ATLA_PRESETS[name])
    raise UserError(f"unknown training preset {name!r}; choose one of: {', '.join(sorted([*PRESETS, *ATLA_PRESETS]))}")


#: fields of a recipe that describe it without changing what it trains
_PROSE = ("notes", "source")

#: fields added after zoo agents were registered, left out of the digest while at their default:
#: every earlier recipe keeps the digest its zoo entries recorded
_LATER_FIELDS = {"select_clean_min": None, "validate_clean_episodes": 0, "validate_push_episodes": 0, "push_eps_fractions": (1.0,),
                 "push_temperature": None, "adversary_recurrent": False, "validate_confirm_episodes": 0,
                 "validate_finalists": 0, "select_with_training_return": True}


def _canonical(value: Any) -> Any:
    """``value`` as JSON-ready data that names what it is, not where it lives in memory: a
    dataclass by its fields (prose left out), a class by its module and name, a function by its
    name and the values it closes over (``linear_schedule(3e-4)`` and ``linear_schedule(1e-4)`` differ)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in _PROSE and not (f.name in _LATER_FIELDS and getattr(value, f.name) == _LATER_FIELDS[f.name])}
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if callable(value):
        cells = [_canonical(c.cell_contents) for c in (getattr(value, "__closure__", None) or ())]
        return {"function": f"{value.__module__}.{value.__qualname__}", "closure": cells}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a recipe holds {type(value).__name__}, which has no canonical form: add it to _canonical")


def training_digest(preset: ATLAPreset, selection_fields: tuple[str, ...]) -> str:
    """Hex sha256 of what a run of alternating preset ``preset`` trains with: its settings but its
    name and ``selection_fields`` (which checkpoint a run keeps, not how it trains), and its agent's
    recipe; prose left out. Two presets that train alike share it."""
    alternating = {k: v for k, v in _canonical(preset).items() if k not in ("name", *selection_fields)}
    agent = {k: v for k, v in _canonical(agent_recipe(preset)).items() if k != "name"}  # named after the preset
    return _digest({"alternating": alternating, "agent": agent})


def _digest(recipe: Any) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def recipe_digest(name: str) -> str:
    """Hex sha256 of the recipe ``rlgauntlet train --preset NAME`` trains: every setting of the
    preset (an alternating preset's own and its agent's recipe), its prose left out. A zoo entry
    records it when it is registered, and a test holds every recorded digest to its preset's
    current one, so a recipe a zoo agent was trained with is never edited under it (give the
    changed recipe a new name)."""
    if name in ATLA_PRESETS:
        recipe = {"alternating": _canonical(ATLA_PRESETS[name]), "agent": _canonical(agent_recipe(ATLA_PRESETS[name]))}
    else:
        recipe = _canonical(get_preset(name))
    return _digest(recipe)
