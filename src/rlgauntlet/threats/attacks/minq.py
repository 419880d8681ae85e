"""MinQ (Pattanaik et al. 2018, "Robust Deep RL with Adversarial Attacks").

Push the victim toward its lowest-Q action a⁻ = argmin_a Q(x, a) on the clean input, in the
deterministic form argmax_x̃ π(a⁻|x̃) with π = softmax(Q): maximise log π(a⁻|x̃) by projected
gradient ascent (10 iterations by default, as in the PA-AD comparison). Distance: ℓ∞ (or
ℓ2) in the victim's budget space. DQN (Q-value) victims only.

Spec: ``minq:eps=1/255`` (or ``pgd:objective=minq``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlgauntlet.threats.attacks.base import GradientAttack
from rlgauntlet.threats.base import register_threat
from rlgauntlet.victims.base import PolicyOutput, Victim


@register_threat
class MinQ(GradientAttack):
    name = "minq"
    family = "adversarial"
    objective = True  # usable as fgsm:objective=NAME / pgd:objective=NAME
    kinds = ("q",)
    kinds_hint = "; MinQ needs the victim's Q-values (a DQN agent)"

    @torch.no_grad()
    def reference(self, x: torch.Tensor, victim: Victim) -> torch.Tensor:
        return victim.forward(x).q.argmin(dim=-1)

    def loss(self, out: PolicyOutput, worst: torch.Tensor) -> torch.Tensor:
        return -F.cross_entropy(out.q, worst, reduction="none")

    @classmethod
    @torch.no_grad()
    def measure(cls, victim: Victim, x: torch.Tensor, x_adv: torch.Tensor) -> torch.Tensor:
        """The Q drop Q(x, a(x)) − Q(x, a(x̃)) on each state, in the agent's Q units."""
        q = victim.forward(x).q
        best = q.gather(1, q.argmax(-1, keepdim=True)).squeeze(1)
        taken = q.gather(1, victim.forward(x_adv).q.argmax(-1, keepdim=True)).squeeze(1)
        return best - taken
