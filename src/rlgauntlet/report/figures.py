"""The report's figures, each returned as a ``data:image/png;base64,...`` URI so that the HTML
file is self-contained (nothing is fetched when it is viewed).

Example:
    >>> uri = png_uri_of_array(np.zeros((4, 4), dtype=np.uint8))
    >>> uri.startswith("data:image/png;base64,")
    True
"""

from __future__ import annotations

import base64
import io

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_uri(fig) -> str:
    """Encode a matplotlib figure as a PNG data URI and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def png_uri_of_array(image: np.ndarray, scale: int = 2) -> str:
    """A uint8 grey (H, W) or RGB (H, W, 3) image as a PNG data URI, enlarged ``scale`` times
    (nearest neighbour, so pixels stay visible)."""
    from PIL import Image

    if scale > 1:
        image = image.repeat(scale, axis=0).repeat(scale, axis=1)
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def budget_curves_uri(curves: dict[str, list[tuple[float, float, float]]], clean: float | None, title: str,
                      space: str | None) -> str:
    """Mean return ± sem against ε, one line per threat; the clean return dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for threat, points in sorted(curves.items()):
        eps, mean, sem = map(np.array, zip(*sorted(points)))
        ax.errorbar(eps, mean, yerr=sem, marker="o", capsize=3, label=threat)
    if clean is not None:
        ax.axhline(clean, color="grey", linestyle="--", label="clean")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(f"ε ({space})" if space else "ε")
    ax.set_ylabel("mean return ± sem")
    ax.legend(fontsize=7)
    return figure_uri(fig)


def ood_scores_uri(panels: list[dict]) -> str:
    """One panel per shift: the per-step uncertainty score of the first ID and the first OOD
    episode (``{"title", "id", "ood"}``)."""
    plt = _pyplot()
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 2.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        ax.plot(panel["id"], color="tab:blue", lw=1, label="ID (nominal)")
        ax.plot(panel["ood"], color="tab:red", lw=1, label="OOD (shifted)")
        ax.set_title(panel["title"], fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel("uncertainty")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return figure_uri(fig)


def shift_curves_uri(curves: dict[str, list[tuple[float, float, float]]], clean: float | None) -> str:
    """One small panel per shifted parameter: mean return ± sem against its scale (log axis for
    physics multipliers, severity for corruptions), in numeric order; the clean return dashed."""
    plt = _pyplot()
    keys = sorted(curves)
    cols = min(3, len(keys))
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        points = list(curves[key])
        if clean is not None and key.startswith("physics:") and all(p[0] != 1.0 for p in points):
            points.append((1.0, clean, 0.0))  # the unshifted world is scale 1
        x, mean, sem = map(np.array, zip(*sorted(points)))
        ax.errorbar(x, mean, yerr=sem, marker="o", capsize=2)
        if key.startswith("physics:"):
            ax.set_xscale("log")
            ax.set_xlabel("scale of the default value")
        else:
            ax.set_xlabel("severity")
        if clean is not None:
            ax.axhline(clean, color="grey", linestyle="--")
        ax.set_title(key, fontsize=9)
        ax.set_ylabel("mean return")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    return figure_uri(fig)


def members_uri(members: dict[str, float], clean: float | None, worst: str, title: str) -> str:
    """One ε's gauntlet members as horizontal bars of their mean return, lowest (the worst case)
    on top and drawn apart, with the clean return as a line."""
    plt = _pyplot()
    ranked = sorted(members.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.24 * len(ranked)))
    names = [name for name, _ in ranked][::-1]
    values = [value for _, value in ranked][::-1]
    colors = ["#c0392b" if name == worst else "#7f8c8d" for name in names]
    ax.barh(range(len(names)), values, color=colors)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    if clean is not None:
        ax.axvline(clean, color="#2c3e50", linestyle="--", linewidth=1, label="clean")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("mean return")
    ax.set_title(title, fontsize=9)
    return figure_uri(fig)


def published_uri(rows: list[dict], title: str) -> str:
    """Each agent's natural and worst-case returns (ours) against the paper's two numbers: a pair
    of markers per agent, filled for ours, hollow for the paper's, joined by a line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.8 + 0.32 * len(rows)))
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        ax.plot([row["worst_case"], row["natural"]], [y, y], color="#2980b9", linewidth=1)
        ax.plot(row["natural"], y, "o", color="#2980b9", label="natural (here)" if i == 0 else None)
        ax.plot(row["worst_case"], y, "s", color="#c0392b", label="worst case (here)" if i == 0 else None)
        if row.get("paper_natural") is not None:
            ax.plot(row["paper_natural"], y, "o", mfc="none", color="#2980b9", label="natural (paper)")
        if row.get("paper_attacked") is not None:
            ax.plot(row["paper_attacked"], y, "s", mfc="none", color="#c0392b", label="strongest attack (paper)")
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows][::-1], fontsize=7)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    ax.set_xlabel("return")
    ax.set_title(title, fontsize=9)
    return figure_uri(fig)
