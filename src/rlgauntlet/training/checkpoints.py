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

A checkpoint that travels to and from a lent accelerator machine may hold its policy and
optimizer as two files instead of the zip (``policy.pt``, ``optimizer.pt``: each under the 16
MiB a file may bring back, where the zip of a Pong PPO is 20 MiB); :func:`resume` reads either.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch

from rlgauntlet.errors import UserError
from rlgauntlet.victims.sb3_files import PICKLE_HINT, load_data_pickle

#: the fix for a checkpoint file that holds more than data (no option unpickles it: a checkpoint
#: rlgauntlet writes never needs to be)
NOT_OURS = ("it was not written by rlgauntlet's checkpoints; remove the run folder's checkpoint to start afresh, "
            "or give a new --run-dir")
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
        raise UserError(f"the checkpoint {path} holds more than weights ({type(exc).__name__}), which is never "
                        f"unpickled: {NOT_OURS}") from None
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
        if bool(saved.norm_obs) != bool(norm.norm_obs):
            raise UserError(f"{path} was saved {'with' if saved.norm_obs else 'without'} observation normalisation "
                            f"and this run trains {'with' if norm.norm_obs else 'without'} it; resume it with the "
                            "same settings, or give a new --run-dir")
        # SB3 keeps no obs_rms where observations are not normalised (a director's reward-only scaling)
        for name in ("obs_rms", "ret_rms") if saved.norm_obs else ("ret_rms",):
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
    """The replay buffer of an off-policy model as plain arrays (``.npz``, no pickle), compressed:
    a buffer not yet full is mostly zeros, and game frames compress well (MinAtar Breakout's DQN
    buffer: benchmarks/results/run_state_cost.json)."""
    buffer = model.replay_buffer
    arrays = {name: getattr(buffer, name) for name in _BUFFER_ARRAYS if getattr(buffer, name, None) is not None}
    with open(path, "wb") as f:
        np.savez_compressed(f, pos=np.int64(buffer.pos), full=np.bool_(buffer.full), **arrays)


def load_replay_buffer(model, folder: Path, allow_pickle: bool = False) -> bool:
    """Restore the replay buffer saved in ``folder``; False when there is none."""
    npz, pkl = folder / "replay_buffer.npz", folder / "replay_buffer.pkl"
    if npz.exists():
        buffer = model.replay_buffer
        try:
            with np.load(npz, allow_pickle=False) as saved:
                for name in _BUFFER_ARRAYS:
                    if name in saved.files:
                        if saved[name].shape != getattr(buffer, name).shape:
                            raise UserError(f"{npz}: {name} has shape {saved[name].shape}, this recipe's buffer "
                                            f"{getattr(buffer, name).shape}; give a new --run-dir")
                        getattr(buffer, name)[...] = saved[name]
                buffer.pos, buffer.full = int(saved["pos"]), bool(saved["full"])
        except (ValueError, KeyError, OSError, zipfile.BadZipFile) as exc:  # object arrays are refused, never unpickled
            raise UserError(f"{npz} is not a replay buffer of plain arrays ({str(exc).splitlines()[0][:120]}); "
                            "remove the run folder's checkpoint to start afresh, or give a new --run-dir") from None
        return True
    if pkl.exists():
        if not allow_pickle:
            raise UserError(f"{pkl} is a pickled replay buffer (an earlier version's); " + PICKLE_HINT)
        model.load_replay_buffer(pkl)
        return True
    return False


def replace_folder(tmp: Path, final: Path) -> None:
    """Put the finished checkpoint folder ``tmp`` in place of ``final``: the old one is moved
    aside first and removed last, so a kill at any moment leaves one complete checkpoint (between
    the two renames, as ``FINAL.old``: :func:`recover_folders` puts it back)."""
    old = final.with_name(final.name + ".old")
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)


#: the agent's files a snapshot or a kept checkpoint holds (what evaluation and the zoo read; not the
#: optimizer state)
AGENT_FILES = ("model.zip", "vecnormalize.pkl", "progress.json")


def copy_agent_files(source: Path, dest: Path) -> Path:
    """The agent files (:data:`AGENT_FILES`) of folder ``source`` copied into a fresh ``DEST.tmp``
    folder (returned), to be put in place with :func:`replace_folder`."""
    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name in AGENT_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, tmp / name)
    return tmp


