"""Random (the PA-AD baseline): x̃ = x + ε·sign(N(0, I)), clipped to the valid range.

Every coordinate moves by exactly ε (a corner of the ℓ∞ ball), in a random direction: the
black-box reference an attack must beat. Distance: ℓ∞ in the victim's budget space.

Spec: ``random:eps=1/255``.
"""

from __future__ import annotations

import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.threats.base import Threat, ThreatParams, clip_to_input, register_threat
from rlgauntlet.victims.base import Victim


@register_threat
class RandomSign(Threat):
    name = "random"
    family = "adversarial"
    budget_params = ("eps",)

    class Params(ThreatParams):
        eps: float = Field(ge=0.0, description="ℓ∞ radius in the victim's budget space")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        return clip_to_input(x + self.params.eps * rng.normal(x.shape[1:]).to(x).sign(), victim)
