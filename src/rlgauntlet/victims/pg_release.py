"""Agents of the ``policy_gradients`` release format (the SA-PPO / ATLA / PA-ATLA MuJoCo releases),
read as data: ``pg:PATH.model``.

A release file is ``torch.save`` of a dict with ``policy_model`` and ``val_model`` (state dicts),
their optimizers and ``envs``: pickled ``policy_gradients.custom_env.Env`` objects whose
``state_filter`` is a ``ZFilter`` (center, scale, clip) over a ``RunningStat`` (``_n``, ``_M``,
``_S``), beside gym env and space objects. Attack files add ``adversary_policy_model`` and the
adversary's value net and optimizers. Some files use torch's zip format, some the legacy one.

Nothing of ``policy_gradients`` or gym is imported: an allow-listed unpickler turns their
records into plain values (:class:`Record`: the class name and the pickled state), and refuses
any other global with one line that names it. The torch and numpy globals a tensor or an array
needs are the only callables it hands out.

What the authors' code computes, rebuilt (``policy_gradients/models.py``, ``torch_utils.py``):

* the state filter: ``x = clip((obs − M) / (std + 1e-8), −clip, clip)`` with ``std = √(S / (n − 1))``
  (``√(M²)`` for n ≤ 1), centring and scaling only where the ZFilter's flags say so, frozen at
  the released statistics (evaluation reads them and never updates them);
* ``CtsPolicy``: tanh affine layers, then ``final_mean``; the standard deviation is
  ``exp(log_stdev)``, the same for every state; the papers act deterministically (the mean);
* ``CtsLSTMPolicy``: ``embedding_layer`` → one-layer LSTM → ``output_layer`` on the new hidden
  state ``h_t`` (the release's inference mode, one state at a time); the state starts at zero
  each episode and is carried across steps (:class:`PGLSTMVictim`, a recurrent victim).

Budgets are in the filtered space (``normalized``), as in the papers.

Example:
    >>> victim = load_pg("runs/ATLA_robust_RL/src/models/atla_release/PPO/model-ppo-hopper.model",
    ...                  env.observation_space, env.action_space)      # doctest: +SKIP
"""

from __future__ import annotations

import collections
import pickle
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import HeldStateSteps, PolicyOutput, Victim, as_tensor, choose_dtype, flatten_chain
from rlgauntlet.victims.mlp_vjp import output_and_vjp, plain_mlp

#: the release's own classes and gym's, read as records (never imported)
RECORD_MODULES = ("policy_gradients.", "gym.")
#: the Gymnasium tasks (the id before ``-v``) a release may run on, by the gym MuJoCo env class its
#: file names (``envs[0].env.env``); AntContactForces is this project's Ant with gym -v2's contact
#: forces in the observation (``envs.presets``); a task's MuJoCo 1.5 form (``HopperMuJoCo15``) is the task
TASKS = {"HopperEnv": ("Hopper",), "Walker2dEnv": ("Walker2d",), "HalfCheetahEnv": ("HalfCheetah",),
         "AntEnv": ("Ant", "AntContactForces"), "HumanoidEnv": ("Humanoid",), "HumanoidStandupEnv": ("HumanoidStandup",),
         "SwimmerEnv": ("Swimmer",), "ReacherEnv": ("Reacher",), "InvertedPendulumEnv": ("InvertedPendulum",),
         "InvertedDoublePendulumEnv": ("InvertedDoublePendulum",)}
STORAGES = ("FloatStorage", "DoubleStorage", "HalfStorage", "LongStorage", "IntStorage", "ByteStorage", "BoolStorage")


def _callables() -> dict[tuple[str, str], object]:
    """The callables a tensor or an array in a release file needs, by (module, name)."""
    import codecs

    from numpy._core import multiarray

    out: dict[tuple[str, str], object] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
        ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
        ("numpy", "dtype"): np.dtype,
        ("numpy", "ndarray"): np.ndarray,
        ("_codecs", "encode"): codecs.encode,
    }
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):  # numpy 1 files and numpy 2 files
        out[(module, "_reconstruct")] = multiarray._reconstruct
        out[(module, "scalar")] = multiarray.scalar
    return out


