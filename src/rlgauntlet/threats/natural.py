"""Natural perturbations of image observations (Daylight; Korkmaz 2023, "Adversarial Robust
Deep RL Requires Redefining Robustness"): brightness & contrast, median blur, rotation,
shift, perspective transform and JPEG compression artifacts.

All act on the network input ``x`` (B, C, H, W) in [0, 1] (budget space ``pixel01``),
batched over envs, and keep pixels in [0, 1]. Frames stacked on the channel axis get the
same change, because it is one change of the world. Geometric transforms fill what enters
the frame with black (0), as OpenCV's warps do by default.

Example:
    >>> import torch
    >>> from rlgauntlet.threats import parse_threat
    >>> x = torch.zeros(1, 4, 84, 84); x[..., 10, 20] = 1.0
    >>> shifted = parse_threat("shift:ti=2,tj=1").transform(x)
    >>> float(shifted[0, 0, 11, 22])
    1.0
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, field_validator

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Threat, ThreatParams, register_threat
from rlgauntlet.victims.base import Victim


class ImageThreat(Threat):
    """Base of threats that need image input (budget space pixel01)."""

    def check_victim(self, victim: Victim) -> None:
        if victim.budget_space != "pixel01" or victim.input_bounds != (0.0, 1.0):
            raise UserError(
                f"{self.name} transforms images, but the agent's input is {victim.budget_space} vectors; "
                "use gaussian_noise, uniform_noise, sensor_dropout or sensor_bias for vector observations"
            )

    def transform(self, x: torch.Tensor, rng: BatchRNG | None = None) -> torch.Tensor:
        """The perturbed images (B, C, H, W) in [0, 1]; ``rng`` feeds random threats."""
        raise NotImplementedError

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        return self.transform(x, rng).clamp(0.0, 1.0)


class _LastGrid:
    """The last sampling grid a warp built, and its key. A fixed rotation, or a perspective
    whose corner moves are fixed per episode, samples the same grid on every step; building
    it is most of a warp's cost on a batch of frame stacks (kornia builds it anew each call)."""

    def __init__(self) -> None:
        self.key, self.grid = None, None

    def get(self, key, build) -> torch.Tensor:
        if key != self.key:
            self.key, self.grid = key, build()
        return self.grid


