"""World threats: change the env itself for an episode (changed physics).

The change is made before the episode's seeded reset and undone exactly when the episode
ends, and what was set is recorded with the episode (``EpisodeRecord.world``). With ``p`` <
1, each episode is changed with probability p (drawn from its schedule stream).

Example:
    >>> from rlgauntlet.envs import make_env
    >>> from rlgauntlet.threats import parse_threat
    >>> env, threat = make_env("CartPole-v1"), parse_threat("physics:param=length,scale=2")
    >>> threat.enter_world(env)["value"], env.unwrapped.polemass_length
    (1.0, 0.1)
    >>> threat.exit_world(env); env.unwrapped.length
    0.5
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np
from pydantic import Field, model_validator

from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Threat, ThreatParams, register_threat


@dataclass(frozen=True)
class _Param:
    """How to read and write one physics parameter of an env (``get`` returns a copy)."""

    get: Callable[[gym.Env], np.ndarray]
    set: Callable[[gym.Env, np.ndarray], None]
    #: the entries ``value=`` sets (a mask over the array; all when None)
    value_entries: Callable[[np.ndarray], np.ndarray] | None = None
    doc: str = ""


def _attr(name: str, after: Callable[[gym.Env], None] | None = None) -> _Param:
    def set_(env, v):
        setattr(env, name, float(v))
        if after is not None:
            after(env)

    return _Param(lambda env: np.array(float(getattr(env, name))), set_)


def _cartpole_cache(env) -> None:
    # CartPoleEnv caches these at construction; step() reads the caches
    env.total_mass = env.masspole + env.masscart
    env.polemass_length = env.masspole * env.length


def _first_column(a: np.ndarray) -> np.ndarray:
    mask = np.zeros(a.shape, dtype=bool)
    mask[..., 0] = True
    return mask


def _last_entry(a: np.ndarray) -> np.ndarray:
    mask = np.zeros(a.shape, dtype=bool)
    mask[-1] = True
    return mask


CLASSIC = {
    "CartPoleEnv": {name: _attr(name, _cartpole_cache) for name in ("gravity", "masscart", "masspole", "length", "force_mag")},
    "PendulumEnv": {name: _attr(name) for name in ("g", "m", "l", "max_speed", "max_torque")},
}


def _get_path(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _model_array(field: str, value_entries=None, doc: str = "") -> _Param:
    """A MuJoCo model array (``field`` may be nested: ``opt.gravity``), written in place."""
    return _Param(lambda env: np.array(_get_path(env.model, field), copy=True),
                  lambda env, v: np.copyto(_get_path(env.model, field), v), value_entries, doc)


MUJOCO = {
    "gravity": _model_array("opt.gravity", _last_entry, "value= sets the z component (default −9.81 m/s²)"),
    "body_mass": _model_array("body_mass", None, "all bodies, or one with body=NAME"),
    "geom_friction": _model_array("geom_friction", _first_column, "value= sets the sliding friction"),
    "actuator_gear": _model_array("actuator_gear", _first_column, "value= sets the gear ratio"),
}


def _game_attr(name: str, doc: str) -> _Param:
    def set_(env, v):
        setattr(env.game, name, float(v))

    return _Param(lambda env: np.array(float(getattr(env.game, name))), set_, None, doc)


#: MinAtar's game parameters (on the package's ``Environment``, ``env.unwrapped.game``)
MINATAR = {"sticky_action_prob": _game_attr("sticky_action_prob", "the probability that the game repeats the "
                                                                  "previous action instead of the agent's (0.1)")}


def _params_of(env: gym.Env) -> dict[str, _Param]:
    base = env.unwrapped
    if type(base).__name__ in CLASSIC:
        return CLASSIC[type(base).__name__]
    if hasattr(getattr(base, "game", None), "sticky_action_prob"):
        return MINATAR
    if hasattr(base, "model") and hasattr(base, "data") and hasattr(base.model, "body_mass"):
        return MUJOCO
    return {}


#: parameters the physics divides by (a pole's length, a pendulum's mass and length, MuJoCo's body
#: masses): refused at 0 or below when the spec is parsed, before any episode
DIVISORS = frozenset({"length", "l", "m", "body_mass"})


@register_threat
class Physics(Threat):
    """Changed physics for whole episodes: one parameter scaled (``scale=X``) or set (``value=X``).

    Parameters, by env:

    * CartPole: ``gravity``, ``masscart``, ``masspole``, ``length`` (half the pole),
      ``force_mag`` (the cached total mass and pole mass·length follow);
    * Pendulum: ``g``, ``m``, ``l``, ``max_speed``, ``max_torque`` (the agent's action space is
      the one it was saved with: with a larger max_torque it still acts within its old bounds,
      with a smaller one the env clips its torques);
    * Gymnasium MuJoCo (v5): ``gravity`` (``value=`` sets its z component), ``body_mass`` (every
      body, or one with ``body=NAME``), ``geom_friction`` (``value=`` sets sliding friction),
      ``actuator_gear`` (``value=`` sets the gear ratio), through the model arrays;
    * MinAtar: ``sticky_action_prob`` (the game's sticky actions, 0.1 as the paper plays it).

    Example specs: ``physics:param=length,scale=4``, ``physics:param=body_mass,body=torso,scale=1.5``,
    ``physics:param=gravity,value=-4.9``.
    """

    name = "physics"
    family = "natural"
    place = "world"

    class Params(ThreatParams):
        param: str = Field(description="the physics parameter (see the class docstring)")
        scale: float | None = Field(None, ge=0.0, description="multiply the parameter by this")
        value: float | None = Field(None, description="set the parameter to this")
        body: str | None = Field(None, description="MuJoCo body_mass: only this body")

        @model_validator(mode="after")
        def _one(self):
            if (self.scale is None) == (self.value is None):
                raise ValueError("give exactly one of scale= or value=")
            if self.body is not None and self.param != "body_mass":
                raise ValueError("body= applies to param=body_mass only")
            if self.param in DIVISORS and ((self.scale is not None and self.scale <= 0)
                                           or (self.value is not None and self.value <= 0)):
                given = f"scale={self.scale:g}" if self.scale is not None else f"value={self.value:g}"
                raise ValueError(f"param={self.param} must stay positive (the physics divides by it) and {given} "
                                 "makes it 0 or less; give scale > 0 or value > 0")
            return self

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._saved: dict[int, np.ndarray] = {}

    def check_victim(self, victim) -> None:
        pass  # the world changes, not the victim's input

    def check_env(self, env: gym.Env, env_id: str) -> None:
        known = _params_of(env)
        if not known:
            raise UserError(f"physics: no physics parameters known for {env_id}; it supports CartPole, Pendulum, "
                            "Gymnasium MuJoCo and MinAtar envs")
        if self.params.param not in known:
            raise UserError(f"physics: {env_id} has no parameter {self.params.param!r}; known: {', '.join(known)}")
        if self.params.body is not None:
            names = [env.unwrapped.model.body(i).name for i in range(env.unwrapped.model.nbody)]
            if self.params.body not in names:
                raise UserError(f"physics: {env_id} has no body {self.params.body!r}; bodies: {', '.join(names)}")

    def _entries(self, env: gym.Env, default: np.ndarray, param: _Param) -> np.ndarray:
        if self.params.body is not None:
            mask = np.zeros(default.shape, dtype=bool)
            mask[env.unwrapped.model.body(self.params.body).id] = True
            return mask
        if self.params.value is not None and param.value_entries is not None:
            return param.value_entries(default)
        return np.ones(default.shape, dtype=bool)

    def enter_world(self, env: gym.Env) -> dict:
        self.check_env(env, getattr(env.spec, "id", "this env"))
        param = _params_of(env)[self.params.param]
        base = env.unwrapped
        default = param.get(base)
        self._saved[id(env)] = default
        entries = self._entries(env, default, param)
        new = default.copy()
        new[entries] = default[entries] * self.params.scale if self.params.scale is not None else self.params.value
        param.set(base, new)
        return {"param": self.params.param, "body": self.params.body,
                "default": default.tolist(), "value": new.tolist()}

    def exit_world(self, env: gym.Env) -> None:
        _params_of(env)[self.params.param].set(env.unwrapped, self._saved.pop(id(env)))
