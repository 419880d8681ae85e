"""MinBest + Momentum (Korkmaz 2020, "Nesterov Momentum Adversarial Perturbations in the
Deep RL Domain").

The MinBest objective solved with Nesterov momentum: the gradient is taken at the look-ahead
point x̃ + μ·v, v ← μ·v + g/‖g‖₁ (per row), x̃ ← x̃ + step·sign(v), projected on the ε-ball.
Defaults as in the PA-AD comparison: μ = 0.5, 10 iterations, step ε/steps. Distance: ℓ∞ in
the victim's budget space. Discrete victims only.

Spec: ``momentum:eps=1/255`` (or ``pgd:objective=momentum``).
"""

from __future__ import annotations

import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.threats.attacks.base import AttackParams, EpsBall, flat_norm
from rlgauntlet.threats.attacks.minbest import MinBest
from rlgauntlet.threats.base import register_threat
from rlgauntlet.victims.base import Victim


@register_threat
class Momentum(MinBest):
    name = "momentum"
    family = "adversarial"

    class Params(AttackParams):
        mu: float = Field(0.5, ge=0.0, lt=1.0, description="momentum factor")

    @property
    def step_size(self) -> float:
        p = self.params
        return p.step if p.step is not None else p.eps / p.steps

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        p = self.params
        x = x.detach()
        best = self.reference(x, victim)
        ball = EpsBall(x, p.eps, p.norm, victim)
        x_adv = self.start(ball, rng)
        velocity = torch.zeros_like(x)
        for _ in range(p.steps):
            # the look-ahead point may leave the ball: it is only where the gradient is taken
            _, grad = self.loss_and_gradient(x_adv + p.mu * velocity, victim, best)
            velocity = p.mu * velocity + grad / flat_norm(grad, 1).clamp_min(1e-12)
            x_adv = ball.project(x_adv + self.ascent_step(velocity))
        return x_adv.detach()
