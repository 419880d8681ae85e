"""Plots of the OOD benchmark: the per-step uncertainty score of one ID and one OOD episode
against the detection threshold, one panel per shift (like paper 002's Figures 4–5).

Example:
    >>> plot_ood_scores(bench, "ood.png")          # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from rlgauntlet.errors import UserError


def plot_ood_scores(bench: dict, path: str | Path) -> Path:
    """One panel per benchmarked shift: trial 1's first nominal (ID) and shifted (OOD) episode,
    score per step, and trial 1's best threshold (max TPR − FPR) as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = bench["rows"]
    if not rows:
        raise UserError("no shift was benchmarked (the agent failed none of the suite's shifts); nothing to plot")
    cols = min(3, len(rows))
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.2 * nrows), squeeze=False)
    for ax, row in zip(axes.flat, rows):
        series = row["series"]
        ax.plot(series["id"], label="ID (nominal)", color="tab:blue", lw=1)
        ax.plot(series["ood"], label="OOD (shifted)", color="tab:red", lw=1)
        ax.axhline(series["threshold_trial_1"], color="k", ls="--", lw=0.8, label="threshold")
        ax.set_title(f"{row['spec']}\nAUROC {row['auroc']['mean']:.3f} ± {row['auroc']['std']:.3f}", fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel(f"{bench['detector']} std ({bench['reduce']})")
    for ax in list(axes.flat)[len(rows):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from rlgauntlet.common.outputs import save_figure

    save_figure(fig, path, kind="ood scores plot", dpi=110)
    plt.close(fig)
    return path
