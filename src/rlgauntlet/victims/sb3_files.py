"""Reading Stable-Baselines3 files as data, without running code stored in them.

An SB3 ``.zip`` holds a JSON ``data`` file whose non-JSON fields are cloudpickled (with a
readable summary beside each), the policy weights (``policy.pth``, a torch state dict) and
optimizer state. Unpickling any field runs whatever code its author put there. By default
we read only what is plain data:

* the policy class from the readable ``__module__`` and ``__init__`` of the ``policy_class``
  field, accepted only when it is one of SB3's own policy classes (:data:`SB3_POLICIES`);
* the observation and action spaces from their readable fields (class, dtype, shape, bounds);
* ``policy_kwargs`` when they are plain JSON (``net_arch``, ``normalize_images``, ...);
* the weights with ``torch.load(weights_only=True)``.

A VecNormalize ``.pkl`` is read with an unpickler that knows only NumPy arrays and puts
inert stand-ins where SB3's classes were, so its statistics come back and no code runs.
Anything else (a custom policy class, an activation function in ``policy_kwargs``) needs
``allow_pickle=True`` (``--allow-pickle``), which trusts the file's author.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlgauntlet.errors import UserError

#: SB3's own policy classes and ours: (module, class name) as the zip's readable fields give them
SB3_POLICIES = {
    ("stable_baselines3.common.policies", "ActorCriticPolicy"),
    ("stable_baselines3.common.policies", "ActorCriticCnnPolicy"),
    ("stable_baselines3.dqn.policies", "DQNPolicy"),
    ("stable_baselines3.dqn.policies", "CnnPolicy"),
    ("stable_baselines3.sac.policies", "SACPolicy"),
    ("stable_baselines3.sac.policies", "CnnPolicy"),
    ("stable_baselines3.td3.policies", "TD3Policy"),
    ("stable_baselines3.td3.policies", "CnnPolicy"),
    # sb3-contrib's recurrent PPO (an LSTM actor and critic): victims.sb3.SB3RecurrentVictim
    ("sb3_contrib.common.recurrent.policies", "RecurrentActorCriticPolicy"),
    # ours: SB3's policies with MC Dropout / DropConnect layers (victims.dropout_policies)
    ("rlgauntlet.victims.dropout_policies", "DropoutDQNPolicy"),
    ("rlgauntlet.victims.dropout_policies", "DropoutDQNCnnPolicy"),
    ("rlgauntlet.victims.dropout_policies", "DropoutTD3Policy"),
    ("rlgauntlet.victims.dropout_policies", "DropoutActorCriticPolicy"),
    ("rlgauntlet.victims.dropout_policies", "DropoutActorCriticCnnPolicy"),
}
PICKLE_HINT = ("loading it would unpickle code stored in the file, which runs with your permissions; "
               "only if you trust its author, add --allow-pickle")


def read_sb3_zip(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """The zip's ``data`` (JSON, nothing unpickled) and its policy state dict (weights only)."""
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data").decode())
            weights = io.BytesIO(archive.read("policy.pth"))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise UserError(f"cannot read {path} as a Stable-Baselines3 model ({type(exc).__name__}); "
                        "give a .zip written by SB3's model.save") from None
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - weights_only refuses anything but tensors and containers
        raise UserError(f"{path}: its policy weights are not a plain state dict ({type(exc).__name__}); "
                        + PICKLE_HINT) from None
    if not isinstance(data, dict) or "policy_class" not in data:
        raise UserError(f"{path} holds no SB3 policy; give a .zip written by SB3's model.save")
    return data, state


def policy_class(field: Any, path: Path) -> type:
    """SB3's policy class named by the readable summary of the ``policy_class`` field."""
    if not isinstance(field, dict):
        raise UserError(f"{path}: unreadable policy class; " + PICKLE_HINT)
    module = field.get("__module__")
    match = re.match(r"<function (\w+)\.__init__", str(field.get("__init__", "")))
    key = (module, match.group(1) if match else None)
    if key not in SB3_POLICIES:
        raise UserError(f"{path}: its policy class {key[0]}.{key[1]} is not one of Stable-Baselines3's own; "
                        + PICKLE_HINT)
    import importlib

    return getattr(importlib.import_module(module), key[1])