CALLABLES = _callables()


class Record:
    """A pickled object of the release's code or of gym, as plain data: ``name`` (module.Class),
    ``args`` (what it was constructed with) and ``state`` (its pickled attributes)."""

    name = ""
    args: tuple = ()
    kwargs: dict = {}
    state: dict = {}

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs, self.state = args, kwargs, {}

    def __setstate__(self, state) -> None:
        self.state = state if isinstance(state, dict) else {"state": state}

    def __repr__(self) -> str:
        return f"Record({self.name})"


_RECORD_CLASSES: dict[str, type] = {}


def _record_class(name: str) -> type:
    if name not in _RECORD_CLASSES:
        _RECORD_CLASSES[name] = type("Record", (Record,), {"name": name})
    return _RECORD_CLASSES[name]


class ReleaseUnpickler(pickle.Unpickler):
    """Unpickles a release file as data: records for the release's and gym's classes, the few
    torch and numpy callables a tensor or array needs, and nothing else."""

    path = "the file"

    def find_class(self, module: str, name: str):
        if (module, name) in CALLABLES:
            return CALLABLES[(module, name)]
        if module == "torch" and name in STORAGES:
            return getattr(torch, name)
        if module.startswith(RECORD_MODULES) or module == "numpy.random._pickle":
            return _record_class(f"{module}.{name}")
        raise UserError(f"{self.path} holds the global {module}.{name}, which a policy_gradients release file "
                        "never needs; it was not loaded (an agent file is data, never code)")


def _pickle_module(path: Path) -> types.ModuleType:
    unpickler = type("ReleaseUnpickler", (ReleaseUnpickler,), {"path": str(path)})
    module = types.ModuleType("rlgauntlet_release_pickle")
    module.Unpickler = unpickler
    module.load = lambda f, **kwargs: unpickler(f, **kwargs).load()
    return module


@dataclass
class StateFilter:
    """The release's ZFilter, frozen: ``x = clip((obs − mean) / (std + 1e-8), −clip, clip)``
    with centring and scaling as its flags say (see the module docstring)."""

    mean: np.ndarray
    std: np.ndarray
    center: bool
    scale: bool
    clip: float | None

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        mean = torch.as_tensor(self.mean, dtype=obs.dtype, device=obs.device)
        std = torch.as_tensor(self.std, dtype=obs.dtype, device=obs.device)
        x = obs
        if self.center:
            x = x - mean
        if self.scale:
            x = x / (std + 1e-8) if self.center else (x - mean) / (std + 1e-8) + mean
        if self.clip:
            x = x.clamp(-self.clip, self.clip)
        return x


@dataclass
class ReleaseFile:
    """What a release file holds, as plain values."""

    path: Path
    policy: dict[str, torch.Tensor]
    state_filter: StateFilter | None
    keys: list[str]
    adversary: dict[str, torch.Tensor] | None = None
    extra: dict = field(default_factory=dict)
    #: the gym env class the file's env object is (e.g. ``gym.envs.mujoco.walker2d.Walker2dEnv``),
    #: or None where the file does not say
    env_class: str | None = None

    @property
    def recurrent(self) -> bool:
        return "lstm.weight_ih_l0" in self.policy

    @property
    def obs_dim(self) -> int:
        first = self.policy["embedding_layer.weight" if self.recurrent else "affine_layers.0.weight"]
        return int(first.shape[1])

    @property
    def action_dim(self) -> int:
        return int(self.policy["log_stdev"].shape[0])


def _running_stat(record: Record) -> tuple[np.ndarray, np.ndarray]:
    """(mean, std) of a RunningStat record, as ``torch_utils.RunningStat`` computes them."""
    n, m, s = record.state["_n"], np.asarray(record.state["_M"], dtype=np.float64), \
        np.asarray(record.state["_S"], dtype=np.float64)
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0 or m.shape != s.shape or m.ndim != 1:
        raise ValueError(f"_n {n!r}, _M of shape {m.shape}, _S of shape {s.shape}")
    var = s / (n - 1) if n > 1 else np.square(m)
    return m, np.sqrt(var)