def homography_grid(matrix: torch.Tensor, h: int, w: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The ``grid_sample`` grid (B, h, w, 2) of the warp that maps source pixel (x, y) to
    ``matrix`` @ (x, y, 1) (B, 3, 3), pixel centres at integers (``align_corners=True``):
    each output pixel samples the source at the inverse image of its coordinates.
    Computed in float64, as kornia's ``warp_perspective`` (tests hold the two to 1e-4)."""
    inverse = torch.linalg.inv(matrix.to(torch.float64))
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    pixels = torch.stack([xs, ys, torch.ones_like(xs)], dim=-1).reshape(-1, 3)
    source = pixels @ inverse.transpose(1, 2)
    source = source[..., :2] / source[..., 2:3]
    scale = torch.tensor([(w - 1) / 2, (h - 1) / 2], dtype=torch.float64)
    return (source / scale - 1).reshape(-1, h, w, 2).to(dtype=dtype, device=device)


def warp_with_grid(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling of ``x`` (B, C, H, W) at ``grid``, black outside the frame."""
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)


@register_threat
class BrightnessContrast(ImageThreat):
    """s' = clip(α·s + β): contrast α, brightness β in pixel units 0–255 (the paper's form).

    Spec: ``brightness_contrast:alpha=1.7,beta=40``.
    """

    name = "brightness_contrast"
    family = "natural"

    class Params(ThreatParams):
        alpha: float = Field(1.0, ge=0.0, description="contrast factor α")
        beta: float = Field(0.0, ge=-255.0, le=255.0, description="brightness offset β in 0–255 pixel units")

    def transform(self, x, rng=None):
        return (self.params.alpha * x + self.params.beta / 255.0).clamp(0.0, 1.0)


def median_filter(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """Median over k×k windows, borders replicated (as OpenCV's medianBlur), per channel.

    Kernels 3 and 5 run OpenCV's float32 median (about 60× faster than a tensor median over
    unfolded windows on 84×84 frames); others the tensor median. Not differentiable.
    """
    if kernel in (3, 5):
        import cv2

        frames = x.detach().to("cpu", torch.float32).reshape(-1, *x.shape[-2:]).numpy()
        out = np.stack([cv2.medianBlur(f, kernel) for f in frames])
        return torch.from_numpy(out).reshape(x.shape).to(device=x.device, dtype=x.dtype)
    return median_filter_torch(x, kernel)


def median_filter_torch(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """The tensor version of :func:`median_filter` (any odd kernel)."""
    pad = kernel // 2
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    windows = padded.unfold(2, kernel, 1).unfold(3, kernel, 1)  # (B, C, H, W, k, k)
    return windows.reshape(*windows.shape[:4], -1).median(dim=-1).values


@register_threat
class MedianBlur(ImageThreat):
    """Median blur with an odd k×k kernel, borders replicated.

    Spec: ``median_blur:kernel=3``.
    """

    name = "median_blur"
    family = "natural"

    class Params(ThreatParams):
        kernel: int = Field(3, ge=1, description="odd kernel size in pixels")

        @field_validator("kernel")
        @classmethod
        def _odd(cls, k: int) -> int:
            if k % 2 == 0:
                raise ValueError(f"kernel must be odd (got {k}); a median needs a centre pixel")
            return k

    def transform(self, x, rng=None):
        return x if self.params.kernel == 1 else median_filter(x, self.params.kernel)


@register_threat
class Rotation(ImageThreat):
    """Rotation by ``degrees`` (counter-clockwise) about the image centre, bilinear, black fill.

    Spec: ``rotation:degrees=3``.
    """

    name = "rotation"
    family = "natural"

    class Params(ThreatParams):
        degrees: float = Field(description="rotation angle in degrees, counter-clockwise")

    def __init__(self, params, schedule=None, spec=None) -> None:
        super().__init__(params, schedule, spec)
        self._grid = _LastGrid()

    def transform(self, x, rng=None):
        from kornia.geometry.conversions import convert_affinematrix_to_homography
        from kornia.geometry.transform import get_rotation_matrix2d

        if self.params.degrees == 0:
            return x
        b, _, h, w = x.shape

        def matrix() -> torch.Tensor:
            centre = torch.tensor([[(w - 1) / 2, (h - 1) / 2]], dtype=torch.float64)
            affine = get_rotation_matrix2d(centre, torch.tensor([float(self.params.degrees)], dtype=torch.float64),
                                           torch.ones(1, 2, dtype=torch.float64))
            return convert_affinematrix_to_homography(affine)

        key = (self.params.degrees, h, w, x.dtype, x.device)
        grid = self._grid.get(key, lambda: homography_grid(matrix(), h, w, x.dtype, x.device))
        return warp_with_grid(x, grid.expand(b, h, w, 2))


@register_threat
class Shift(ImageThreat):
    """Shift by whole pixels: ``ti`` along x (columns, right positive), ``tj`` along y (rows,
    down positive), the paper's [ti, tj]. What enters the frame is black (``fill=zeros``),
    the edge pixel repeated (``edge``) or wrapped around (``wrap``).

    Spec: ``shift:ti=2,tj=1``.
    """

    name = "shift"
    family = "natural"

    class Params(ThreatParams):
        ti: int = Field(0, description="pixels along x (columns)")
        tj: int = Field(0, description="pixels along y (rows)")
        fill: Literal["zeros", "edge", "wrap"] = "zeros"

    def transform(self, x, rng=None):
        ti, tj = self.params.ti, self.params.tj
        if self.params.fill == "wrap":
            return torch.roll(x, shifts=(tj, ti), dims=(2, 3))
        h, w = x.shape[-2:]
        if self.params.fill == "edge":
            rows = (torch.arange(h, device=x.device) - tj).clamp(0, h - 1)
            cols = (torch.arange(w, device=x.device) - ti).clamp(0, w - 1)
            return x[..., rows, :][..., cols]
        # zeros: one slice copy into a black frame (index gathers cost 10× more on frame stacks)
        out = torch.zeros_like(x)
        if abs(ti) < w and abs(tj) < h:
            out[..., max(tj, 0):h + min(tj, 0), max(ti, 0):w + min(ti, 0)] = \
                x[..., max(-tj, 0):h - max(tj, 0), max(-ti, 0):w - max(ti, 0)]
        return out


def corner_displacements(norm: float, directions: torch.Tensor, magnitudes: torch.Tensor) -> torch.Tensor:
    """(B, 4, 2) corner moves whose largest has length exactly ``norm`` (the perspective norm)."""
    vectors = torch.stack([directions.cos(), directions.sin()], dim=-1) * magnitudes.unsqueeze(-1)
    longest = vectors.norm(dim=-1).amax(dim=1, keepdim=True).clamp_min(1e-12)
    return vectors / longest.unsqueeze(-1) * norm


@register_threat
class Perspective(ImageThreat):
    """Perspective transform mapping the image corners to corners moved by at most ``norm``
    pixels (the paper's perspective norm: the largest corner move is exactly ``norm``).

    The moves are drawn per episode from the episode's generator (a camera that stays
    tilted for the episode), or, with ``seed=``, once for all episodes; from Python they can
    be given explicitly (``displacements``, a (4, 2) tensor in pixels, corners clockwise
    from top-left, (x, y)).

    Spec: ``perspective:norm=3`` or ``perspective:norm=3,seed=0``.
    """

    name = "perspective"
    family = "natural"

    class Params(ThreatParams):
        norm: float = Field(ge=0.0, description="largest corner displacement in pixels")
        seed: int | None = Field(None, description="draw the corner moves once from this seed")

    def __init__(self, params, schedule=None, spec=None, displacements: torch.Tensor | None = None) -> None:
        super().__init__(params, schedule, spec)
        self.displacements = displacements
        self._grid = _LastGrid()

    def _moves(self, batch: int, rng: BatchRNG | None, dtype, device) -> torch.Tensor:
        if self.displacements is not None:
            d = torch.as_tensor(self.displacements, dtype=dtype, device=device).reshape(1, 4, 2)
            longest = d.norm(dim=-1).amax().clamp_min(1e-12)
            return (d / longest * self.params.norm).expand(batch, 4, 2)
        if self.params.seed is not None or rng is None:
            g = torch.Generator().manual_seed(self.params.seed or 0)
            draws = torch.rand(1, 8, generator=g).expand(batch, 8)
        else:
            draws = torch.special.ndtr(rng.episode_normal((8,)))  # uniform(0,1), fixed per episode
        draws = draws.to(dtype=dtype, device=device)
        return corner_displacements(self.params.norm, draws[:, :4] * 2 * math.pi, draws[:, 4:])

    def transform(self, x, rng=None):
        from kornia.geometry.transform import get_perspective_transform

        if self.params.norm == 0:
            return x
        b, _, h, w = x.shape
        moves = self._moves(b, rng, torch.float64, "cpu")

        def grid() -> torch.Tensor:
            corners = torch.tensor([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], dtype=torch.float64)
            src = corners.expand(b, 4, 2)
            return homography_grid(get_perspective_transform(src, src + moves), h, w, x.dtype, x.device)

        # the moves are fixed per episode, so the batch's grid changes only when an episode does
        key = (h, w, x.dtype, x.device, moves.numpy().tobytes())
        return warp_with_grid(x, self._grid.get(key, grid))


@register_threat
class Jpeg(ImageThreat):
    """Real JPEG encode/decode (OpenCV's libjpeg) at ``quality`` 1–100: the ringing and
    blocking of compression artifacts. Grey frames are encoded one by one; when the channels
    come in threes they are encoded as RGB images.

    JPEG is not a tensor op: each frame is encoded on the CPU (about 0.1 ms for 84×84).

    Spec: ``jpeg:quality=10``.
    """

    name = "jpeg"
    family = "natural"

    class Params(ThreatParams):
        quality: int = Field(ge=1, le=100, description="JPEG quality, 100 = best")

    def transform(self, x, rng=None):
        import cv2

        b, c, h, w = x.shape
        colour = c % 3 == 0
        pixels = (x.detach().cpu().clamp(0, 1) * 255.0).round().to(torch.uint8)
        # (N, H, W) grey frames or (N, H, W, 3) BGR images, as OpenCV wants them
        frames = pixels.reshape(-1, 3, h, w).permute(0, 2, 3, 1).flip(-1) if colour else pixels.reshape(-1, h, w)
        frames = np.ascontiguousarray(frames.numpy())
        out = np.empty_like(frames)
        flags = [int(cv2.IMWRITE_JPEG_QUALITY), int(self.params.quality)]
        for i in range(frames.shape[0]):
            ok, buf = cv2.imencode(".jpg", frames[i], flags)
            if not ok:
                raise RuntimeError("OpenCV failed to encode a JPEG frame")
            out[i] = cv2.imdecode(buf, cv2.IMREAD_COLOR if colour else cv2.IMREAD_GRAYSCALE)
        decoded = torch.from_numpy(out)
        if colour:
            decoded = decoded.flip(-1).permute(0, 3, 1, 2)
        return decoded.reshape(b, c, h, w).to(device=x.device, dtype=x.dtype) / 255.0
