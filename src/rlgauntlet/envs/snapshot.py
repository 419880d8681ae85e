"""Env snapshots: save an env's whole state and go back to it later.

``snapshot(env)`` copies the state of every layer of the wrapper chain (frame stacks,
no-op / fire / episodic-life state, time-limit step counts, the raw return) and of the base
env: the physical state and the random generator of classic-control envs, MuJoCo's full
integration state (``mj_getState``: time, qpos, qvel, act, warm start, controls, applied
forces), dm_control's physics state, step count and task RNG, the ALE emulator with its
RNG for Atari, the MinAtar game with its RandomState. ``restore(env, snap)`` puts it all back,
so the same actions then give bit-identical observations, rewards and terminations. A
snapshot can be restored any number of times, on the env it was taken from.

Search over action sequences (absolute worst case) and best-of-m baselines use it.

Example:
    >>> from rlgauntlet.envs import make_env
    >>> env = make_env("CartPole-v1"); _ = env.reset(seed=0)
    >>> snap = snapshot(env)
    >>> first = env.step(1)[0]
    >>> restore(env, snap)
    >>> bool((env.step(1)[0] == first).all())
    True
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from rlgauntlet.errors import UserError

#: attributes that describe an env rather than hold its state (or are restored apart)
_SKIP = {"env", "_env", "observation_space", "action_space", "_observation_space", "_action_space", "spec",
         "_spec", "_cached_spec", "metadata", "_metadata", "render_mode", "_np_random", "np_random_seed",
         "_np_random_seed", "model", "data", "ale", "mujoco_renderer", "renderer", "viewer", "screen", "clock"}
_PLAIN = (int, float, bool, str, bytes, type(None), np.ndarray, np.generic)


def _is_plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple, deque)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_is_plain(v) for v in value.values())
    return False


def _dm_control_env(base_env: gym.Env):
    """The dm_control ``Environment`` inside a shimmy env, or None."""
    inner = getattr(base_env, "_env", None)
    return inner if inner is not None and hasattr(inner, "physics") and hasattr(inner, "task") else None


def _layers(env: gym.Env) -> list[gym.Env]:
    out = [env]
    while isinstance(out[-1], gym.Wrapper):
        out.append(out[-1].env)
    return out


@dataclass
class Snapshot:
    """The saved state of one env (see module docstring); opaque to callers."""

    env_id: int
    attributes: list[dict[str, Any]]
    rng_state: dict | None
    base: dict[str, Any] = field(default_factory=dict)


def snapshot(env: gym.Env) -> Snapshot:
    """Save the state of ``env`` and of every wrapper around it."""
    layers = _layers(env)
    attributes = [{k: copy.deepcopy(v) for k, v in vars(layer).items() if k not in _SKIP and _is_plain(v)}
                  for layer in layers]
    base_env = layers[-1]
    rng = getattr(base_env, "_np_random", None)
    snap = Snapshot(id(env), attributes, copy.deepcopy(rng.bit_generator.state) if rng is not None else None)
    if hasattr(base_env, "ale"):
        snap.base["ale"] = base_env.ale.cloneState(include_rng=True)
    elif hasattr(base_env, "model") and hasattr(base_env, "data"):
        snap.base["mujoco"] = _mujoco_state(base_env.model, base_env.data)
    elif _dm_control_env(base_env) is not None:
        dm_env = _dm_control_env(base_env)
        snap.base["dm_control"] = (_mujoco_state(dm_env.physics.model.ptr, dm_env.physics.data.ptr),
                                   dm_env._step_count, dm_env._reset_next_step, dm_env.task.random.get_state())
    elif type(base_env).__module__ == "minatar.gym":  # the game: its state and its RandomState
        snap.base["minatar"] = copy.deepcopy(base_env.game)
    elif type(base_env).__module__.split(".")[:3] != ["gymnasium", "envs", "classic_control"]:
        raise UserError(f"no snapshot support for {type(base_env).__name__}; snapshots cover classic control, "
                        "Gymnasium MuJoCo, dm_control (shimmy), Atari (ale-py) and MinAtar envs")
    return snap


def restore(env: gym.Env, snap: Snapshot) -> None:
    """Put ``env`` back into the state saved in ``snap`` (taken from this same env)."""
    if snap.env_id != id(env):
        raise ValueError("a snapshot can only be restored on the env it was taken from")
    layers = _layers(env)
    for layer, saved in zip(layers, snap.attributes):
        for key, value in saved.items():
            setattr(layer, key, copy.deepcopy(value))
    base_env = layers[-1]
    if snap.rng_state is not None:
        if getattr(base_env, "_np_random", None) is None:  # an env never reset (restored in a new process)
            base_env._np_random = gym.utils.seeding.np_random()[0]
        base_env._np_random.bit_generator.state = copy.deepcopy(snap.rng_state)
    if "ale" in snap.base:
        base_env.ale.restoreState(snap.base["ale"])
    if "dm_control" in snap.base:
        dm_env = _dm_control_env(base_env)
        physics_state, dm_env._step_count, dm_env._reset_next_step, random_state = snap.base["dm_control"]
        _set_mujoco_state(dm_env.physics.model.ptr, dm_env.physics.data.ptr, physics_state)
        dm_env.task.random.set_state(random_state)
    if "mujoco" in snap.base:
        _set_mujoco_state(base_env.model, base_env.data, snap.base["mujoco"])
    if "minatar" in snap.base:
        base_env.game = copy.deepcopy(snap.base["minatar"])


def _mujoco_state(model, data) -> np.ndarray:
    """MuJoCo's full integration state (``mjSTATE_INTEGRATION``) of one simulation."""
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
    mujoco.mj_getState(model, data, state, spec)
    return state


