"""Random-noise observation threats in the victim's input (budget) space.

These are the simplest threats: black-box, victim-independent, drawn from the episode's
generator. Perturbed inputs are clamped to the victim's valid range (pixels stay in [0, 1]).
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.threats.base import Threat, ThreatParams, clip_to_input, register_threat
from rlgauntlet.victims.base import Victim


@register_threat
class GaussianNoise(Threat):
    """Additive Gaussian noise x' = clip(x + std·N(0, I)).

    Distance: unbounded (``std`` is the per-coordinate standard deviation, in the victim's
    budget space: pixel01 for images, normalized or raw for vectors). ``severity=1..5`` takes
    the common-corruption constants 0.08, 0.12, 0.18, 0.26, 0.38 (images). On stacked image
    frames one noise pattern is drawn per step and added to every frame of the stack.

    Example spec: ``gaussian_noise:std=0.05`` or ``gaussian_noise:severity=3``.
    """

    name = "gaussian_noise"
    family = "natural"
    budget_params = ("std",)

    class Params(ThreatParams):
        std: float | None = Field(None, ge=0.0, description="standard deviation in the victim's budget space")
        severity: int | None = Field(None, ge=1, le=5, description="common-corruption severity 1–5 (images)")

        @model_validator(mode="after")
        def _one(self):
            if (self.std is None) == (self.severity is None):
                raise ValueError("give exactly one of std= or severity=1..5")
            return self

    def check_victim(self, victim: Victim) -> None:
        if self.params.severity is not None and victim.budget_space != "pixel01":
            from rlgauntlet.errors import UserError

            raise UserError("gaussian_noise: severity= is defined for [0, 1] images; give std= for vector observations")
        super().check_victim(victim)

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        from rlgauntlet.threats.corruptions import GAUSSIAN_STD, per_frame_draw

        p = self.params
        std = p.std if p.std is not None else GAUSSIAN_STD[p.severity - 1]
        if victim.budget_space == "pixel01" and x.ndim == 4:
            noise = per_frame_draw(x, rng.normal)
        else:
            noise = rng.normal(x.shape[1:])
        return clip_to_input(x + std * noise.to(x.dtype), victim)


@register_threat
class UniformNoise(Threat):
    """Additive uniform noise x' = clip(x + U(-ε, ε)^d): stays in the ℓ∞ ball of radius ε.

    Distance: ℓ∞, ``eps`` in the victim's budget space.

    Example spec: ``uniform_noise:eps=2/255``.
    """

    name = "uniform_noise"
    family = "natural"
    budget_params = ("eps",)

    class Params(ThreatParams):
        eps: float = Field(ge=0.0, description="ℓ∞ radius in the victim's budget space")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        noise = rng.uniform(x.shape[1:], -1.0, 1.0).to(x.dtype)
        return clip_to_input(x + self.params.eps * noise, victim)


@register_threat
class SensorDropout(Threat):
    """Each observation coordinate independently reads 0 with probability ``p`` (a dead sensor
    reading), per step. For vector observations.

    Example spec: ``sensor_dropout:rate=0.1``.
    """

    name = "sensor_dropout"
    family = "natural"

    class Params(ThreatParams):
        rate: float = Field(ge=0.0, le=1.0, description="probability that a coordinate reads 0")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        dropped = rng.uniform(x.shape[1:]).to(x.device) < self.params.rate
        return clip_to_input(torch.where(dropped, torch.zeros_like(x), x), victim)


@register_threat
class SensorBias(Threat):
    """A miscalibrated sensor: a constant offset b ~ N(0, scale²) per coordinate, drawn once per
    episode (the same at every step), added to the observation. ``scale`` is in the victim's
    budget space.

    Example spec: ``sensor_bias:scale=0.1``.
    """

    name = "sensor_bias"
    family = "natural"
    budget_params = ("scale",)

    class Params(ThreatParams):
        scale: float = Field(ge=0.0, description="std of the per-episode offset, in the budget space")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        bias = rng.episode_normal(x.shape[1:]).to(x)
        return clip_to_input(x + self.params.scale * bias, victim)
