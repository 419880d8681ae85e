"""SA-DQN's released Atari Q-networks (Zhang et al. 2020, ``chenhongge/SA_DQN``; the same files
ship in ``umd-huang-lab/WocaR-RL``), read as data: ``sadqn:PATH.model``.

A file is ``torch.save`` of the state dict of the authors' ``QNetwork.features`` (``models.py``),
one of two networks on one grey 84×84 frame scaled to [0, 1]:

* ``DuelingCnnDQN`` (their default, the natural and convex SA-DQN agents): the Nature CNN
  (``cnn.0/2/4``: 8×8/4, 4×4/2, 3×3/1 convolutions, ReLU), then ``value`` and ``advantage``
  heads (512 units, ReLU each): ``Q = V + A − mean(A)``;
* ``CnnDQN`` (``dueling: false``, the PGD-trained agents): the same CNN and one head,
  ``Sequential`` indices 0, 2, 4 (convolutions), 7, 9 (linear layers).

``model_width`` w scales every width (32w, 64w, 64w, 512w), read from the shapes. The file is
read with torch's weights-only unpickler (tensors and an ordered dict, nothing callable);
a TorchScript archive is refused before torch opens it. The agents act greedily (``act`` with
ε 0 in ``test.py``).

The env is SA-DQN's own frames (:mod:`rlgauntlet.envs.sa_dqn`, ``SADQN/GAME-v0``): the frame
comes rows first and the network sees it transposed, as the authors' ``ImageToPyTorch``
(``np.swapaxes(obs, 2, 0)``) gave it; the transposition is the first step of :meth:`forward`,
so ``x`` stays the image (perturbations act on it as on any Atari frame; an ℓ∞ budget does not
care). Budgets are ``pixel01``, as the paper's ε = 1/255. Both networks run as one chain of
layers (the dueling heads folded into it exactly: :func:`_heads`), so IBP bounds them
(``rlgauntlet certify``).

Example:
    >>> victim = load_sa_dqn("Pong-natural.model", env.observation_space, env.action_space)  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import PolicyOutput, SwapLastAxes, Victim, as_tensor, choose_dtype, flatten_chain
from rlgauntlet.victims.pg_release import refuse_torchscript

#: prefixes a saved state dict may carry before the network's own names (a whole model saved as
#: ``model.features`` or ``model``), removed when every key has it
KEY_PREFIXES = ("features.", "model.")
CNN = ("0", "2", "4")


def _conv_trunk(weights: dict[str, torch.Tensor], prefix: str) -> list[nn.Module]:
    """The Nature CNN of ``models.py`` from ``{prefix}0/2/4`` weights, then the flattening."""
    layers: list[nn.Module] = []
    for index, stride in zip(CNN, (4, 2, 1)):
        w, b = weights[f"{prefix}{index}.weight"], weights[f"{prefix}{index}.bias"]
        conv = nn.Conv2d(w.shape[1], w.shape[0], kernel_size=w.shape[2], stride=stride)
        with torch.no_grad():
            conv.weight.copy_(w)
            conv.bias.copy_(b)
        layers += [conv, nn.ReLU()]
    return layers + [nn.Flatten()]


def _linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    linear = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return linear


def _heads(weights: dict[str, torch.Tensor], network: str) -> list[nn.Module]:
    """The layers after the CNN as one chain: ``CnnDQN``'s head as it is; ``DuelingCnnDQN``'s two
    heads as one wider hidden layer (advantage units, then value units: both read the same
    features) and one output layer that also does ``V + A − mean(A)``, since that is linear in
    the two heads' outputs: ``W = [(I − J/n)·W_A | 1·W_V]``, ``b = (I − J/n)·b_A + b_V``. The same
    function, computed as a chain, so that interval bounds pass through it (tighter than
    bounding the heads apart: the mean's subtraction is inside the one linear map)."""
    if network == "CnnDQN":
        return [_linear(weights["7.weight"], weights["7.bias"]), nn.ReLU(), _linear(weights["9.weight"], weights["9.bias"])]
    hidden_w = torch.cat([weights["advantage.0.weight"], weights["value.0.weight"]])
    hidden_b = torch.cat([weights["advantage.0.bias"], weights["value.0.bias"]])
    w_a, b_a = weights["advantage.2.weight"].double(), weights["advantage.2.bias"].double()
    w_v, b_v = weights["value.2.weight"].double(), weights["value.2.bias"].double()
    n = w_a.shape[0]
    centring = torch.eye(n, dtype=torch.float64) - torch.full((n, n), 1.0 / n, dtype=torch.float64)
    out_w = torch.cat([centring @ w_a, w_v.expand(n, -1)], dim=1)
    out_b = centring @ b_a + b_v
    return [_linear(hidden_w, hidden_b), nn.ReLU(), _linear(out_w.float(), out_b.float())]


#: the layers (a weight and a bias each) of each network, by their names in the state dict
LAYOUTS = {
    "DuelingCnnDQN": [f"cnn.{i}" for i in CNN] + ["advantage.0", "advantage.2", "value.0", "value.2"],
    "CnnDQN": [str(i) for i in CNN] + ["7", "9"],
}


def _strip_prefix(weights: dict) -> dict:
    for prefix in KEY_PREFIXES:
        if weights and all(isinstance(k, str) and k.startswith(prefix) for k in weights):
            return {k[len(prefix):]: v for k, v in weights.items()}
    return weights


def read_sa_dqn(path: str | Path) -> tuple[str, dict[str, torch.Tensor]]:
    """(network name, float32 weights) of an SA-DQN file, every shape checked against the network
    they make; every problem a :class:`UserError` naming the file and the fix."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "is not a regular file" if path.exists() else "does not exist"
        raise UserError(f"agent file {path} {what}; give an SA-DQN model file (sadqn:PATH.model)")
    refuse_torchscript(path, "an SA-DQN model file")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a foreign file: say what it is not
        first = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else ""
        raise UserError(f"{path} is not an SA-DQN model file ({type(exc).__name__}: {first}); give the state dict "
                        "its code saves (models/Pong-natural.model and the like)") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"{path} holds a {type(data).__name__}, not the state dict of an SA-DQN Q-network; give the "
                        "file its code saves (models/Pong-natural.model and the like)")
    weights = _strip_prefix(dict(data))
    for name, value in weights.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise UserError(f"{path}: its entry {name!r} is not a floating-point tensor; the file is damaged or not "
                            "an SA-DQN model file")
        if not torch.isfinite(value).all():
            raise UserError(f"{path}: its weight {name!r} holds NaN or inf; the file is damaged (a diverged training "
                            "saved it?)")
    network = next((n for n, layers in LAYOUTS.items() if getattr(weights.get(f"{layers[0]}.weight"), "ndim", 0) == 4),
                   None)
    if network is None:
        raise UserError(f"{path} holds neither SA-DQN network (DuelingCnnDQN: cnn.0.weight, ...; CnnDQN: 0.weight, "
                        f"...), but {sorted(weights)[:4]}; an MLP DQN (classic control) is not an Atari release")
    expected = {f"{layer}.{kind}" for layer in LAYOUTS[network] for kind in ("weight", "bias")}
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise UserError(f"{path}: a {network} whose weights " + (f"lack {missing[:3]}" if missing else f"add {extra[:3]}")
                        + "; the file is damaged or of another network")
    weights = {k: v.detach().to(torch.float32) for k, v in weights.items()}
    _check_shapes(network, weights, path)
    return network, weights


def _check_shapes(network: str, weights: dict[str, torch.Tensor], path: Path) -> None:
    """The shapes a ``model_width`` w network has on one 84×84 frame: (32w, C, 8, 8),
    (64w, 32w, 4, 4), (64w, 64w, 3, 3), then 3136w → 512w → outputs."""
    convs = LAYOUTS[network][:3]
    c0 = weights[f"{convs[0]}.weight"]
    if c0.ndim != 4 or c0.shape[0] % 32:
        raise UserError(f"{path}: its first convolution has shape {tuple(c0.shape)}, not (32·width, channels, 8, 8); "
                        "the file is damaged or of another network")
    width = c0.shape[0] // 32
    want = {f"{convs[0]}.weight": (32 * width, c0.shape[1], 8, 8), f"{convs[1]}.weight": (64 * width, 32 * width, 4, 4),
            f"{convs[2]}.weight": (64 * width, 64 * width, 3, 3)}
    heads = [("advantage.0", "advantage.2"), ("value.0", "value.2")] if network == "DuelingCnnDQN" else [("7", "9")]
    for first, second in heads:
        want[f"{first}.weight"] = (512 * width, 3136 * width)
        outputs = weights[f"{second}.weight"].shape[0] if weights[f"{second}.weight"].ndim == 2 else -1
        want[f"{second}.weight"] = (1 if first == "value.0" else max(outputs, 2), 512 * width)
    for name, shape in want.items():
        if tuple(weights[name].shape) != shape:
            raise UserError(f"{path}: its weight {name} has shape {tuple(weights[name].shape)}, where a width-{width} "
                            f"{network} on 84×84 frames has {shape}; the file is damaged or of another network")
        bias = weights[name.replace("weight", "bias")]
        if tuple(bias.shape) != (shape[0],):
            raise UserError(f"{path}: its bias {name.replace('weight', 'bias')} has shape {tuple(bias.shape)}, not "
                            f"({shape[0]},); the file is damaged")


class SADQNVictim(Victim):
    """An SA-DQN Q-network on SA-DQN's frames: ``x`` is the (B, 1, 84, 84) image in [0, 1]; the
    network sees it transposed (see the module docstring)."""

    kind = "q"
    budget_space = "pixel01"

    def __init__(self, network: str, weights: dict[str, torch.Tensor], observation_space: gym.Space,
                 action_space: gym.Space, device: str | torch.device = "cpu", precision: str = "auto",
                 description: dict | None = None) -> None:
        self.device = torch.device(device)
        self.observation_space, self.action_space = observation_space, action_space
        self.dtype = choose_dtype(precision, True)
        self.network = network
        chain = [SwapLastAxes(), *_conv_trunk(weights, "cnn." if network == "DuelingCnnDQN" else ""),
                 *_heads(weights, network)]
        self.module = nn.Sequential(*chain).to(device=self.device, dtype=self.dtype).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.description = description or {"source": "sadqn", "network": network}

    @property
    def n_actions(self) -> int:
        return int(self.module[-1].out_features)

    @property
    def in_channels(self) -> int:
        return int(self.module[1].in_channels)

    def preprocess(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        return as_tensor(obs, self.device).to(self.dtype) / 255.0

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        return PolicyOutput("q", q=self.module(x.to(self.dtype)))

    def layer_chain(self) -> list[nn.Module]:
        return flatten_chain(self.module)


def load_sa_dqn(path: str | Path, observation_space: gym.Space | None, action_space: gym.Space | None,
                device: str = "cpu", precision: str = "auto") -> SADQNVictim:
    """Load ``sadqn:PATH``: the file read as data, checked against the env's frames and its
    restricted action set."""
    from rlgauntlet.common.hashing import sha256_file

    network, weights = read_sa_dqn(path)
    if observation_space is None or action_space is None:
        raise UserError("an sadqn: agent needs its env (--env SADQN/Pong-v0 and the like): the file does not say it")
    victim = SADQNVictim(network, weights, observation_space, action_space, device, precision)
    frame = (victim.in_channels, 84, 84)
    if not isinstance(observation_space, gym.spaces.Box) or tuple(observation_space.shape) != frame:
        raise UserError(f"{path} observes {victim.in_channels} grey 84×84 frame(s) and the env gives "
                        f"{getattr(observation_space, 'shape', observation_space)}; give SA-DQN's own frames "
                        "(--env SADQN/Pong-v0, SADQN/Freeway-v0, ...)")
    if not isinstance(action_space, gym.spaces.Discrete) or int(action_space.n) != victim.n_actions:
        raise UserError(f"{path} scores {victim.n_actions} actions and the env offers {action_space}; give the game it "
                        "was trained on (its restricted action set: Pong 4, Freeway 3, BankHeist and RoadRunner 6)")
    victim.description = {"source": "sadqn", "path": str(path), "sha256": sha256_file(Path(path)),
                          "network": network, "frames": "SA-DQN (one grey frame, central crop, transposed)"}
    return victim