def _numbers(text: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array from NumPy's printed form (``[-4.8 -inf 0.41887903 -inf]``); a summarised one
    (with ``...``) cannot be read."""
    if "..." in text:
        raise ValueError(text)
    values = np.array([float(t) for t in text.replace("[", " ").replace("]", " ").split()], dtype=np.float64)
    return values.reshape(shape).astype(dtype)


def space(field: Any, what: str, path: Path) -> gym.Space:
    """A Box or Discrete space rebuilt from the readable summary SB3 stores beside the pickle."""
    if not isinstance(field, dict):
        raise UserError(f"{path}: unreadable {what}; " + PICKLE_HINT)
    kind = str(field.get(":type:", ""))
    try:
        if kind.endswith("discrete.Discrete'>"):
            return gym.spaces.Discrete(int(field["n"]), start=int(field.get("start", 0)))  # n, start: JSON numbers
        if kind.endswith("box.Box'>"):
            dtype = np.dtype(field["dtype"])
            shape = tuple(int(n) for n in field["_shape"])
            if dtype == np.uint8 and len(shape) == 3:  # an image: SB3 only treats [0, 255] frames as images
                return gym.spaces.Box(0, 255, shape, np.uint8)
            return gym.spaces.Box(_numbers(field["low"], shape, dtype), _numbers(field["high"], shape, dtype),
                                  shape, dtype)
    except (KeyError, ValueError, TypeError):
        pass
    raise UserError(f"{path}: the {what} ({kind or 'unknown'}) cannot be read without unpickling; " + PICKLE_HINT)


#: classes ``policy_kwargs`` may name, by reference: torch's activations and SB3's feature
#: extractors (constructing them runs only their own, known code)
_KWARGS_CLASSES = {
    **{("torch.nn.modules.activation", n): n for n in ("ReLU", "Tanh", "ELU", "LeakyReLU", "GELU", "SiLU", "Sigmoid",
                                                         "Softplus", "Mish", "Hardtanh", "SELU", "CELU")},
    **{("stable_baselines3.common.torch_layers", n): n for n in ("FlattenExtractor", "NatureCNN", "CombinedExtractor")},
    ("rlgauntlet.victims.minatar_cnn", "MinAtarCNN"): "MinAtarCNN",  # ours: the MinAtar paper's body
    ("rlgauntlet.victims.linear_embedding", "LinearEmbedding"): "LinearEmbedding",  # ours: the LSTM releases' first layer
}


class _KwargsUnpickler(pickle.Unpickler):
    """``policy_kwargs``: plain containers and numbers, the classes of :data:`_KWARGS_CLASSES`,
    and optimizer classes as inert placeholders (a victim never builds its optimizer)."""

    def find_class(self, module: str, name: str):
        import importlib

        if (module, name) in _KWARGS_CLASSES:
            return getattr(importlib.import_module(module), name)
        if module.startswith("torch.optim."):
            return _Inert
        raise pickle.UnpicklingError(f"{module}.{name}")


def policy_kwargs(field: Any, path: Path) -> dict:
    """``policy_kwargs``: plain JSON, or a pickle that names only allowed classes (SB3's A2C
    stores its RMSprop optimizer there by default)."""
    if field is None:
        return {}
    if isinstance(field, dict) and ":serialized:" not in field:
        return dict(field)
    try:
        import base64

        kwargs = _KwargsUnpickler(io.BytesIO(base64.b64decode(field[":serialized:"]))).load()
    except (pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError) as exc:
        raise UserError(f"{path}: its policy_kwargs refer to {exc}, which is not an SB3 or torch building block; "
                        + PICKLE_HINT) from None
    if not isinstance(kwargs, dict):
        raise UserError(f"{path}: its policy_kwargs are not a dict; " + PICKLE_HINT)
    return {k: v for k, v in kwargs.items() if k not in ("optimizer_class", "optimizer_kwargs")}


class _Inert:
    """Stands in for a pickled object: keeps its state as attributes, runs no code of its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)


#: NumPy's array and scalar reconstruction: plain data
_NUMPY = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
          ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
          ("numpy._core.multiarray", "scalar")}