def _state_filter(env_record: object, path: Path) -> StateFilter | None:
    """The ZFilter in an Env record's chain of state filters (None: an Identity, no filter)."""
    if not isinstance(env_record, Record) or "state_filter" not in env_record.state:
        raise UserError(f"{path}: its envs hold no policy_gradients Env with a state filter; "
                        "is it a policy_gradients release file?")
    item = env_record.state["state_filter"]
    while isinstance(item, Record):
        if item.name.endswith("torch_utils.ZFilter"):
            if not {"rs", "center", "scale", "clip"} <= item.state.keys():
                raise UserError(f"{path}: its ZFilter lacks {sorted({'rs', 'center', 'scale', 'clip'} - item.state.keys())}; "
                                "is it a policy_gradients release file?")
            rs = item.state["rs"]
            if not isinstance(rs, Record) or not {"_n", "_M", "_S"} <= rs.state.keys():
                raise UserError(f"{path}: its ZFilter's running statistics lack _n, _M or _S; the file is damaged "
                                "or not a policy_gradients release")
            try:
                mean, std = _running_stat(rs)
            except (TypeError, ValueError) as exc:
                raise UserError(f"{path}: its ZFilter's running statistics are not one count and two vectors of one "
                                f"size ({exc}); the file is damaged") from None
            return StateFilter(mean, std, bool(item.state["center"]), bool(item.state["scale"]), item.state["clip"])
        if item.name.endswith("torch_utils.StateWithTime"):
            raise UserError(f"{path}: its state filter adds the time step as a feature (StateWithTime), which "
                            "no released agent uses and rlgauntlet does not rebuild")
        item = item.state.get("prev_filter")
    return None


def _env_class(env_record: object) -> str | None:
    """The innermost gym env class of an Env record's ``env`` (through gym's wrappers), or None."""
    item = env_record.state.get("env") if isinstance(env_record, Record) else None
    for _ in range(16):  # wrappers nest a few deep; a cycle would be a malformed file
        if not isinstance(item, Record):
            return None
        inner = item.state.get("env")
        if not isinstance(inner, Record):
            return item.name
        item = inner
    return None


def refuse_torchscript(path: Path, what: str = "a policy_gradients release file") -> None:
    """A TorchScript archive is refused before torch sees it: ``torch.load`` hands such a file to
    ``torch.jit.load``, which runs its code; the allow-listed unpickler must be the only reader.
    ``what``: the kind of file the caller expected, named in the message."""
    try:
        if not zipfile.is_zipfile(path):
            return
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return  # torch.load says what it is not
    if any(name.rpartition("/")[2] in ("constants.pkl", "code") or "/code/" in name for name in names):
        raise UserError(f"{path} is a TorchScript archive, not {what}; load it as "
                        f"torchscript:{path} with --kind (it was not opened)")


def read_release(path: str | Path, role: str = "agent") -> ReleaseFile:
    """Read a release file (zip or legacy torch format) as data; every problem is a
    :class:`UserError` naming it. ``role``: what the file is to the caller (``agent``: a
    ``pg:PATH`` spec; ``attacker``: ``released_attacker``'s ``path=``), named in the messages."""
    path = Path(path)
    if not path.is_file():
        what = ("is a directory" if path.is_dir() else "is not a regular file" if path.exists() else "does not exist")
        fix = ("give a policy_gradients release file (pg:PATH.model)" if role == "agent" else
               "give path=FILE of an attack .model file released beside the agent (`rlgauntlet published list`)")
        raise UserError(f"{role} file {path} {what}; {fix}")
    refuse_torchscript(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=False, pickle_module=_pickle_module(path))
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a foreign file: say what it is not
        raise UserError(f"{path} is not a policy_gradients release file ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:120]}); give a .model file of that code base") from None
    if not isinstance(data, dict) or "policy_model" not in data or "envs" not in data:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise UserError(f"{path} is not a policy_gradients release file: it holds {keys}, without "
                        "policy_model and envs")
    envs = data["envs"] if isinstance(data["envs"], (list, tuple)) else [data["envs"]]
    if not envs:
        raise UserError(f"{path}: its envs list is empty, so it has no state filter; is it a policy_gradients "
                        "release file?")
    policy = check_policy(data["policy_model"], path, "policy_model")
    adversary = data.get("adversary_policy_model")
    if adversary is not None:
        adversary = check_policy(adversary, path, "adversary_policy_model", outputs=None)
    release = ReleaseFile(path, policy, _state_filter(envs[0], path), sorted(data), adversary,
                          env_class=_env_class(envs[0]))
    state_filter = release.state_filter
    if state_filter is not None and not (np.isfinite(state_filter.mean).all() and np.isfinite(state_filter.std).all()):
        raise UserError(f"{path}: its state filter's statistics hold NaN or inf (a negative variance?); the file is "
                        "damaged")
    if state_filter is not None:
        if state_filter.mean.shape != (release.obs_dim,):
            raise UserError(f"{path}: its state filter has {state_filter.mean.size} numbers and its policy observes "
                            f"{release.obs_dim}; the file is damaged")
        clip = state_filter.clip
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip > 0):
            raise UserError(f"{path}: its state filter's clip is {clip!r}, not a positive number or None; the file "
                            "is damaged")
    return release


