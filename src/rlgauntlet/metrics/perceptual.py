"""Perceptual distance between clean and perturbed observations: SSIM and MSE (for PSNR)
always, LPIPS (Zhang et al. 2018, AlexNet variant, as the Daylight paper) when the user
supplies its weights.

LPIPS needs an AlexNet backbone and learned linear heads. These machines cannot download
them, and torchvision has no CPU build here, so the network is defined in this module and
loaded from a weights file the user brings: the ``state_dict`` of the ``lpips`` package's
``LPIPS(net='alex')`` saved with ``torch.save`` (keys ``scaling_layer.shift``,
``net.slice1.0.weight`` ... ``net.slice5.10.bias``, ``lin0.model.1.weight`` ...
``lin4.model.1.weight``). Grey frames are repeated to three channels; frames of a stack are
compared one by one and averaged.

Example:
    >>> import torch
    >>> model = AlexLPIPS()                # random weights: for shapes only
    >>> model(torch.rand(2, 4, 84, 84), torch.rand(2, 4, 84, 84)).shape
    torch.Size([2])
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from rlgauntlet.errors import UserError

SSIM_WINDOW = 11
#: perceptual metrics (SSIM, MSE for PSNR, LPIPS) are computed on every k-th step of an episode
PERCEPTUAL_EVERY = 10
ALEX_CHANNELS = (64, 192, 384, 256, 256)


class _AlexSlices(nn.Module):
    """AlexNet ``features`` split after each ReLU (indices as torchvision's, for the weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.slice1 = nn.Sequential()
        self.slice1.add_module("0", nn.Conv2d(3, 64, 11, 4, 2))
        self.slice1.add_module("1", nn.ReLU())
        self.slice2 = nn.Sequential()
        self.slice2.add_module("2", nn.MaxPool2d(3, 2))
        self.slice2.add_module("3", nn.Conv2d(64, 192, 5, padding=2))
        self.slice2.add_module("4", nn.ReLU())
        self.slice3 = nn.Sequential()
        self.slice3.add_module("5", nn.MaxPool2d(3, 2))
        self.slice3.add_module("6", nn.Conv2d(192, 384, 3, padding=1))
        self.slice3.add_module("7", nn.ReLU())
        self.slice4 = nn.Sequential()
        self.slice4.add_module("8", nn.Conv2d(384, 256, 3, padding=1))
        self.slice4.add_module("9", nn.ReLU())
        self.slice5 = nn.Sequential()
        self.slice5.add_module("10", nn.Conv2d(256, 256, 3, padding=1))
        self.slice5.add_module("11", nn.ReLU())

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = []
        for s in (self.slice1, self.slice2, self.slice3, self.slice4, self.slice5):
            x = s(x)
            feats.append(x)
        return feats


class _Lin(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Dropout(), nn.Conv2d(channels, 1, 1, bias=False))


class AlexLPIPS(nn.Module):
    """LPIPS distance with the AlexNet backbone; inputs (B, C, H, W) in [0, 1] → (B,)."""

    def __init__(self) -> None:
        super().__init__()
        self.scaling_layer = nn.Module()
        self.scaling_layer.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1))
        self.scaling_layer.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1))
        self.net = _AlexSlices()
        for i, c in enumerate(ALEX_CHANNELS):
            self.add_module(f"lin{i}", _Lin(c))
        self.eval()
        for p in self.parameters():
            p.requires_grad_(False)

    def _images(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) frames in [0, 1] → (B·F, 3, H, W) scaled like the lpips package."""
        b, c, h, w = x.shape
        rgb = x.reshape(b * (c // 3), 3, h, w) if c % 3 == 0 else x.reshape(b * c, 1, h, w).expand(-1, 3, h, w)
        return ((rgb * 2 - 1) - self.scaling_layer.shift) / self.scaling_layer.scale

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        batch = a.shape[0]
        fa, fb = self.net(self._images(a.float())), self.net(self._images(b.float()))
        total = 0.0
        for i, (x, y) in enumerate(zip(fa, fb)):
            x = x / (x.pow(2).sum(dim=1, keepdim=True).sqrt() + 1e-10)
            y = y / (y.pow(2).sum(dim=1, keepdim=True).sqrt() + 1e-10)
            total = total + getattr(self, f"lin{i}").model((x - y) ** 2).mean(dim=(2, 3))
        return total.reshape(batch, -1).mean(dim=1)

    @classmethod
    def from_file(cls, path: str | Path) -> "AlexLPIPS":
        """Load user-supplied LPIPS weights (see module docstring for the expected keys)."""
        path = Path(path)
        if not path.exists():
            raise UserError(f"LPIPS weights {path} not found; give the file saved from lpips.LPIPS(net='alex').state_dict()")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001
            raise UserError(f"cannot read LPIPS weights from {path} ({type(exc).__name__}); save them with torch.save") from None
        model = cls()
        missing, unexpected = model.load_state_dict(state, strict=False)
        needed = [k for k in missing if not k.startswith("scaling_layer")]
        if needed or unexpected:
            raise UserError(
                f"{path} is not an LPIPS(net='alex') state_dict (missing {needed[:3]}, unexpected {list(unexpected)[:3]}); "
                "save lpips.LPIPS(net='alex').state_dict()"
            )
        return model


class PerceptualMeter:
    """Per-row perceptual distances between clean and perturbed image inputs, measured on
    every ``every``-th step of an episode (0: never; SSIM of 8 Atari frame stacks costs
    about as much as two clean batched steps of 8 envs of the zoo Pong agent)."""

    def __init__(self, lpips: AlexLPIPS | None = None, every: int = PERCEPTUAL_EVERY) -> None:
        if every < 0:
            raise UserError(f"perceptual every {every} steps: use 0 (never) or a positive step count")
        self.lpips = lpips
        self.every = every

    @torch.no_grad()
    def measure(self, clean: torch.Tensor, perturbed: torch.Tensor) -> dict[str, torch.Tensor]:
        """``ssim``, ``mse`` (and ``lpips``) per row, each shape (B,)."""
        from kornia.metrics import ssim

        a, b = clean.float(), perturbed.float()
        n = a.shape[0]
        out = {
            "ssim": ssim(a, b, SSIM_WINDOW).reshape(n, -1).mean(dim=1),
            "mse": ((a - b) ** 2).reshape(n, -1).mean(dim=1),
        }
        if self.lpips is not None:
            out["lpips"] = self.lpips.to(a.device)(a, b)
        return out
