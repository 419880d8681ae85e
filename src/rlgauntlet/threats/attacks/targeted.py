"""Targeted attack: make a chosen action the victim's choice (the actor PA-AD calls).

Discrete victims, on the scores s (Q-values or logits), three losses:

* ``hinge`` (default): the multi-class hinge −Σ_{a≠t} max(0, s_a − s_t + κ) with which PA-AD
  solves J_D directly (App. C.2);
* ``margin``: the Carlini & Wagner margin min(s_t − max_{a≠t} s_a, κ);
* ``ce``: the log-probability of the target (PA-AD's relaxed cross-entropy, Eq. 42).

The hinge is the default because it pulls against every action that still beats the
target at once, where the margin follows only the current runner-up and sign steps can
oscillate between two of them (measured on the brute-force reachability test: hinge
reaches every reachable target, margin misses some; docs/decisions.md). Continuous victims (deterministic, or the
mean of a Gaussian): minimise ‖μ(x̃) − t‖² (PA-AD's G_CD). Distance: ℓ∞ (or ℓ2) in the
victim's budget space.

The target is ``action=`` in the spec (a discrete action index, the same for every env) or,
from Python, a per-env tensor via :meth:`Targeted.perturb_toward`.

Spec: ``targeted:eps=0.05,action=1,steps=30`` (or ``pgd:objective=targeted,action=1``).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.attacks.base import AttackParams, GradientAttack
from rlgauntlet.threats.base import register_threat
from rlgauntlet.victims.base import PolicyOutput, Victim


def hinge(scores: torch.Tensor, target: torch.Tensor, kappa: float) -> torch.Tensor:
    """Σ_{a≠t} max(0, s_a − s_t + κ) per row (0 once t beats every other action by κ)."""
    violation = F.relu(scores - scores.gather(1, target.unsqueeze(1)) + kappa)
    return violation.masked_fill(F.one_hot(target, scores.shape[1]).bool(), 0.0).sum(dim=1)


def margin(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """s_t − max_{a≠t} s_a per row (positive when the target is the argmax)."""
    target_score = scores.gather(1, target.unsqueeze(1)).squeeze(1)
    others = scores.masked_fill(F.one_hot(target, scores.shape[1]).bool(), float("-inf"))
    return target_score - others.max(dim=1).values


@register_threat
class Targeted(GradientAttack):
    name = "targeted"
    family = "adversarial"
    objective = True  # usable as fgsm:objective=NAME / pgd:objective=NAME

    class Params(AttackParams):
        action: int | None = Field(None, ge=0, description="target action index (discrete victims)")
        loss: Literal["hinge", "margin", "ce"] = "hinge"
        kappa: float = Field(1e-3, ge=0.0, description="confidence κ of the hinge and margin losses")

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        if self.params.action is None:
            raise UserError("targeted: give the target with action=INDEX (per-env or continuous targets: "
                            "Targeted.perturb_toward from Python)")
        if not victim.is_discrete:
            raise UserError("targeted: action= takes a discrete action index; continuous targets are set from Python")
        if self.params.action >= victim.action_space.n:
            raise UserError(f"targeted: action={self.params.action} but the agent has {victim.action_space.n} actions")

    def loss(self, out: PolicyOutput, target: torch.Tensor) -> torch.Tensor:
        if out.kind in ("q", "categorical"):
            scores = out.scores()
            if self.params.loss == "ce":
                return -F.cross_entropy(scores, target, reduction="none")
            if self.params.loss == "margin":
                return margin(scores, target).clamp(max=self.params.kappa)
            return -hinge(scores, target, self.params.kappa)
        return -((out.central_action() - target) ** 2).sum(dim=-1)

    def perturb_toward(self, x: torch.Tensor, victim: Victim, target: torch.Tensor, rng: BatchRNG) -> torch.Tensor:
        """Perturb each row of ``x`` toward its own target: (B,) action indices or (B, D) actions."""
        return self.ascend(x.detach(), victim, target, rng)

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        if self.params.action is None:
            raise UserError("targeted: give the target with action=INDEX (or call perturb_toward from Python)")
        target = torch.full((x.shape[0],), self.params.action, dtype=torch.long, device=x.device)
        return self.perturb_toward(x, victim, target, rng)