def read_selection(folder: Path) -> dict | None:
    """``folder/selection.json`` (a selecting run's kept checkpoint: iteration, score, rule), or
    None when there is none; a file that is not one we write is one :class:`UserError`."""
    path = folder / "selection.json"
    if not path.exists():
        return None
    try:
        selection = json.loads(path.read_text())
        float(selection["score"]), int(selection["iteration"])
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path} is not a selection rlgauntlet wrote ({type(err).__name__}: {err}); remove the "
                        f"{folder.name} folder and rerun the training command to select again") from None
    return selection


def recover_folders(root: Path) -> list[Path]:
    """Undo what a kill between :func:`replace_folder`'s two renames left under ``root``: a folder
    moved aside (``NAME.old``) whose replacement never took its place gets its place back. It is
    complete (it was the folder in use), so a training resumes from it rather than from nothing.
    Returns the folders put back; called where a training starts or looks for its checkpoint."""
    root = Path(root)
    finals = [old.with_name(old.name[: -len(".old")]) for old in sorted(root.rglob("*.old"))] if root.is_dir() else []
    return [final for final in finals if _put_back(final)]


def _put_back(final: Path) -> bool:
    """Rename ``FINAL.old`` to ``final`` where ``final`` is missing; whether it did."""
    old = final.with_name(final.name + ".old")
    if old.is_dir() and not final.exists():
        old.rename(final)
        return True
    return False


def has_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` holds a checkpoint to resume (the zip, or the policy and optimizer files);
    one a kill left moved aside is put back first (:func:`recover_folders`)."""
    _put_back(folder)
    return (folder / "model.zip").exists() or ((folder / "policy.pt").exists() and (folder / "optimizer.pt").exists())


def load_checkpoint_parts(model, folder: Path, progress: dict) -> None:
    """Resume from ``policy.pt`` and ``optimizer.pt`` (weights only) and the step count of
    ``progress.json``: on-policy algorithms (one optimizer, no replay buffer) only."""
    if getattr(model, "replay_buffer", None) is not None or not hasattr(model.policy, "optimizer"):
        raise UserError(f"{folder} holds its policy and optimizer as separate files, which only on-policy "
                        "algorithms (PPO, A2C) resume from; give the checkpoint's model.zip")
    try:
        policy = torch.load(folder / "policy.pt", map_location=model.device, weights_only=True)
        optimizer = torch.load(folder / "optimizer.pt", map_location=model.device, weights_only=True)
        model.policy.load_state_dict(policy)
        model.policy.optimizer.load_state_dict(optimizer)
    except pickle.UnpicklingError as exc:
        raise UserError(f"{folder}'s policy.pt or optimizer.pt holds more than weights ({type(exc).__name__}), "
                        f"which is never unpickled: {NOT_OURS}") from None
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        raise UserError(f"cannot resume from {folder}'s policy.pt and optimizer.pt ({str(exc).splitlines()[0][:120]}); "
                        "resume it with the same preset and settings, or give a new --run-dir") from None
    model.num_timesteps = int(progress.get("num_timesteps") or (progress.get("history") or [{"steps": 0}])[-1]["steps"])


def resume(model, folder: Path, progress: dict) -> None:
    """Resume ``model`` (built fresh with its recipe) from the checkpoint in ``folder``: the zip
    when there is one, else the policy and optimizer files."""
    if (folder / "model.zip").exists():
        load_checkpoint_zip(model, folder / "model.zip")
    else:
        load_checkpoint_parts(model, folder, progress)
    if progress.get("schedule") and hasattr(model, "load_schedule_state"):
        model.load_schedule_state(progress["schedule"])  # e.g. where RADIAL's guarded ε ramp stands


def compact_optimizer_state(source: Path, target: Path) -> None:
    """Copy an optimizer state dict (``optimizer.pt``) with its floating-point state (Adam's
    moments) in bfloat16: half the bytes, so that a Pong PPO's checkpoint fits the limits of a
    lent machine's transfers and working tree. bfloat16 keeps float32's exponent range (a
    squared-gradient moment never underflows to 0, as it would in float16) and about three
    significant digits; ``load_state_dict`` casts the moments back to the parameters' dtype."""
    state = torch.load(source, map_location="cpu", weights_only=True)
    for per_param in state.get("state", {}).values():
        for key, value in per_param.items():
            if key != "step" and torch.is_tensor(value) and value.is_floating_point():
                per_param[key] = value.to(torch.bfloat16)
    torch.save(state, target)
