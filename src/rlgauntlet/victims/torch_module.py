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
from rlgauntlet.victims.base import KINDS, PolicyOutput, Victim, as_tensor, choose_dtype, flatten_chain
from rlgauntlet.victims.mlp_vjp import output_and_vjp, plain_mlp


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
        x = as_tensor(obs, self.device)
        if self.is_image:
            return x.permute(0, 3, 1, 2).contiguous().to(self.dtype) / 255.0  # contiguous: see SB3Victim.preprocess
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

    def output_and_vjp(self, x: torch.Tensor, cotangent_of) -> tuple[torch.Tensor, torch.Tensor] | None:
        # the module's output is the primary one except for Gaussian modules, which return (mean, log_std)
        if self.kind == "gaussian" or not isinstance(self.module, nn.Sequential):
            return None
        chain = flatten_chain(self.module)
        return output_and_vjp(chain, x.to(self.dtype), cotangent_of) if plain_mlp(chain) else None

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
    """Load a TorchScript policy (``torch.jit.save`` of a traced or scripted module) as a victim.

    TorchScript files do not say what their input is: image observations are taken as
    pixel01 input; for vector observations the budget space is unknown (and budgets are
    refused) unless ``input_space`` says it.

    Precision ``auto`` runs the module in float64 for vector inputs when it can (results
    independent of ``--n-envs``); a module that cannot (a traced SB3 policy keeps SB3's
    ``obs.float()`` cast) runs in its own parameters' dtype, and the choice is recorded in
    the victim's description. Every module is tried on a dummy batch first, so a module that
    does not fit the env's observations or actions is refused with a clear message.
    """
    from rlgauntlet.common.hashing import sha256_file

    path = Path(path)
    if not path.exists():
        raise UserError(f"agent file {path} not found; give the path of a file written by torch.jit.save")
    if path.is_dir():
        raise UserError(f"agent file {path} is a directory; give the file written by torch.jit.save")

    def load() -> torch.jit.ScriptModule:
        try:
            return torch.jit.load(str(path), map_location=device)
        except Exception as exc:  # noqa: BLE001
            raise UserError(
                f"cannot read {path} as TorchScript ({type(exc).__name__}); save the policy with torch.jit.save"
            ) from None

    desc = {"source": "torchscript", "path": str(path), "kind": kind, "sha256": sha256_file(path)}
    is_image = isinstance(observation_space, gym.spaces.Box) and observation_space.dtype == np.uint8 and len(observation_space.shape) == 3
    space = input_space or ("pixel01" if is_image else None)

    def build(prec: str) -> TorchVictim:
        victim = TorchVictim(load(), kind, observation_space, action_space, device=device,
                             description=dict(desc), budget_space=space, precision=prec)
        victim.description["precision"] = str(victim.dtype).removeprefix("torch.")
        return victim

    victim = build(precision)
    failure = _dry_run(victim)
    if failure is not None and precision == "auto" and victim.dtype == torch.float64:
        native = next((p.dtype for p in load().parameters() if p.is_floating_point()), torch.float32)
        victim = build("float64" if native == torch.float64 else "float32")
        victim.description["precision_note"] = f"runs in {victim.description['precision']}: float64 failed ({failure})"
        failure = _dry_run(victim)
    elif failure is not None and precision == "float64" and _dry_run(build("float32")) is None:
        raise UserError(f"{path} cannot run in float64 ({failure}); use --precision float32 (or auto)")
    if failure is not None:
        raise UserError(f"{path} does not run on this env's observations ({failure}); "
                        f"give the env the policy was exported for, and the right --kind")
    return victim


def _dry_run(victim: TorchVictim) -> str | None:
    """Run the victim on a dummy batch of 2 observations; None if it works, else why not."""
    space = victim.observation_space
    obs = np.zeros((2, *space.shape), dtype=space.dtype) if isinstance(space, gym.spaces.Box) else None
    if obs is None:
        return None
    try:
        with torch.no_grad():
            out = victim.forward(victim.preprocess(obs))
            actions = victim.actions(out)
    except Exception as exc:  # noqa: BLE001 - any failure of a foreign module is reported, not raised
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    space_a = victim.action_space
    want = (2,) if isinstance(space_a, gym.spaces.Discrete) else (2, *space_a.shape)
    scores = out.q if out.kind == "q" else out.logits
    if scores is not None and tuple(scores.shape) != (2, space_a.n):
        return f"it returns shape {tuple(scores.shape)[1:]} per observation, {space_a} needs ({space_a.n},)"
    if tuple(actions.shape) != want:
        return f"its actions have shape {tuple(actions.shape)[1:]} per observation, {space_a} needs {want[1:]}"
    return None