def _shape(weights: dict[str, torch.Tensor], name: str, shape: tuple, path: Path, what: str) -> None:
    """Refuse a missing weight, or one whose shape differs from ``shape`` (None: any size there)."""
    if name not in weights:
        raise UserError(f"{path}: its {what} lacks the weight {name}; the file is incomplete or not a "
                        "policy_gradients CtsPolicy / CtsLSTMPolicy")
    found = tuple(weights[name].shape)
    if len(found) != len(shape) or any(want is not None and want != got for want, got in zip(shape, found)):
        expected = "×".join("N" if d is None else str(d) for d in shape) or "a scalar"
        raise UserError(f"{path}: its {what} weight {name} has shape {'×'.join(map(str, found)) or 'scalar'}, "
                        f"where the network needs {expected}; the file is damaged or of another network")


def check_policy(weights: object, path: Path, what: str, outputs: int | None | str = "log_stdev") -> dict[str, torch.Tensor]:
    """A release's policy weights as float64 tensors, every shape checked against the network they
    make (``CtsPolicy``: affine_layers.N → final_mean; ``CtsLSTMPolicy``: embedding_layer → lstm →
    output_layer); every problem a :class:`UserError` naming the file, the weight and the shape.
    ``outputs``: the action size from ``log_stdev`` (an agent), or None (an adversary, any size)."""
    if not isinstance(weights, dict):
        raise UserError(f"{path}: its {what} is a {type(weights).__name__}, not a state dict of weights; the file is "
                        "damaged or not a policy_gradients release")
    for name, value in weights.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor) or not value.is_floating_point():
            kind = type(value).__name__ if not isinstance(value, torch.Tensor) else f"{value.dtype} tensor"
            raise UserError(f"{path}: its {what} entry {name!r} is a {kind}, not a floating-point weight tensor; "
                            "the file is damaged or not a policy_gradients release")
    plain = {k: v.detach().to(torch.float64) for k, v in weights.items()}
    n_out = None
    if outputs == "log_stdev":
        _shape(plain, "log_stdev", (None,), path, what)
        n_out = int(plain["log_stdev"].shape[0])
    if "lstm.weight_ih_l0" in plain:
        _shape(plain, "embedding_layer.weight", (None, None), path, what)
        embed, obs = plain["embedding_layer.weight"].shape
        _shape(plain, "embedding_layer.bias", (embed,), path, what)
        _shape(plain, "lstm.weight_hh_l0", (None, None), path, what)
        hidden = int(plain["lstm.weight_hh_l0"].shape[1])
        _shape(plain, "lstm.weight_hh_l0", (4 * hidden, hidden), path, what)
        _shape(plain, "lstm.weight_ih_l0", (4 * hidden, embed), path, what)
        _shape(plain, "lstm.bias_ih_l0", (4 * hidden,), path, what)
        _shape(plain, "lstm.bias_hh_l0", (4 * hidden,), path, what)
        _shape(plain, "output_layer.weight", (n_out, hidden), path, what)
        _shape(plain, "output_layer.bias", (int(plain["output_layer.weight"].shape[0]),), path, what)
        return plain
    _shape(plain, "affine_layers.0.weight", (None, None), path, what)
    i, width = 0, None
    while f"affine_layers.{i}.weight" in plain:
        _shape(plain, f"affine_layers.{i}.weight", (None, width), path, what)
        width = int(plain[f"affine_layers.{i}.weight"].shape[0])
        _shape(plain, f"affine_layers.{i}.bias", (width,), path, what)
        i += 1
    _shape(plain, "final_mean.weight", (n_out, width), path, what)
    if "final_mean.bias" in plain:
        _shape(plain, "final_mean.bias", (int(plain["final_mean.weight"].shape[0]),), path, what)
    return plain