#: what a VecNormalize pickle references besides NumPy: SB3's and Gymnasium's classes, NumPy's RNG
_INERT_MODULES = ("stable_baselines3.common.vec_env.vec_normalize", "stable_baselines3.common.running_mean_std",
                  "gymnasium.spaces.", "numpy.random.")


class _DataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY:
            import importlib

            return getattr(importlib.import_module(module), name)
        if module.startswith(_INERT_MODULES):
            return _Inert
        raise pickle.UnpicklingError(f"{module}.{name}")


def load_data_pickle(path: Path, allow_pickle: bool = False) -> Any:
    """Unpickle ``path`` (a VecNormalize file) with :class:`_DataUnpickler`, or plainly when
    ``allow_pickle``. A pickle that needs anything else is a :class:`UserError`."""
    with open(path, "rb") as f:
        if allow_pickle:
            return pickle.load(f)
        try:
            return _DataUnpickler(f).load()
        except pickle.UnpicklingError as exc:
            raise UserError(f"{path} refers to {exc}, which is not plain data; " + PICKLE_HINT) from None


# -- the zoo's agent files: what evaluation needs, nothing that runs code ------------------------

#: ``data`` fields an agent file keeps: what the reader above uses (the policy class, the spaces,
#: the policy's keyword arguments, gSDE) and the hyperparameters that tell PPO from A2C and TD3
#: from DDPG. Training state (the last observations, episode buffers, schedules) is left out.
AGENT_DATA_FIELDS = ("policy_class", "observation_space", "action_space", "policy_kwargs", "use_sde",
                     "clip_range", "policy_delay", "target_noise_clip")
#: fields whose pickled form is kept (so that SB3's own reader, behind --allow-pickle, still
#: rebuilds them); the others keep only their readable summary or plain value
_KEEP_SERIALIZED = ("policy_class", "observation_space", "action_space", "policy_kwargs")
#: target networks: copies of the online networks that only training reads
TARGET_NETWORKS = {"q_net_target.": "q_net.", "actor_target.": "actor.", "critic_target.": "critic."}


