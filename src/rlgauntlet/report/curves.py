"""Reward-vs-budget curves from the results store.

Runs are grouped by agent, env and threat spec without its ``eps``; each group is one curve
of mean return (± standard error) against ε, using the latest run of each spec. The clean
return of the same agent and env is drawn as a dashed line.

Example:
    >>> curves = budget_curves(ResultsStore("rlgauntlet-results.sqlite"))   # doctest: +SKIP
    >>> plot_curves(curves, "curves.png")                                     # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.store import ResultsStore


def _agent_label(agent: dict) -> str:
    return agent.get("name") or Path(agent.get("path", "agent")).stem


def without_eps(spec: str) -> str:
    name, _, rest = spec.partition(":")
    items = [i for i in rest.split(",") if i and not i.strip().startswith("eps=")]
    return f"{name}:{','.join(items)}" if items else name


def budget_curves(store: ResultsStore, env: str | None = None, agent: str | None = None) -> dict:
    """``{(agent, env): {"clean": (mean, sem) | None, "curves": {threat: [(eps, mean, sem, n), ...]}}}``."""
    latest: dict[tuple, tuple[int, dict]] = {}
    for run_id, meta in store.runs(kind="evaluation"):
        label, env_id = _agent_label(meta["agent"]), meta["env"]["id"]
        if (env and env_id != env) or (agent and agent not in label):
            continue
        latest[(label, env_id, meta["spec"])] = (run_id, meta)
    out: dict = defaultdict(lambda: {"clean": None, "curves": defaultdict(list)})
    for (label, env_id, spec), (run_id, meta) in latest.items():
        returns = [r.episode_return for r in store.episodes(run_id)]
        if not returns:
            continue
        mean = float(np.mean(returns))
        sem = float(np.std(returns, ddof=1) / math.sqrt(len(returns))) if len(returns) > 1 else 0.0
        group = out[(label, env_id)]
        if spec == "clean":
            group["clean"] = (mean, sem)
        elif "eps" in meta.get("params", {}):
            group["curves"][without_eps(spec)].append((float(meta["params"]["eps"]), mean, sem, len(returns)))
    for group in out.values():
        for points in group["curves"].values():
            points.sort()
    return {k: {"clean": v["clean"], "curves": dict(v["curves"])} for k, v in out.items() if v["curves"]}


def plot_curves(curves: dict, path: str | Path, space: str = "") -> Path:
    """One panel per (agent, env): mean return ± sem against ε for every threat."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not curves:
        raise UserError("no evaluations with an eps budget in the store; run e.g. "
                        "rlgauntlet evaluate ... --eps-grid 0,1/255,2/255 --threat pgd")
    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4), squeeze=False)
    for ax, ((label, env_id), group) in zip(axes[0], sorted(curves.items())):
        for threat, points in sorted(group["curves"].items()):
            eps, mean, sem, _ = map(np.array, zip(*points))
            ax.errorbar(eps, mean, yerr=sem, marker="o", capsize=3, label=threat)
        if group["clean"] is not None:
            ax.axhline(group["clean"][0], color="grey", linestyle="--", label="clean")
        ax.set_title(f"{label} on {env_id}")
        ax.set_xlabel(f"ε{f' ({space})' if space else ''}")
        ax.set_ylabel("mean return ± sem")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from rlgauntlet.common.outputs import save_figure

    save_figure(fig, path, kind="reward-vs-budget plot", dpi=120)
    plt.close(fig)
    return path
