"""Resuming a training checkpoint without running code stored in it.

A checkpoint folder (``checkpoint/``) holds SB3's ``model.zip``, the VecNormalize statistics
and, for off-policy algorithms, the replay buffer. SB3's own ``load``, ``VecNormalize.load``
and ``load_replay_buffer`` unpickle those files, so a checkpoint someone left in a
``--run-dir`` would run its author's code when resumed. Here a resume builds the model fresh
from its recipe and reads the checkpoint as data:

* every ``*.pth`` entry of the zip (policy, optimizers, entropy coefficient) with
  ``torch.load(weights_only=True)``, and the step counters from the zip's JSON ``data``;
* VecNormalize statistics through the data-only unpickler (``victims.sb3_files``);
* the replay buffer as plain arrays (``replay_buffer.npz``, written by :func:`save_replay_buffer`);
  a pickled ``replay_buffer.pkl`` of an earlier version is read only with ``allow_pickle``.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import torch

from rlgauntlet.errors import UserError
from rlgauntlet.victims.sb3_files import PICKLE_HINT, load_data_pickle

#: scalar training state kept in the zip's JSON ``data`` and restored on resume
_COUNTERS = ("num_timesteps", "_n_updates", "_episode_num", "_n_calls")
#: replay buffer arrays (those a buffer has) and scalars
_BUFFER_ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def load_checkpoint_zip(model, path: Path) -> None:
    """Put the weights, optimizer states, tensors and step counters of SB3 zip ``path`` into
    ``model`` (built fresh with the same recipe), reading nothing but data."""
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data").decode())
            tensors = {name[:-4]: torch.load(io.BytesIO(archive.read(name)), map_location=model.device,
                                             weights_only=True)
                       for name in archive.namelist() if name.endswith(".pth")}
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise UserError(f"cannot read the checkpoint {path} ({type(exc).__name__}); remove the run folder's "
                        "checkpoint to start afresh, or give a new --run-dir") from None
    except Exception as exc:  # noqa: BLE001 - weights_only refuses anything but tensors and containers
        raise UserError(f"the checkpoint {path} holds more than weights ({type(exc).__name__}); " + PICKLE_HINT) from None
    variables = tensors.pop("pytorch_variables", {}) or {}
    try:
        model.set_parameters(tensors, exact_match=True, device=model.device)
        for name, value in variables.items():
            if value is not None:
                getattr(model, name).data.copy_(value.data)
    except (ValueError, RuntimeError, KeyError, AttributeError) as exc:
        raise UserError(f"the checkpoint {path} does not fit this recipe ({str(exc).splitlines()[0][:120]}); "
                        "resume it with the same preset and settings, or give a new --run-dir") from None
    for key in _COUNTERS:
        if isinstance(data.get(key), int):
            setattr(model, key, data[key])


def restore_vecnormalize(norm, path: Path) -> None:
    """Give VecNormalize ``norm`` the statistics saved in ``path`` (read as data)."""
    saved = load_data_pickle(Path(path))
    try:
        for name in ("obs_rms", "ret_rms"):
            mine, theirs = getattr(norm, name), getattr(saved, name)
            if np.shape(theirs.mean) != np.shape(mine.mean):
                raise UserError(f"{path}: {name} has shape {np.shape(theirs.mean)}, the env needs "
                                f"{np.shape(mine.mean)}; give a new --run-dir")
            mine.mean, mine.var, mine.count = (np.asarray(theirs.mean, dtype=np.float64).copy(),
                                               np.asarray(theirs.var, dtype=np.float64).copy(), float(theirs.count))
        norm.clip_obs, norm.clip_reward = float(saved.clip_obs), float(saved.clip_reward)
        norm.gamma, norm.epsilon = float(saved.gamma), float(saved.epsilon)
        norm.norm_obs, norm.norm_reward = bool(saved.norm_obs), bool(saved.norm_reward)
    except AttributeError as exc:
        raise UserError(f"{path} holds no VecNormalize statistics ({exc}); give a new --run-dir") from None


def save_replay_buffer(model, path: Path) -> None:
    """The replay buffer of an off-policy model as plain arrays (``.npz``, no pickle)."""
    buffer = model.replay_buffer
    arrays = {name: getattr(buffer, name) for name in _BUFFER_ARRAYS if getattr(buffer, name, None) is not None}
    with open(path, "wb") as f:
        np.savez(f, pos=np.int64(buffer.pos), full=np.bool_(buffer.full), **arrays)


def load_replay_buffer(model, folder: Path, allow_pickle: bool = False) -> bool:
    """Restore the replay buffer saved in ``folder``; False when there is none."""
    npz, pkl = folder / "replay_buffer.npz", folder / "replay_buffer.pkl"
    if npz.exists():
        buffer = model.replay_buffer
        with np.load(npz, allow_pickle=False) as saved:
            for name in _BUFFER_ARRAYS:
                if name in saved.files:
                    if saved[name].shape != getattr(buffer, name).shape:
                        raise UserError(f"{npz}: {name} has shape {saved[name].shape}, this recipe's buffer "
                                        f"{getattr(buffer, name).shape}; give a new --run-dir")
                    getattr(buffer, name)[...] = saved[name]
            buffer.pos, buffer.full = int(saved["pos"]), bool(saved["full"])
        return True
    if pkl.exists():
        if not allow_pickle:
            raise UserError(f"{pkl} is a pickled replay buffer (an earlier version's); " + PICKLE_HINT)
        model.load_replay_buffer(pkl)
        return True
    return False
