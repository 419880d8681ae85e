"""Common corruptions of image observations at the severities of the OOD benchmark
(Mohammed & Valdenegro-Toro 2021, Table 1, which are the ``imagecorruptions`` package's
severity 1–5 constants): Gaussian noise, impulse (salt-and-pepper) noise, motion blur and
pixelate, in batched torch.

``imagecorruptions`` itself does not run on NumPy 2, so the operations are re-implemented
here from its definitions (docs/decisions.md). Each threat takes ``severity=1..5`` or the
explicit value (``std=``, ``amount=``, ``radius=``/``sigma=``, ``factor=``). Frames stacked on
the channel axis get the same corruption (one change of the world: one noise pattern, one
blur direction).

Applied to the network input (84×84 grey frames for Atari), where the package would be run
on raw frames; the paper does not say which it used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.threats.base import ThreatParams, register_threat
from rlgauntlet.threats.natural import ImageThreat

GAUSSIAN_STD = (0.08, 0.12, 0.18, 0.26, 0.38)
IMPULSE_AMOUNT = (0.03, 0.06, 0.09, 0.17, 0.27)
MOTION_BLUR = ((10, 3), (15, 5), (15, 8), (15, 12), (20, 15))  # (radius, sigma) in pixels
PIXELATE_FACTOR = (0.6, 0.5, 0.4, 0.3, 0.25)


def _frames(x: torch.Tensor) -> tuple[int, int]:
    """(frames, channels per frame) of a stacked input: grey frames, or RGB in threes."""
    c = x.shape[1]
    return (c // 3, 3) if c % 3 == 0 else (c, 1)


def per_frame_draw(x: torch.Tensor, draw) -> torch.Tensor:
    """A draw of one frame's shape, broadcast over the frames of each stack."""
    frames, per = _frames(x)
    sample = draw((1, per, *x.shape[2:]))  # (B, 1, per, H, W)
    return sample.expand(x.shape[0], frames, per, *x.shape[2:]).reshape(x.shape)


class SeverityParams(ThreatParams):
    severity: int | None = Field(None, ge=1, le=5, description="severity 1–5 (the benchmark's constants)")

    def pick(self, explicit: str, table: tuple):
        value = getattr(self, explicit)
        return value if value is not None else table[self.severity - 1]


def _one_of(severity_field: str, explicit: str):
    @model_validator(mode="after")
    def check(self):
        given = (getattr(self, severity_field) is not None) + (getattr(self, explicit) is not None)
        if given != 1:
            raise ValueError(f"give exactly one of severity=1..5 or {explicit}=")
        return self

    return check


@register_threat
class ImpulseNoise(ImageThreat):
    """Salt-and-pepper noise: a fraction ``amount`` of pixels set to 0 or 1 with equal odds
    (``skimage``'s ``random_noise(mode='s&p')``). Severity 1–5: 0.03, 0.06, 0.09, 0.17, 0.27.

    Spec: ``impulse_noise:severity=3`` or ``impulse_noise:amount=0.05``.
    """

    name = "impulse_noise"
    family = "natural"

    class Params(SeverityParams):
        amount: float | None = Field(None, ge=0.0, le=1.0, description="fraction of pixels hit")
        _check = _one_of("severity", "amount")

    def transform(self, x, rng: BatchRNG | None = None):
        amount = self.params.pick("amount", IMPULSE_AMOUNT)
        frames, per = _frames(x)
        one_frame = (1, per, *x.shape[2:])
        # decided on one frame's draws (B, 1, per, H, W), broadcast over the stack by where()
        hit = rng.uniform(one_frame).to(x) < amount
        salt = (rng.uniform(one_frame).to(x) < 0.5).to(x.dtype)
        stacked = x.reshape(x.shape[0], frames, per, *x.shape[2:])
        return torch.where(hit, salt, stacked).reshape(x.shape)


def motion_blur_kernel(radius: int, sigma: float) -> torch.Tensor:
    """One-sided Gaussian weights over 2·radius+1 taps, normalised to sum 1."""
    taps = torch.arange(2 * radius + 1, dtype=torch.float64)
    weights = torch.exp(-taps**2 / (2 * sigma**2))
    return weights / weights.sum()


