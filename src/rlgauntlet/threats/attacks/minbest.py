"""MinBest (Huang et al. 2017, "Adversarial Attacks on Neural Network Policies").

Lower the probability of the action the victim takes on the clean input: maximise the
cross-entropy between π(·|x̃) and the clean argmax action a⁺ (π = softmax of Q-values for
DQN). Distance: ℓ∞ (or ℓ2) in the victim's budget space. Discrete victims only.

Spec: ``minbest:eps=1/255,steps=10`` (or ``pgd:objective=minbest``, ``fgsm:objective=minbest``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlgauntlet.threats.attacks.base import GradientAttack
from rlgauntlet.threats.base import register_threat
from rlgauntlet.victims.base import PolicyOutput, Victim


@register_threat
class MinBest(GradientAttack):
    name = "minbest"
    family = "adversarial"
    objective = True  # usable as fgsm:objective=NAME / pgd:objective=NAME
    kinds = ("q", "categorical")
    kinds_hint = "; for continuous victims use maxdiff or targeted"

    @torch.no_grad()
    def reference(self, x: torch.Tensor, victim: Victim) -> torch.Tensor:
        return victim.forward(x).scores().argmax(dim=-1)

    def loss(self, out: PolicyOutput, best: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.scores(), best, reduction="none")

    @classmethod
    @torch.no_grad()
    def measure(cls, victim: Victim, x: torch.Tensor, x_adv: torch.Tensor) -> torch.Tensor:
        """Whether the greedy action changed (1) or not (0) on each state."""
        return (victim.forward(x_adv).scores().argmax(-1) != victim.forward(x).scores().argmax(-1)).to(x.dtype)
