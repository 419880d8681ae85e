"""Fourier analysis of perturbations (Daylight §4, Figure 1): the radially averaged power
spectral density (PSD) of clean vs perturbed observations, and the energy change in low,
mid and high frequency bands.

For frames (N, H, W) in [0, 1]: P(u, v) = |F(s)(u, v)|² / (H·W) with the zero frequency at
the centre, averaged over rings of integer radius r = √(u² + v²) (cycles per image) and over
frames. Bands split radii 0 < r ≤ R at R/3 and 2R/3, R = min(H, W)/2; the DC term (r = 0,
mean brightness) is reported apart.

Example:
    >>> import torch
    >>> radii, psd = radial_psd(torch.rand(3, 32, 32))
    >>> radii.shape == psd.shape
    True
"""

from __future__ import annotations

import torch

BANDS = ("low", "mid", "high")


def radial_psd(frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Radii 0..R and the ring-averaged power at each, averaged over frames (N, H, W)."""
    frames = frames.double()
    _, h, w = frames.shape
    power = torch.fft.fftshift(torch.fft.fft2(frames), dim=(-2, -1)).abs() ** 2 / (h * w)
    fy = torch.arange(h, dtype=torch.float64) - h // 2
    fx = torch.arange(w, dtype=torch.float64) - w // 2
    radius = torch.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2).round().long()
    r_max = min(h, w) // 2
    keep = radius <= r_max
    ring = radius[keep]
    counts = torch.bincount(ring, minlength=r_max + 1).double()
    sums = torch.bincount(ring, weights=power.mean(dim=0)[keep], minlength=r_max + 1)
    return torch.arange(r_max + 1), sums / counts.clamp_min(1)


def band_energy(radii: torch.Tensor, psd: torch.Tensor) -> dict[str, float]:
    """Summed ring power in the DC term and the low / mid / high bands."""
    r_max = int(radii.max())
    edges = (0, r_max / 3, 2 * r_max / 3, r_max)
    out = {"dc": float(psd[radii == 0].sum())}
    for name, lo, hi in zip(BANDS, edges[:-1], edges[1:]):
        sel = (radii > lo) & (radii <= hi)
        out[name] = float(psd[sel].sum())
    return out


def spectrum_report(clean: torch.Tensor, perturbed: dict[str, torch.Tensor]) -> dict:
    """PSDs and band energies of clean frames and of each threat's perturbed frames.

    ``relative_change[band]`` = perturbed energy / clean energy − 1.
    """
    radii, psd_clean = radial_psd(clean)
    clean_bands = band_energy(radii, psd_clean)
    report = {
        "radii": radii.tolist(),
        "clean": {"psd": psd_clean.tolist(), "bands": clean_bands},
        "threats": {},
    }
    for spec, frames in perturbed.items():
        _, psd = radial_psd(frames)
        bands = band_energy(radii, psd)
        report["threats"][spec] = {
            "psd": psd.tolist(),
            "bands": bands,
            "relative_change": {b: bands[b] / clean_bands[b] - 1.0 if clean_bands[b] > 0 else None
                                for b in ("dc", *BANDS)},
        }
    return report


def plot_spectrum(report: dict, path) -> None:
    """Two panels: log PSD against spatial frequency (as the paper's Figure 1), and the
    relative energy change per band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    radii = np.array(report["radii"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    ax1.semilogy(radii[1:], np.array(report["clean"]["psd"])[1:], color="black", linewidth=2, label="original")
    for spec, t in report["threats"].items():
        ax1.semilogy(radii[1:], np.array(t["psd"])[1:], label=spec)
    ax1.set_xlabel("spatial frequency (cycles per image)")
    ax1.set_ylabel("power spectral density")
    ax1.legend(fontsize=7)
    specs = list(report["threats"])
    width = 0.8 / max(1, len(specs))
    for i, spec in enumerate(specs):
        change = [report["threats"][spec]["relative_change"][b] or 0.0 for b in BANDS]
        ax2.bar(np.arange(3) + i * width, change, width, label=spec)
    ax2.axhline(0, color="black", linewidth=0.8)
    ax2.set_xticks(np.arange(3) + width * (len(specs) - 1) / 2, BANDS)
    ax2.set_ylabel("energy change vs original (fraction)")
    fig.tight_layout()
    from rlgauntlet.common.outputs import save_figure

    save_figure(fig, path, kind="spectrum plot", dpi=120)
    plt.close(fig)
