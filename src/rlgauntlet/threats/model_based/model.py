"""The learned dynamics model of model-based attacks and its loader (weights only, as data).

``f(s, a) -> s'`` is trained by ``training.attackers.dynamics`` (``rlgauntlet dynamics-train``); the
model-based threats load it from its run folder, checking the weights against the sha256 in
its manifest.

Example:
    >>> model = DynamicsModel(obs_dim=3, act_dim=1, hidden=8, layers=2)
    >>> model(torch.zeros(5, 3), torch.zeros(5, 1)).shape
    torch.Size([5, 3])
"""

from __future__ import annotations

from rlgauntlet.common.hashing import sha256_file
import json
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from rlgauntlet.errors import UserError

MANIFEST = "manifest.json"
MODEL_FILE = "model.pt"


def file_sha256(path: Path) -> str:
    return sha256_file(path)


class DynamicsModel(nn.Module):
    """One-step model ``s' = f(s, a)``: an MLP of ``layers`` hidden ReLU layers of ``hidden``
    units on normalised (s, a), predicting the normalised change of s.

    Shapes: ``s`` (B, obs_dim), ``a`` (B, act_dim) → (B, obs_dim), raw observation units.
    Differentiable in ``s`` and ``a`` (the attack unrolls it).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 1000, layers: int = 4) -> None:
        super().__init__()
        self.obs_dim, self.act_dim, self.hidden, self.layers = obs_dim, act_dim, hidden, layers
        sizes = [obs_dim + act_dim] + [hidden] * layers
        modules: list[nn.Module] = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            modules += [nn.Linear(n_in, n_out), nn.ReLU()]
        modules.append(nn.Linear(sizes[-1], obs_dim))
        self.net = nn.Sequential(*modules)
        for name, dim in (("s", obs_dim), ("a", act_dim), ("d", obs_dim)):
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))

    def set_normalisation(self, s: np.ndarray, a: np.ndarray, s_next: np.ndarray) -> None:
        """Input and output statistics from training data (std floored at 1e-6)."""
        for name, values in (("s", s), ("a", a), ("d", s_next - s)):
            getattr(self, f"{name}_mean").copy_(torch.as_tensor(values.mean(0)))
            getattr(self, f"{name}_std").copy_(torch.as_tensor(np.maximum(values.std(0), 1e-6)))

    def normalised_delta(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        z = torch.cat([(s - self.s_mean) / self.s_std, (a - self.a_mean) / self.a_std], dim=-1)
        return self.net(z)

    def forward(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Computed in the model's own precision (``model.double()`` for float64), returned in ``s``'s."""
        dtype, own = s.dtype, self.d_std.dtype
        s_own, a_own = s.to(own), a.to(own)
        return (s_own + self.normalised_delta(s_own, a_own) * self.d_std + self.d_mean).to(dtype)


def load_dynamics(path: str | Path) -> tuple[DynamicsModel, dict]:
    """Load a trained model from its run folder (or its manifest): weights only, as data.

    Raises a :class:`UserError` naming the problem for a missing, unfinished or altered model.
    """
    path = Path(path)
    folder = path.parent if path.name == MANIFEST else path
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        hint = " (training has not finished: run dynamics-train again to complete it)" \
            if (folder / "checkpoint.pt").exists() else ""
        raise UserError(f"model={path}: no dynamics model there ({MANIFEST} missing){hint}; "
                        "train one with rlgauntlet dynamics-train")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"model={path}: {MANIFEST} cannot be read ({exc})") from None
    if manifest.get("kind") != "dynamics":
        raise UserError(f"model={path}: {MANIFEST} is not a dynamics model's manifest")
    weights = folder / manifest["model_file"]
    if not weights.exists() or file_sha256(weights) != manifest["model_sha256"]:
        raise UserError(f"model={path}: {manifest['model_file']} is missing or does not match its manifest's sha256")
    model = DynamicsModel(manifest["obs_dim"], manifest["act_dim"], manifest["hidden"], manifest["layers"])
    model.load_state_dict(torch.load(weights, weights_only=True))
    model.requires_grad_(False)
    return model.eval(), manifest