def _set_mujoco_state(model, data, state: np.ndarray) -> None:
    import mujoco

    mujoco.mj_setState(model, data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
    mujoco.mj_forward(model, data)


def snapshot_to_plain(snap: Snapshot) -> dict[str, Any]:
    """``snap`` as plain data (:mod:`rlgauntlet.common.plain_data`), to be written to a file and put
    into a new process's env of the same make with :func:`snapshot_from_plain`. The ALE emulator's
    state becomes its serialized bytes, a MinAtar game its attributes and its RandomState's state."""
    base = dict(snap.base)
    if "ale" in base:
        base["ale"] = bytes(base["ale"].serialize())
    if "minatar" in base:
        base["minatar"] = _minatar_to_plain(base["minatar"])
    return {"attributes": snap.attributes, "rng_state": snap.rng_state, "base": base}


#: a MinAtar game's attributes that are its settings, the same in every env of one make (not saved)
_MINATAR_SETTINGS = {"env", "random", "channels", "action_map"}


def _minatar_to_plain(game) -> dict[str, Any]:
    """A MinAtar ``Environment`` (the sticky-action layer) and its game as plain data: every
    attribute but the settings, and the one RandomState both draw from."""
    from rlgauntlet.common.plain_data import NotPlainData

    if game.env.random is not game.random:
        raise NotPlainData("a MinAtar game whose layers draw from two RandomStates")
    parts = {"layer": vars(game), "game": vars(game.env)}
    plain = {name: {k: v for k, v in attributes.items() if k not in _MINATAR_SETTINGS}
             for name, attributes in parts.items()}
    for name, attributes in plain.items():
        odd = [k for k, v in attributes.items() if not _is_plain(v)]
        if odd:
            raise NotPlainData(f"MinAtar's {name} attribute {odd[0]} (a {type(attributes[odd[0]]).__name__})")
    return {**plain, "random": game.random.get_state()}


def _minatar_from_plain(game, plain: dict[str, Any]):
    """A copy of ``game`` (a MinAtar ``Environment`` of the same make) in the state
    :func:`_minatar_to_plain` wrote."""
    copied = copy.deepcopy(game)
    copied.env.random = copied.random  # as in the saved game (shared once seeded; an unseeded game has two)
    for name, target in (("layer", copied), ("game", copied.env)):
        mine = {k for k in vars(target) if k not in _MINATAR_SETTINGS}
        if set(plain[name]) != mine:
            raise ValueError(f"the saved MinAtar {name} has attributes {sorted(plain[name])}, this one {sorted(mine)}")
        for key, value in plain[name].items():
            setattr(target, key, copy.deepcopy(value))
    copied.random.set_state(tuple(plain["random"]))
    return copied


def snapshot_from_plain(env: gym.Env, plain: dict[str, Any]) -> Snapshot:
    """The snapshot :func:`snapshot_to_plain` wrote, for ``env``: an env built as the one it was
    taken from (same id, wrappers and settings), in this or another process."""
    base = dict(plain["base"])
    if "ale" in base:
        import ale_py

        base["ale"] = ale_py.ALEState(base["ale"])
    layers = _layers(env)
    if len(layers) != len(plain["attributes"]):
        raise ValueError(f"the saved env had {len(plain['attributes'])} wrapper layers, this one {len(layers)}")
    if "minatar" in base:
        if type(layers[-1]).__module__ != "minatar.gym":
            raise ValueError(f"the saved env was a MinAtar game, this one {type(layers[-1]).__name__}")
        base["minatar"] = _minatar_from_plain(layers[-1].game, base["minatar"])
    return Snapshot(id(env), list(plain["attributes"]), plain["rng_state"], base)


class WorkerSnapshots(gym.Wrapper):
    """The outermost layer of an env stepped in a worker process (SB3's ``SubprocVecEnv``): the
    parent takes and puts back the snapshot of the env inside it as plain data, through
    ``env_method``. It changes nothing the env does. A refusal comes back as ``{"error": why}``:
    raised in the worker, it would end the worker's process."""

    def plain_snapshot(self) -> dict[str, Any]:
        """``{"snapshot": ...}`` (:func:`snapshot_to_plain` of the env inside), or ``{"error": why}``."""
        from rlgauntlet.common.plain_data import NotPlainData

        try:
            return {"snapshot": snapshot_to_plain(snapshot(self.env))}
        except (UserError, NotPlainData) as exc:
            return {"error": str(exc)}

    def restore_plain(self, plain: dict[str, Any]) -> str | None:
        """Put the env inside back into ``plain``'s state; None, or why it cannot."""
        try:
            restore(self.env, snapshot_from_plain(self.env, plain))
        except (ValueError, KeyError, TypeError) as exc:
            return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None