def motion_blur(x: torch.Tensor, radius: int, sigma: float, angle_deg: torch.Tensor) -> torch.Tensor:
    """Blur along a line at ``angle_deg`` per row (B,): Σ_i w_i·shift(x, i steps along the
    line), edges replicated, as ``imagecorruptions``' ``_motion_blur``.

    Every shift is at most 2·radius pixels, so the frames are padded once by replication and
    each tap adds a shifted view of the padded frame. The shifts differ per row (each row has
    its own angle), so rows and taps are a loop of in-place adds of views: 6–7× faster than one
    batched gather over every tap on 8×4×84×84 inputs (which has to build and read an index
    of the whole stack per tap), with identical results.
    """
    b, c, h, w = x.shape
    kernel = motion_blur_kernel(radius, sigma).tolist()
    theta = torch.deg2rad(angle_deg.to(torch.float64)).cpu()
    taps = torch.arange(len(kernel), dtype=torch.float64)[:, None]
    dy = (-torch.ceil(taps * torch.sin(theta)[None] - 0.5)).long().tolist()  # (taps, B)
    dx = (-torch.ceil(taps * torch.cos(theta)[None] - 0.5)).long().tolist()
    margin = 2 * radius
    padded = F.pad(x, (margin, margin, margin, margin), mode="replicate")
    out = torch.zeros_like(x)
    for row in range(b):
        acc = out[row]
        for i, weight in enumerate(kernel):
            top, left = margin - dy[i][row], margin - dx[i][row]
            acc.add_(padded[row, :, top:top + h, left:left + w], alpha=weight)
    return out


@register_threat
class MotionBlur(ImageThreat):
    """Motion blur: a one-sided Gaussian line kernel of 2·radius+1 taps (std ``sigma``) at an
    angle drawn from U(−45°, 45°) for each perturbed step (``imagecorruptions``).
    Severity 1–5: (10,3), (15,5), (15,8), (15,12), (20,15) pixels.

    Spec: ``motion_blur:severity=3`` or ``motion_blur:radius=5,sigma=2``.
    """

    name = "motion_blur"
    family = "natural"

    class Params(SeverityParams):
        radius: int | None = Field(None, ge=0, description="kernel radius in pixels")
        sigma: float | None = Field(None, gt=0.0, description="Gaussian std in pixels")

        @model_validator(mode="after")
        def _check(self):
            explicit = (self.radius is not None, self.sigma is not None)
            if (self.severity is not None) == any(explicit) or (any(explicit) and not all(explicit)):
                raise ValueError("give either severity=1..5 or both radius= and sigma=")
            return self

    def transform(self, x, rng: BatchRNG | None = None):
        p = self.params
        radius, sigma = (p.radius, p.sigma) if p.radius is not None else MOTION_BLUR[p.severity - 1]
        angle = rng.uniform((), -45.0, 45.0).to(x.device)
        return motion_blur(x, radius, sigma, angle)


@register_threat
class Pixelate(ImageThreat):
    """Pixelate: box-downscale to ``factor``·(H, W), then nearest-neighbour upscale back
    (PIL ``BOX`` down, ``NEAREST`` up, as ``imagecorruptions``). Deterministic.
    Severity 1–5: factor 0.6, 0.5, 0.4, 0.3, 0.25.

    Spec: ``pixelate:severity=3`` or ``pixelate:factor=0.5``.
    """

    name = "pixelate"
    family = "natural"

    class Params(SeverityParams):
        factor: float | None = Field(None, gt=0.0, le=1.0, description="downscale factor")
        _check = _one_of("severity", "factor")

    def transform(self, x, rng=None):
        factor = self.params.pick("factor", PIXELATE_FACTOR)
        h, w = x.shape[-2:]
        small = F.adaptive_avg_pool2d(x, (max(1, int(h * factor)), max(1, int(w * factor))))
        return F.interpolate(small, size=(h, w), mode="nearest")

