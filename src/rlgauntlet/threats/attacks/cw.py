"""Carlini & Wagner minimal-distortion attack (Carlini & Wagner 2017, ℓ2), as the Daylight
paper compares natural perturbations against it.

Find the smallest ℓ2 perturbation that changes the victim's action: minimise
‖δ‖₂² + c·max(s_{a0}(x+δ) − max_{a≠a0} s_a(x+δ), −κ) with Adam, where a0 is the clean
action and s the scores (Q-values or logits), with a binary search over c per row. The iterate is x + δ clipped to the valid range (the
tanh change of variables of the original cannot move pixels that sit at exactly 0 or 1,
which are common in game frames).
Rows where no tried c changes the action come back unperturbed (and count as unchanged).
The recorded ℓ2/ℓ∞ sizes are the minimal distortions. No budget: ``max_l2`` only caps it.

Spec: ``cw:steps=100,search_steps=6``.
"""

from __future__ import annotations

import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.attacks.targeted import margin
from rlgauntlet.threats.base import Threat, ThreatParams, register_threat
from rlgauntlet.victims.base import Victim


@register_threat
class CarliniWagner(Threat):
    name = "cw"
    family = "adversarial"
    objective = True  # usable as fgsm:objective=NAME / pgd:objective=NAME
    white_box = True

    class Params(ThreatParams):
        steps: int = Field(100, ge=1, description="Adam steps per value of c")
        search_steps: int = Field(6, ge=1, description="binary-search rounds over c")
        c: float = Field(1.0, gt=0.0, description="initial trade-off constant")
        kappa: float = Field(0.0, ge=0.0, description="confidence margin")
        lr: float = Field(0.01, gt=0.0, description="Adam learning rate")

    def check_victim(self, victim: Victim) -> None:
        if not victim.is_discrete:
            raise UserError("cw changes a discrete action; it does not apply to continuous victims")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        p = self.params
        x = x.detach()
        n = x.shape[0]
        with torch.no_grad():
            clean_action = victim.forward(x).scores().argmax(dim=-1)
        bounds = victim.input_bounds
        lo = torch.full((n,), 0.0, dtype=x.dtype, device=x.device)
        hi = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device)
        c = torch.full((n,), p.c, dtype=x.dtype, device=x.device)
        best = x.clone()
        best_l2 = torch.full((n,), float("inf"), dtype=x.dtype, device=x.device)
        def from_w(delta: torch.Tensor) -> torch.Tensor:
            return x + delta if bounds is None else (x + delta).clamp(bounds[0], bounds[1])

        for _ in range(p.search_steps):
            w = torch.zeros_like(x, requires_grad=True)
            opt = torch.optim.Adam([w], lr=p.lr)
            for _ in range(p.steps):
                x_adv = from_w(w)
                l2 = ((x_adv - x) ** 2).reshape(n, -1).sum(dim=1)
                # other-best minus clean-action score: positive once the action changed
                f = (-margin(victim.forward(x_adv).scores(), clean_action)).clamp(max=p.kappa)
                loss = (l2 - c * f).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                with torch.no_grad():
                    x_now = from_w(w)
                    changed = victim.forward(x_now).scores().argmax(dim=-1) != clean_action
                    dist = (x_now - x).reshape(n, -1).norm(dim=1)
                    better = changed & (dist < best_l2)
                    best_l2 = torch.where(better, dist, best_l2)
                    best[better] = x_now[better]
            with torch.no_grad():
                success = torch.isfinite(best_l2)
                hi = torch.where(success, torch.minimum(hi, c), hi)
                lo = torch.where(success, lo, torch.maximum(lo, c))
                c = torch.where(torch.isfinite(hi), (lo + hi) / 2, c * 10)
        return best.detach()
