"""Victims from a plain ``torch.nn.Module`` or a TorchScript file.

The module maps the network input ``x`` (batch-first float tensor) to:

* ``q`` / ``categorical``: a (B, A) tensor of Q-values / logits;
* ``gaussian``: a tuple ``(mean, log_std)`` of (B, D) tensors (actions clipped to bounds);
* ``deterministic``: a (B, D) action in env units.

Input convention (the SB3 one): image observations (uint8, channel-last frames) become
channel-first floats in [0, 1] (budget space ``pixel01``); vector observations are passed
as float32 (``raw``), or normalised first when ``obs_mean``/``obs_std`` are given
(``normalized``).

Example:
    >>> import gymnasium as gym, torch.nn as nn
    >>> net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    >>> env = gym.make("CartPole-v1")
    >>> victim = TorchVictim(net, "q", env.observation_space, env.action_space)
    >>> victim.act(np.zeros((3, 4), dtype=np.float32)).shape
    (3,)
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import KINDS, PolicyOutput, Victim, choose_dtype, flatten_chain


class TorchVictim(Victim):
    """Wrap a module that computes the policy output from the network input."""

    def __init__(
        self,
        module: nn.Module,
        kind: str,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: str | torch.device = "cpu",
        obs_mean: np.ndarray | None = None,
        obs_std: np.ndarray | None = None,
        description: dict | None = None,
        budget_space: str | None = "auto",
        precision: str = "auto",
    ) -> None:
        if kind not in KINDS:
            raise UserError(f"unknown policy kind {kind!r}; choose one of: {', '.join(KINDS)}")
        self.kind = kind  # type: ignore[assignment]
        self.device = torch.device(device)
        self.observation_space = observation_space
        self.action_space = action_space
        self.description = description or {"source": "torch", "kind": kind}
        shape = getattr(observation_space, "shape", None) or ()
        self.is_image = (
            isinstance(observation_space, gym.spaces.Box)
            and observation_space.dtype == np.uint8
            and len(shape) == 3
        )
        self.dtype = choose_dtype(precision, self.is_image)
        self.module = module.to(device=device, dtype=self.dtype).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.obs_mean = None if obs_mean is None else torch.as_tensor(obs_mean, dtype=self.dtype, device=self.device)
        self.obs_std = None if obs_std is None else torch.as_tensor(obs_std, dtype=self.dtype, device=self.device)
        if budget_space == "auto":
            budget_space = "pixel01" if self.is_image else ("normalized" if obs_mean is not None else "raw")
        self.budget_space = budget_space  # None: unknown, budgets (ε) are refused
        discrete = isinstance(action_space, gym.spaces.Discrete)
        if discrete != (kind in ("q", "categorical")):
            raise UserError(
                f"a {kind} policy cannot act in {action_space}; use --kind "
                + ("q or categorical" if discrete else "gaussian or deterministic")
            )

    def preprocess(self, obs: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(obs), device=self.device)
        if self.is_image:
            return x.permute(0, 3, 1, 2).to(self.dtype) / 255.0
        x = x.to(self.dtype)
        if self.obs_mean is not None:
            x = (x - self.obs_mean) / self.obs_std
        return x

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        y = self.module(x.to(self.dtype))
        if self.kind == "gaussian":
            if not isinstance(y, (tuple, list)) or len(y) != 2:
                raise UserError("a gaussian policy module must return (mean, log_std)")
            return PolicyOutput("gaussian", mean=y[0], log_std=y[1].expand_as(y[0]))
        if self.kind == "deterministic":
            return PolicyOutput("deterministic", action=y)
        return PolicyOutput(self.kind, **{"q" if self.kind == "q" else "logits": y})

    def layer_chain(self) -> list[nn.Module]:
        if isinstance(self.module, nn.Sequential):
            return flatten_chain(self.module)
        raise NotImplementedError("only nn.Sequential modules expose a layer chain")


def load_torchscript(
    path: str | Path,
    kind: str,
    observation_space: gym.Space,
    action_space: gym.Space,
    device: str = "cpu",
    input_space: str | None = None,
    precision: str = "auto",
) -> TorchVictim:
    """Load a TorchScript policy (``torch.jit.save``) as a victim of the given ``kind``.

    TorchScript files do not say what their input is: image observations are taken as
    pixel01 input; for vector observations the budget space is unknown (and budgets are
    refused) unless ``input_space`` says it.
    """
    from rlgauntlet.victims.sb3 import sha256_file

    path = Path(path)
    if not path.exists():
        raise UserError(f"agent file {path} not found; give the path of a file written by torch.jit.save")
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:  # noqa: BLE001
        raise UserError(
            f"cannot read {path} as TorchScript ({type(exc).__name__}); save the policy with torch.jit.save"
        ) from None
    desc = {"source": "torchscript", "path": str(path), "kind": kind, "sha256": sha256_file(path)}
    is_image = isinstance(observation_space, gym.spaces.Box) and observation_space.dtype == np.uint8 and len(observation_space.shape) == 3
    space = input_space or ("pixel01" if is_image else None)
    return TorchVictim(module, kind, observation_space, action_space, device=device, description=desc,
                       budget_space=space, precision=precision)
