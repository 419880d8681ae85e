"""Exact resume of a training run: what it holds at a rollout's end, written as data.

A checkpoint's weights, optimizer state and reward statistics are not the whole run. Resumed
from them alone, a run's envs start again from their seeds in the middle of training, its
random streams start again from the constructor's seed, the rollout collected just before the
checkpoint is never learnt from, and the recent-episode window behind the learning curve is
empty. The run then goes on along another trajectory, and for an attacker's director that
means another director (docs/decisions.md, "Exact resume"). ``run_state.npz``, written beside
the checkpoint's ``model.zip`` as plain data (:mod:`rlgauntlet.common.plain_data`, nothing
unpickled on reading), holds the rest:

* the envs: each VecEnv layer's state (VecNormalize's running return, the attack layer's
  generators and current input, a frame stack's frames) and each env's snapshot
  (:mod:`rlgauntlet.envs.snapshot`: wrapper attributes, generator, physics or emulator state);
* the algorithm: the last observations and episode starts, a recurrent policy's LSTM states,
  the recent episodes, and, for a checkpoint written at a rollout's end before that rollout's
  update (``pending_update``), the rollout buffer, whose update the resumed run makes first;
  an off-policy run's action-space generator and DQN's ε (its replay buffer is saved beside, as
  plain arrays; the gradient steps due at the stop are made first on resume);
* the random streams: torch's, NumPy's global one and Python's;
* what ``learn`` sets when it starts and SB3 writes into every saved zip (the step it started
  at, a VecNormalize run's first original observation), so that the resumed run's files, and a
  director's canonical sha256, are those of the run that went on.

A run resumed from it goes on as if it had never stopped: the same weights to the last bit
(tests/test_learned_attackers.py). Envs stepped in worker processes write their own state, each
in its worker (:class:`~rlgauntlet.envs.snapshot.WorkerSnapshots`). Wrappers with state not listed
here, and worker envs made without that layer, cannot be saved so: their checkpoints say why
(``progress["inexact_resume"]``) and resume as before, along another trajectory.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnvWrapper, VecFrameStack, \
    VecNormalize, VecTransposeImage

from rlgauntlet.common.plain_data import NotPlainData, load_plain, save_plain
from rlgauntlet.envs.snapshot import restore, snapshot, snapshot_from_plain, snapshot_to_plain, WorkerSnapshots
from rlgauntlet.errors import UserError

#: the file, in a checkpoint folder, that makes its resume exact
RUN_STATE = "run_state.npz"
#: what a file of this format says it is (checked on reading)
FORMAT = "rlgauntlet run state 1"
#: VecEnv wrappers that hold nothing between steps
_STATELESS = (VecTransposeImage,)


class NotResumable(Exception):
    """This run's state cannot be written as data (the message says what holds it)."""


@dataclass
class Restored:
    """What :func:`restore_run_state` did: ``exact`` (all of the run put back), ``why`` not
    (when not), and whether a rollout waits for its update (``pending_update``)."""

    exact: bool
    why: str | None = None
    pending_update: bool = False
    num_timesteps_at_start: int | None = None

    def callbacks(self) -> list[BaseCallback]:
        """The callbacks that finish the restore once ``learn`` has started (none for an inexact one)."""
        return [_LearnStart(self.num_timesteps_at_start)] if self.exact else []


class _LearnStart(BaseCallback):
    """Sets ``_num_timesteps_at_start`` back to the interrupted run's once ``learn`` has set it to
    the resumed run's first step (SB3 uses it for the steps-per-second it logs, and writes it into
    every saved zip)."""

    def __init__(self, steps: int | None) -> None:
        super().__init__()
        self.steps = steps

    def _on_training_start(self) -> None:
        if self.steps is not None:
            self.model._num_timesteps_at_start = self.steps

    def _on_step(self) -> bool:
        return True


def _vec_layers(venv) -> list:
    layers = [venv]
    while isinstance(layers[-1], VecEnvWrapper):
        layers.append(layers[-1].venv)
    return layers


def _layer_state(layer) -> dict[str, Any]:
    kind = type(layer).__name__
    if isinstance(layer, VecNormalize):
        return {"kind": kind, "returns": layer.returns}
    if isinstance(layer, VecFrameStack):
        return {"kind": kind, "stacked": layer.stacked_obs.stacked_obs}
    if isinstance(layer, _STATELESS):
        return {"kind": kind}
    if isinstance(layer, VecEnvWrapper) and hasattr(layer, "state_dict"):
        return {"kind": kind, "state": layer.state_dict()}
    if type(layer) is DummyVecEnv:
        try:
            return {"kind": kind, "envs": [snapshot_to_plain(snapshot(env)) for env in layer.envs]}
        except UserError as exc:
            raise NotResumable(str(exc)) from None
        except NotPlainData as exc:
            raise NotResumable(f"the envs hold {exc}, which is not written as data") from None
    if type(layer) is SubprocVecEnv and all(layer.env_is_wrapped(WorkerSnapshots)):
        answers = layer.env_method("plain_snapshot")  # each worker writes its own env's state
        refused = next((a["error"] for a in answers if "error" in a), None)
        if refused is not None:
            raise NotResumable(f"an env in a worker process: {refused}")
        return {"kind": kind, "envs": [a["snapshot"] for a in answers]}
    raise NotResumable(f"{kind} keeps state that a checkpoint does not save"
                       + (" (envs stepped in worker processes made without WorkerSnapshots)"
                          if "Subproc" in kind else ""))


