"""Robust Sarsa (RS) attack, Zhang et al. 2020a ("Robust Deep RL against Adversarial
Perturbations on State Observations"): MinQ with a learned, smoothed Q^π of the victim.

Minimises Q^π(x, μ(x̃)) over x̃ in the ℓ∞ ε-ball: the value, at the *true* input x, of the
action the victim takes on the perturbed one. PGD with sign steps of ε/steps from a uniform
start in ±step (the official code), ``steps`` = 10. Q is trained by ``rlgauntlet attack-train
--method robust-sarsa`` (see :mod:`rlgauntlet.training.attackers.robust_sarsa`); the regulariser's radius
is a property of the Q function, not of the attack, so one Q serves every ε. Continuous-action
victims only (Gaussian mean or deterministic action, clipped to the action bounds).

Spec: ``robust_sarsa:q=runs/rs-hopper,eps=0.075``.
"""

from __future__ import annotations

from functools import cached_property

import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.attacks.base import AttackParams, EpsBall, GradientAttack
from rlgauntlet.threats.base import register_threat
from rlgauntlet.threats.learned.base import check_trained_for, read_manifest
from rlgauntlet.victims.base import PolicyOutput, Victim

#: the Q function's weights in an attacker folder (``torch.save`` of its state dict)
Q_FILE = "q.pt"


def q_network(input_dim: int, hidden: tuple[int, ...] = (64, 64)) -> torch.nn.Sequential:
    """The Q^π network on the concatenated [x, a] (tanh MLP, one output), as the official
    ``ValueDenseNet``; trained by ``training.attackers.robust_sarsa``, used here."""
    layers: list[torch.nn.Module] = []
    for width in hidden:
        layers += [torch.nn.Linear(input_dim, width), torch.nn.Tanh()]
        input_dim = width
    return torch.nn.Sequential(*layers, torch.nn.Linear(input_dim, 1))


@register_threat
class RobustSarsa(GradientAttack):
    name = "robust_sarsa"
    family = "learned"
    kinds = ("gaussian", "deterministic")
    kinds_hint = "; for discrete agents use minq, maxdiff or paad"
    file_params = ("q",)

    class Params(AttackParams):
        q: str = Field(description="folder written by `rlgauntlet attack-train --method robust-sarsa`")
        random_start: bool = True

    @property
    def step_size(self) -> float:
        p = self.params
        return p.step if p.step is not None else p.eps / p.steps

    @cached_property
    def manifest(self) -> dict:
        from pathlib import Path

        folder = Path(self.params.q)
        if not folder.is_dir():
            raise UserError(f"q={self.params.q}: no such folder; give a folder written by "
                            "`rlgauntlet attack-train --method robust-sarsa`")
        manifest = read_manifest(folder)
        if manifest["method"] != "robust-sarsa":
            raise UserError(f"q={self.params.q} holds a {manifest['method']} attacker, not a Robust Sarsa Q function")
        return manifest

    @cached_property
    def q_function(self) -> torch.nn.Module:
        from pathlib import Path

        path = Path(self.params.q) / Q_FILE
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError) as exc:
            raise UserError(f"cannot read {path} ({type(exc).__name__}); train it again with "
                            "`rlgauntlet attack-train --method robust-sarsa`") from None
        net = q_network(int(self.manifest["input_dim"]), tuple(self.manifest.get("hidden", (64, 64))))
        try:
            net.load_state_dict(state)
        except RuntimeError:
            raise UserError(f"{path} does not match the network its manifest describes; train it again") from None
        return net.requires_grad_(False)

    def fingerprint(self) -> dict:
        from pathlib import Path

        from rlgauntlet.common.hashing import sha256_file

        return {"q_sha256": sha256_file(Path(self.params.q) / Q_FILE)}

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        check_trained_for(self.name, self.manifest, victim)

    def check_env(self, env, env_id: str) -> None:
        if self.manifest["env"] != env_id:
            raise UserError(f"{self.name}: the Q function was trained on {self.manifest['env']}, not {env_id}; "
                            "give the env it was trained on")

    def start(self, ball: EpsBall, rng: BatchRNG, random: bool | None = None) -> torch.Tensor:
        x = ball.x
        if (self.params.random_start if random is None else random) and self.params.eps > 0:
            return ball.project(x + rng.uniform(tuple(x.shape[1:]), -self.step_size, self.step_size).to(x))
        return x.clone()

    def reference(self, x: torch.Tensor, victim: Victim) -> tuple[torch.Tensor, Victim]:
        return x.detach(), victim

    def loss(self, out: PolicyOutput, ref: tuple[torch.Tensor, Victim]) -> torch.Tensor:
        x, victim = ref
        action = victim.actions(out)  # the mean action in env units (clipped, or squashed for SAC)
        q = self.q_function.to(action.dtype)
        return -q(torch.cat([x.to(action.dtype).flatten(1), action], dim=1)).squeeze(-1)
