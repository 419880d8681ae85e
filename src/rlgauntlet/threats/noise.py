"""Random-noise observation threats in the victim's input (budget) space.

These are the simplest threats: black-box, victim-independent, drawn from the episode's
generator. Perturbed inputs are clamped to the victim's valid range (pixels stay in [0, 1]).
"""

from __future__ import annotations

import torch
from pydantic import Field

from rlgauntlet.engine.seeding import BatchRNG
from rlgauntlet.threats.base import Threat, ThreatParams, clip_to_input, register_threat
from rlgauntlet.victims.base import Victim


@register_threat
class GaussianNoise(Threat):
    """Additive Gaussian noise x' = clip(x + std·N(0, I)).

    Distance: unbounded (``std`` is the per-coordinate standard deviation, in the victim's
    budget space: pixel01 for images, normalized or raw for vectors).

    Example spec: ``gaussian_noise:std=0.05``.
    """

    name = "gaussian_noise"
    budget_params = ("std",)

    class Params(ThreatParams):
        std: float = Field(ge=0.0, description="standard deviation in the victim's budget space")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        noise = rng.normal(x.shape[1:]).to(x.dtype)
        return clip_to_input(x + self.params.std * noise, victim)


@register_threat
class UniformNoise(Threat):
    """Additive uniform noise x' = clip(x + U(-ε, ε)^d): stays in the ℓ∞ ball of radius ε.

    Distance: ℓ∞, ``eps`` in the victim's budget space.

    Example spec: ``uniform_noise:eps=2/255``.
    """

    name = "uniform_noise"
    budget_params = ("eps",)

    class Params(ThreatParams):
        eps: float = Field(ge=0.0, description="ℓ∞ radius in the victim's budget space")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        noise = rng.uniform(x.shape[1:], -1.0, 1.0).to(x.dtype)
        return clip_to_input(x + self.params.eps * noise, victim)