def _set_layer_state(layer, saved: dict[str, Any]) -> None:
    if isinstance(layer, VecNormalize):
        layer.returns = np.array(saved["returns"])
    elif isinstance(layer, VecFrameStack):
        layer.stacked_obs.stacked_obs[...] = saved["stacked"]
    elif "state" in saved:
        layer.load_state_dict(saved["state"])
    elif "envs" in saved:
        if len(saved["envs"]) != layer.num_envs:
            raise ValueError(f"saved with {len(saved['envs'])} envs, this run has {layer.num_envs}")
        if isinstance(layer, SubprocVecEnv):
            for i, plain in enumerate(saved["envs"]):
                refused = layer.env_method("restore_plain", plain, indices=[i])[0]
                if refused is not None:
                    raise ValueError(f"env {i}: {refused}")
            return
        snaps = [snapshot_from_plain(env, plain) for env, plain in zip(layer.envs, saved["envs"])]
        for env, snap in zip(layer.envs, snaps):
            restore(env, snap)


def _random_state(device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_random_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


#: arrays a rollout buffer keeps from its last update, which the next update derives again from the
#: rollout (sb3-contrib's recurrent buffer: where each sequence starts): not part of the run
DERIVED_BUFFER_ARRAYS = ("seq_start_indices",)


def _buffer_arrays(buffer) -> dict[str, np.ndarray]:
    """The rollout buffer's storage (its arrays, less :data:`DERIVED_BUFFER_ARRAYS`)."""
    return {name: value for name, value in vars(buffer).items()
            if isinstance(value, np.ndarray) and name not in DERIVED_BUFFER_ARRAYS}


def _off_policy_state(model) -> dict[str, Any]:
    """What an off-policy run holds beside its replay buffer (saved apart, ``replay_buffer.npz``)
    and the counters its zip keeps: the generator of the action space, which draws the random
    actions before ``learning_starts`` and a DQN's ε-greedy ones, and a DQN's current ε, which
    the next action reads before the next step sets it."""
    from stable_baselines3.common.buffers import ReplayBuffer
    from stable_baselines3.common.noise import NormalActionNoise, VectorizedActionNoise

    if type(model.replay_buffer) is not ReplayBuffer:
        raise NotResumable(f"its {type(model.replay_buffer).__name__} is not saved as data")
    if getattr(model, "use_sde", False):
        raise NotResumable("gSDE's exploration matrix is not saved")
    noise = model.action_noise
    noises = noise.noises if isinstance(noise, VectorizedActionNoise) else [noise]
    # Gaussian noise draws from NumPy's stream, which is saved; any other noise keeps state of its own
    if any(n is not None and type(n) is not NormalActionNoise for n in noises):
        raise NotResumable(f"its action noise ({type(noise).__name__}) keeps state that a checkpoint does not save")
    if model.gradient_steps < 0:
        raise NotResumable("gradient_steps -1 takes its count from the rollout, which is not saved")
    rng = getattr(model.action_space, "_np_random", None)
    return {"action_space_rng": None if rng is None else rng.bit_generator.state,
            "exploration_rate": float(getattr(model, "exploration_rate", 0.0))}


def save_run_state(model, path: Path, pending_update: bool) -> None:
    """Write ``model``'s run state (see the module docstring) to ``path``. ``pending_update``:
    written at a rollout's end before its update (an on-policy run's rollout buffer is kept, and
    the resumed run updates from it first; an off-policy run makes its gradient steps first);
    else between an update and the next rollout. Raises :class:`NotResumable`, having written
    nothing, when some of the state is not data."""
    off_policy = getattr(model, "replay_buffer", None) is not None
    if not off_policy and getattr(model, "rollout_buffer", None) is None:
        raise NotResumable(f"{type(model).__name__} has neither a rollout buffer nor a replay buffer")
    lstm = getattr(model, "_last_lstm_states", None)
    tree = {
        "format": FORMAT,
        "num_timesteps": int(model.num_timesteps),
        "pending_update": bool(pending_update),
        "off_policy": _off_policy_state(model) if off_policy else None,
        "env": [_layer_state(layer) for layer in _vec_layers(model.env)],
        "last_obs": model._last_obs,
        "last_episode_starts": model._last_episode_starts,
        "lstm": None if lstm is None else (tuple(lstm.pi), tuple(lstm.vf)),
        "episodes": list(model.ep_info_buffer or []),
        "successes": list(model.ep_success_buffer or []),
        "rollout": ({"arrays": _buffer_arrays(model.rollout_buffer), "pos": int(model.rollout_buffer.pos),
                     "full": bool(model.rollout_buffer.full)} if pending_update and not off_policy else None),
        "random": _random_state(model.device),
        # what SB3's learn() sets when it starts and model.save writes: kept, so that a resumed run's
        # files (and the director's canonical sha256) are those of the run that went on
        "learn_start": {"num_timesteps_at_start": int(model._num_timesteps_at_start),
                        "last_original_obs": getattr(model, "_last_original_obs", None)},
    }
    if pending_update and not off_policy and model.rollout_buffer.generator_ready:
        raise NotResumable("the rollout buffer was already prepared for its update")
    try:
        save_plain(path, tree)
    except NotPlainData as exc:
        raise NotResumable(f"the run holds {exc}, which is not written as data") from None


def restore_run_state(model, folder: Path) -> Restored:
    """Put the run state saved in ``folder`` into ``model`` (built fresh with its recipe, its
    weights and counters already resumed from the same checkpoint) and into its envs.

    Returns ``Restored(exact=False)`` when the checkpoint has no run state (written before runs
    kept one, or of a run whose state is not data, as its progress says). A run state that does
    not fit this model and its envs is a :class:`UserError`, raised before any training: a run
    never goes on from a half-restored state.
    """
    path = Path(folder) / RUN_STATE
    if not path.exists():
        return Restored(exact=False, why=f"the checkpoint holds no {RUN_STATE}")
    fix = f"remove {path} to resume along another trajectory, or give a new --run-dir"
    try:
        tree = load_plain(path)
        if not isinstance(tree, dict) or tree.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT!r} file")
        if tree["num_timesteps"] != model.num_timesteps:
            raise ValueError(f"it was written at {tree['num_timesteps']} steps, the checkpoint's model at "
                             f"{model.num_timesteps}")
        layers = _vec_layers(model.env)
        kinds = [saved["kind"] for saved in tree["env"]]
        if kinds != [type(layer).__name__ for layer in layers]:
            raise ValueError(f"its envs were {' > '.join(kinds)}, this run's "
                             f"{' > '.join(type(layer).__name__ for layer in layers)}")
        rollout, off_policy = tree["rollout"], tree.get("off_policy")
        if (off_policy is not None) != (getattr(model, "replay_buffer", None) is not None):
            raise ValueError(f"it was written by an {'off' if off_policy is not None else 'on'}-policy run")
        if rollout is not None:
            mine = _buffer_arrays(model.rollout_buffer)
            # a file written before derived arrays were left out holds them (a fresh buffer has none yet)
            rollout["arrays"] = {name: array for name, array in rollout["arrays"].items()
                                 if name not in DERIVED_BUFFER_ARRAYS}
            for name, array in rollout["arrays"].items():
                if name not in mine or mine[name].shape != array.shape:
                    raise ValueError(f"its rollout buffer's {name} has shape {array.shape}, this run's "
                                     f"{getattr(mine.get(name), 'shape', None)}")
        for layer, saved in zip(layers, tree["env"]):
            _set_layer_state(layer, saved)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise UserError(f"cannot resume exactly from {path} ({str(exc).splitlines()[0][:160]}); {fix}") from None
    model._last_obs = tree["last_obs"]
    model._last_episode_starts = tree["last_episode_starts"]
    if tree["lstm"] is not None:
        lstm = model._last_lstm_states
        model._last_lstm_states = type(lstm)(*(tuple(t.to(model.device) for t in part) for part in tree["lstm"]))
    model.ep_info_buffer = _window(model, tree["episodes"])
    model.ep_success_buffer = _window(model, tree["successes"])
    if rollout is not None:
        buffer = model.rollout_buffer
        for name, array in rollout["arrays"].items():
            setattr(buffer, name, array)
        buffer.pos, buffer.full, buffer.generator_ready = rollout["pos"], rollout["full"], False
    if off_policy is not None:
        if off_policy["action_space_rng"] is not None:
            if getattr(model.action_space, "_np_random", None) is None:
                model.action_space.seed(0)  # a generator to put the saved state into
            model.action_space._np_random.bit_generator.state = off_policy["action_space_rng"]
        if hasattr(model, "exploration_rate"):
            model.exploration_rate = off_policy["exploration_rate"]
    model._last_original_obs = tree["learn_start"]["last_original_obs"]
    _set_random_state(tree["random"], model.device)
    return Restored(exact=True, pending_update=tree.get("pending_update", rollout is not None),
                    num_timesteps_at_start=tree["learn_start"]["num_timesteps_at_start"])


def _window(model, items: list) -> deque:
    return deque(items, maxlen=model._stats_window_size)


def finish_pending_update(model, total_timesteps: int) -> None:
    """Make the update of the rollout a resumed run was saved with (its first act, as the run
    would have made it had it not stopped)."""
    model._total_timesteps = total_timesteps  # as learn() sets it (a schedule may read it: RADIAL's guarded ramp)
    model._update_current_progress_remaining(model.num_timesteps, total_timesteps)
    if getattr(model, "replay_buffer", None) is None:
        model.train()
    elif model.num_timesteps > model.learning_starts and model.gradient_steps > 0:  # as OffPolicyAlgorithm.learn
        model.train(batch_size=model.batch_size, gradient_steps=model.gradient_steps)