def mean_network(weights: dict[str, torch.Tensor], prefix: str = "affine_layers") -> nn.Sequential:
    """``CtsPolicy``'s mean: tanh after every affine layer, then ``final_mean`` (float64)."""
    layers: list[nn.Module] = []
    i = 0
    while f"{prefix}.{i}.weight" in weights:
        w, b = weights[f"{prefix}.{i}.weight"], weights[f"{prefix}.{i}.bias"]
        layers += [_linear(w, b), nn.Tanh()]
        i += 1
    if i == 0 or "final_mean.weight" not in weights:
        raise UserError("the policy's weights are not a CtsPolicy's (affine_layers.N and final_mean); "
                        "only continuous policies of the release format are supported")
    layers.append(_linear(weights["final_mean.weight"], weights.get("final_mean.bias")))
    return nn.Sequential(*layers)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer


class PGVictim(Victim):
    """A released ``CtsPolicy``: the frozen state filter, then the tanh MLP's mean; Gaussian with
    the released ``exp(log_stdev)``; deterministic actions are the mean, sent to ``env.step``
    unclipped as the authors' evaluation sends it (``policy_gradients/agent.py``,
    ``multi_actor_step``): MuJoCo clamps the control for the physics, and Gymnasium's reward
    charges the control cost on the action as given, as gym's did for the authors."""

    kind = "gaussian"
    clip_actions = False

    @staticmethod
    def network(weights: dict[str, torch.Tensor]) -> nn.Module:
        """The network the release's weights make (float64)."""
        return mean_network(weights)

    def __init__(self, release: ReleaseFile, observation_space: gym.Space, action_space: gym.Space,
                 device: str | torch.device = "cpu", precision: str = "auto", description: dict | None = None) -> None:
        self.device = torch.device(device)
        self.observation_space, self.action_space = observation_space, action_space
        self.dtype = choose_dtype(precision, False)
        self.release = release
        self.module = self.network(release.policy).to(device=self.device, dtype=self.dtype).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.log_std = release.policy["log_stdev"].to(device=self.device, dtype=self.dtype)
        self.budget_space = "normalized" if release.state_filter is not None else "raw"
        self.description = description or {"source": "pg", "path": str(release.path)}
        short = (release.env_class or "").rpartition(".")[2]
        self.trained_for = TASKS.get(short)

    def preprocess(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        x = as_tensor(obs, self.device).to(self.dtype)
        return self.release.state_filter(x) if self.release.state_filter is not None else x

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        mean = self.module(x.to(self.dtype))
        return PolicyOutput("gaussian", mean=mean, log_std=self.log_std.expand_as(mean))

    def output_and_vjp(self, x: torch.Tensor, cotangent_of) -> tuple[torch.Tensor, torch.Tensor] | None:
        chain = flatten_chain(self.module)
        return output_and_vjp(chain, x.to(self.dtype), cotangent_of) if plain_mlp(chain) else None

    def layer_chain(self) -> list[nn.Module]:
        return flatten_chain(self.module)


class LSTMStep(nn.Module):
    """One inference step of ``CtsLSTMPolicy`` (float64): ``embedding_layer``, the one-layer
    LSTM from state ``(h, c)``, ``output_layer`` on the new ``h``. Returns the mean and the new
    state. nn.LSTM's layer 0 and nn.LSTMCell share one weight layout (gates i, f, g, o)."""

    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.hidden = int(weights["lstm.weight_hh_l0"].shape[1])
        self.embedding = _linear(weights["embedding_layer.weight"], weights["embedding_layer.bias"])
        self.cell = nn.LSTMCell(int(weights["lstm.weight_ih_l0"].shape[1]), self.hidden, dtype=torch.float64)
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(self.cell, name).copy_(weights[f"lstm.{name}_l0"])
        self.output = _linear(weights["output_layer.weight"], weights["output_layer.bias"])

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        h, c = self.cell(self.embedding(x), state)
        return self.output(h), (h, c)


class PGLSTMVictim(PGVictim):
    """A released ``CtsLSTMPolicy``: the frozen state filter, then :class:`LSTMStep` from the held
    state; Gaussian with the released ``exp(log_stdev)``. Recurrent: the engine holds one state
    per episode (zeros at its start) and advances it with the input the agent acted on; a
    gradient attack perturbs one step with the state fixed. Not a chain of layers, so IBP cannot
    bound it."""

    recurrent = True

    @staticmethod
    def network(weights: dict[str, torch.Tensor]) -> nn.Module:
        return LSTMStep(weights)

    def __init__(self, release: ReleaseFile, observation_space: gym.Space, action_space: gym.Space,
                 device: str | torch.device = "cpu", precision: str = "auto", description: dict | None = None) -> None:
        super().__init__(release, observation_space, action_space, device, precision, description)
        self._held: tuple[torch.Tensor, torch.Tensor] | None = None
        self._steps = HeldStateSteps()

    def initial_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(self.module.hidden, dtype=self.dtype, device=self.device)
        return zeros, zeros.clone()

    def use_state(self, rows: list) -> None:
        self._held = (torch.stack([h for h, _ in rows]), torch.stack([c for _, c in rows]))

    def _step(self, x: torch.Tensor):
        if self._held is None or self._held[0].shape[0] != x.shape[0]:
            held = "none" if self._held is None else f"{self._held[0].shape[0]} rows"
            raise RuntimeError(f"a recurrent victim needs use_state() for this batch of {x.shape[0]} rows (held: {held})")
        return self._steps.step(x, self._held, lambda: self.module(x.to(self.dtype), self._held))

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        mean, _ = self._step(x)
        return PolicyOutput("gaussian", mean=mean, log_std=self.log_std.expand_as(mean))

    @torch.no_grad()
    def advance_state(self, x: torch.Tensor) -> list:
        _, (h, c) = self._step(x)
        return list(zip(h.unbind(0), c.unbind(0)))

    def output_and_vjp(self, x: torch.Tensor, cotangent_of) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def layer_chain(self) -> list[nn.Module]:
        raise NotImplementedError("an LSTM policy is not a chain of layers (its state carries across steps): "
                                  "interval bounds through it are not implemented")


def load_pg(path: str | Path, observation_space: gym.Space | None, action_space: gym.Space | None,
            device: str = "cpu", precision: str = "auto") -> PGVictim:
    """Load ``pg:PATH``: the release file read as data, checked against the env's spaces."""
    from rlgauntlet.common.hashing import sha256_file

    release = read_release(path)
    if observation_space is None or action_space is None:
        raise UserError("a pg: agent needs its env (--env): the release file does not say its spaces")
    obs_dim = int(np.prod(observation_space.shape))
    if release.obs_dim != obs_dim:
        raise UserError(f"{path} observes {release.obs_dim} numbers and the env gives {obs_dim}; give the "
                        "Gymnasium task that matches the gym -v2 task it was trained on")
    if not isinstance(action_space, gym.spaces.Box) or action_space.shape != (release.action_dim,):
        raise UserError(f"{path} acts with {release.action_dim} numbers and the env expects {action_space}; give "
                        "the env the agent was trained on")
    description = {"source": "pg", "path": str(path), "sha256": sha256_file(Path(path)),
                   "policy": "CtsLSTMPolicy" if release.recurrent else "CtsPolicy",
                   "state_filter": release.state_filter is not None, "file_keys": release.keys,
                   "actions": "unclipped", "trained_on": (release.env_class or "unknown").rpartition(".")[2]}
    kind = PGLSTMVictim if release.recurrent else PGVictim
    return kind(release, observation_space, action_space, device, precision, description)