def without_target_networks(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The policy state dict minus the target networks (DQN's, TD3's, DDPG's and SAC's)."""
    return {k: v for k, v in state.items() if not k.startswith(tuple(TARGET_NETWORKS))}


def with_target_networks(state: dict[str, torch.Tensor], expected: list[str]) -> dict[str, torch.Tensor]:
    """``state`` completed with the target networks a policy expects (``expected``: its state
    dict's keys), each a copy of its online network, as SB3 itself initialises them. A state
    that already has them is returned unchanged."""
    out = dict(state)
    for key in expected:
        if key not in out:
            for target, online in TARGET_NETWORKS.items():
                if key.startswith(target) and online + key[len(target):] in state:
                    out[key] = state[online + key[len(target):]].clone()
    return out


def write_agent_zip(source: Path, target: Path) -> None:
    """Write the agent file the zoo ships: an SB3-layout zip that holds only ``data`` (the
    fields of :data:`AGENT_DATA_FIELDS`) and ``policy.pth`` (the policy weights without target
    networks, readable with ``torch.load(weights_only=True)``). No optimizer state, no replay
    buffer, no training state. :func:`read_sb3_zip` reads it like any SB3 zip; ``rlgauntlet zoo
    export`` turns it back into a zip SB3 itself loads."""
    data, state = read_sb3_zip(source)
    slim = {}
    for key in AGENT_DATA_FIELDS:
        if key in data:
            value = data[key]
            if isinstance(value, dict) and key not in _KEEP_SERIALIZED:
                value = {k: v for k, v in value.items() if k != ":serialized:"}
            slim[key] = value
    weights = io.BytesIO()
    torch.save(without_target_networks(state), weights)
    _write_zip(target, [("data", _ADDRESS.sub(b">", json.dumps(slim, indent=2).encode())),
                        ("policy.pth", weights.getvalue())])


#: SB3's readable summaries name each method of the policy class with its memory address
#: (``<function Policy.forward at 0x7f…>``), which differs from process to process
_ADDRESS = re.compile(rb" at 0x[0-9a-fA-F]+>")
#: every entry of the zips we write is dated here (the zip format's earliest date), not at the write
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


def _write_zip(target: Path | io.BytesIO, entries: list[tuple[str, bytes]]) -> None:
    """A deflated zip of ``entries`` (name, bytes) whose bytes depend on nothing else."""
    with zipfile.ZipFile(target, "w") as archive:
        for name, payload in entries:
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, payload)


def write_canonical_zip(source: Path, target: Path | io.BytesIO) -> None:
    """Copy SB3 zip ``source`` to ``target`` in a form whose bytes, and so whose sha256, depend only
    on what the model holds: every entry dated 1980-01-01, and ``data`` without the wall-clock
    times of the training (:data:`_WALL_CLOCK_FIELDS`) and without the memory addresses in its
    readable summaries. Two trainings that end with the same weights then write the same file,
    where ``model.save`` writes the time of the save, of the training's start and of its recent
    episodes, and the process's addresses. SB3 rebuilds the dropped fields when training starts
    again; both its loader and :func:`policy_class` read names and serialized fields, never
    addresses."""
    with zipfile.ZipFile(source) as archive:
        entries = [(name, archive.read(name)) for name in archive.namelist()]
    _write_zip(target, [(name, _canonical_data(payload) if name == "data" else payload) for name, payload in entries])


def canonical_sha256(source: Path) -> str:
    """The sha256 of :func:`write_canonical_zip`'s copy of ``source``, computed without writing it."""
    import hashlib

    buffer = io.BytesIO()
    write_canonical_zip(source, buffer)
    return hashlib.sha256(buffer.getvalue()).hexdigest()


#: fields of SB3's ``data`` that hold wall-clock times: the training's start, and each recent
#: episode's ``t`` in its statistics buffer
_WALL_CLOCK_FIELDS = ("start_time", "ep_info_buffer")


def _canonical_data(payload: bytes) -> bytes:
    """``data`` without :data:`_WALL_CLOCK_FIELDS` and addresses; ValueError where it is not a JSON object."""
    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError("an SB3 zip's data holds a JSON object")
    for key in _WALL_CLOCK_FIELDS:
        data.pop(key, None)
    return _ADDRESS.sub(b">", json.dumps(data, indent=4).encode())


def write_vecnormalize_json(source: Path, target: Path) -> None:
    """VecNormalize statistics as plain numbers (JSON): what evaluation needs of them."""
    vn = load_data_pickle(source)
    rms = vn.obs_rms
    target.write_text(json.dumps({
        "format": "rlgauntlet.vecnormalize/1",
        "norm_obs": bool(vn.norm_obs), "clip_obs": float(vn.clip_obs), "epsilon": float(vn.epsilon),
        "obs_mean": np.asarray(rms.mean, dtype=np.float64).tolist(),
        "obs_var": np.asarray(rms.var, dtype=np.float64).tolist(),
        "obs_count": float(getattr(rms, "count", 1e4)),
    }, indent=1) + "\n")


def read_vecnormalize_json(path: Path) -> Any:
    """Statistics written by :func:`write_vecnormalize_json`, shaped like SB3's VecNormalize
    (``obs_rms.mean``, ``obs_rms.var``, ``obs_rms.count``, ``clip_obs``, ``epsilon``, ``norm_obs``)."""
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict) or raw.get("format") != "rlgauntlet.vecnormalize/1":
        raise ValueError("not an rlgauntlet VecNormalize statistics file")
    stats, rms = _Inert(), _Inert()
    rms.mean = np.asarray(raw["obs_mean"], dtype=np.float64)
    rms.var = np.asarray(raw["obs_var"], dtype=np.float64)
    rms.count = float(raw["obs_count"])
    stats.obs_rms, stats.clip_obs, stats.epsilon, stats.norm_obs = rms, float(raw["clip_obs"]), float(raw["epsilon"]), \
        bool(raw["norm_obs"])
    return stats


def write_zoo_form(src: Path, target: Path) -> None:
    """Write agent file ``src`` as the zoo keeps it: an SB3 zip as :func:`write_agent_zip` (no
    optimizer state, no target networks), a VecNormalize pickle as plain numbers
    (:func:`write_vecnormalize_json`), anything else copied. The zoo's writer (``zoo.add_zoo_entry``)."""
    import shutil

    src = Path(src)
    if src.suffix == ".zip":
        write_agent_zip(src, target)
    elif src.suffix == ".pkl":
        write_vecnormalize_json(src, target)
    else:
        shutil.copyfile(src, target)
