"""The report card's sections. A section is one function and one template block: the function
takes an agent's runs (:class:`~rlgauntlet.report.data.AgentRuns`) and returns the data its
template (``templates/sections/<key>.html.j2``) renders, or None when the stores hold nothing
for it (the section is then left out). A new threat family adds one :class:`Section` to
:data:`SECTIONS`.

Example:
    >>> [s.key for s in SECTIONS]
    ['overview', 'natural', 'adversarial', 'learned', 'model_based', 'certified', 'ood']
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from rlgauntlet.report.data import AgentRuns, Evaluation
from rlgauntlet.report.figures import budget_curves_uri, ood_scores_uri


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    collect: Callable[[AgentRuns], dict | None]


def row(ev: Evaluation) -> dict:
    """The numbers an evaluation table shows, with the run they come from."""
    s = ev.summary
    return {"spec": ev.spec, "ref": ev.refs if len(ev.refs) > 1 else ev.ref, "return_mean": s["return_mean"],
            "return_sem": s["return_sem"], "episodes": s["episodes"], "seed": ", ".join(map(str, ev.seeds)),
            "impact": ev.metric("impact"),
            "generalized_impact": ev.metric("generalized_impact"), "perturbed": s["perturbed_fraction"],
            "action_change": s["action_change_rate"], "linf": s["linf_mean"], "l2": s["l2_mean"],
            "ssim": s.get("ssim_mean"), "psnr": s.get("psnr_mean"), "space": ev.meta.get("budget_space"),
            "place": ev.meta.get("place")}


def overview(g: AgentRuns) -> dict | None:
    if g.clean is None:
        return None
    agent = g.agent
    identity = {k: agent[k] for k in ("source", "name", "path", "algorithm", "policy_class", "sha256", "vecnormalize")
                if agent.get(k)}
    if agent.get("source") == "zoo" and agent.get("name"):
        from rlgauntlet.zoo import load_manifest

        entry = load_manifest().get(agent["name"], {})
        if entry:
            identity["zoo command"] = entry.get("command")
            clean = entry.get("clean_return") or {}
            if clean:
                identity["zoo clean return"] = f"{clean.get('mean'):.4g} ± {clean.get('std'):.3g} (std, " \
                                               f"{clean.get('episodes')} episodes, seed {clean.get('seed')})"
    return {"identity": identity, "clean": row(g.clean), "argmin": row(g.argmin) if g.argmin else None,
            "space": g.budget_space, "runs": len(g.runs)}


#: a parameter shifted at this many scales or more is drawn as a curve (with the clean return at
#: scale 1), not listed
CURVE_POINTS = 2


def natural(g: AgentRuns) -> dict | None:
    """Single natural changes as a table; shift grids (a physics parameter at several scales, a
    corruption at several severities) as return-against-scale curves, with their rows sorted
    by parameter and numeric scale under the figure."""
    from rlgauntlet.threats.suites import shift_point

    rows = [row(ev) for ev in g.threats("natural")]
    if not rows:
        return None
    grids: dict[str, list[tuple[float, dict]]] = defaultdict(list)
    for r in rows:
        point = shift_point(r["spec"])
        if point is not None:
            grids[point[0]].append((point[1], r))
    curved = {k for k, points in grids.items() if len(points) >= CURVE_POINTS}
    grid_rows = [r for k in sorted(curved) for _, r in sorted(grids[k], key=lambda p: p[0])]
    single = [r for r in rows if not any(r is gr for gr in grid_rows)]
    clean = row(g.clean) if g.clean else None
    figure = None
    if curved:
        from rlgauntlet.report.figures import shift_curves_uri

        figure = shift_curves_uri({k: [(x, r["return_mean"], r["return_sem"]) for x, r in grids[k]] for k in curved},
                                  clean["return_mean"] if clean else None)
    examples = []
    if g.is_image:
        from rlgauntlet.report.examples import natural_examples

        examples = natural_examples(g, [r["spec"] for r in single if r["place"] == "observation"])
    return {"rows": single, "grid_rows": grid_rows, "grid_figure": figure, "grid_params": sorted(curved),
            "examples": examples, "image": g.is_image, "clean": clean}


def _curves(g: AgentRuns) -> dict[str, list[tuple[float, float, float]]]:
    from rlgauntlet.report.curves import without_eps

    curves: dict = defaultdict(list)
    for ev in g.evaluations.values():
        if ev.eps is not None and ev.family in ("adversarial", "natural", "learned", "model_based"):
            curves[without_eps(ev.spec)].append((ev.eps, ev.summary["return_mean"], ev.summary["return_sem"]))
    return {k: v for k, v in curves.items() if len(v) > 1}


def adversarial(g: AgentRuns) -> dict | None:
    rows = [row(ev) for ev in g.threats("adversarial")]
    if not rows and not g.strongest:
        return None
    curves = _curves(g)
    figure = budget_curves_uri(curves, g.clean.summary["return_mean"] if g.clean else None,
                               f"{g.label} on {g.env}", g.budget_space) if curves else None
    strongest = sorted(g.strongest, key=lambda r: (r["eps"] is None, r["eps"] or 0))
    return {"rows": rows, "figure": figure, "strongest": strongest}


def learned(g: AgentRuns) -> dict | None:
    rows = [row(ev) for ev in g.threats("learned")]
    return {"rows": rows} if rows else None


def model_based(g: AgentRuns) -> dict | None:
    rows = [row(ev) for ev in g.threats("model_based")]
    return {"rows": rows} if rows else None


def certified(g: AgentRuns) -> dict | None:
    if not g.certification:
        return None
    rows = []
    for entry in sorted(g.certification, key=lambda e: str(e["meta"].get("spec") or e["meta"].get("eps"))):
        metrics, summary = entry["metrics"], entry.get("summary")
        value = lambda name: metrics[name]["value"] if name in metrics else None  # noqa: E731
        rows.append({"ref": entry["ref"], "eps": entry["meta"].get("eps") or entry["meta"]["spec"].split("=")[-1],
                     "gwc": summary["return_mean"] if summary else None,
                     "gwc_sem": summary["return_sem"] if summary else None,
                     "episodes": summary["episodes"] if summary else entry["meta"].get("episodes"),
                     "seed": entry["meta"].get("seed"), "acr": value("acr"),
                     "deviation": value("certified_action_deviation"), "awc": value("awc"),
                     "awc_finished": value("awc_finished")})
    return {"rows": rows, "discrete": any(r["gwc"] is not None for r in rows),
            "with_awc": any(r["awc"] is not None for r in rows)}


def ood(g: AgentRuns) -> dict | None:
    if not g.ood:
        return None
    rows, panels = [], []
    for entry in sorted(g.ood, key=lambda e: -(e["metrics"].get("auroc", {}).get("value") or 0)):
        meta, metrics = entry["meta"], entry["metrics"]
        value = lambda name: metrics[name]["value"] if name in metrics else None  # noqa: E731
        rows.append({"ref": entry["ref"], "shift": meta["shift"], "detector": meta.get("detector"),
                     "reduce": meta.get("reduce"), "auroc": value("auroc"), "auroc_std": value("auroc_std"),
                     "fpr95": value("fpr95"), "trials": meta.get("trials"), "episodes": meta.get("episodes"),
                     "seed": meta.get("seed")})
        store = entry["store"]
        if len(panels) < 6 and entry["id_runs"] and entry["ood_runs"]:
            nominal, shifted = store.episodes(entry["id_runs"][0]), store.episodes(entry["ood_runs"][0])
            if nominal and shifted and nominal[0].uncertainty_series and shifted[0].uncertainty_series:
                auroc = value("auroc")
                panels.append({"title": f"{meta['shift']}\nAUROC {auroc:.3f}" if auroc is not None else meta["shift"],
                               "id": nominal[0].uncertainty_series, "ood": shifted[0].uncertainty_series})
    return {"rows": rows, "figure": ood_scores_uri(panels) if panels else None}


SECTIONS: list[Section] = [
    Section("overview", "Agent and clean return", overview),
    Section("natural", "Natural perturbations", natural),
    Section("adversarial", "Adversarial attacks", adversarial),
    Section("learned", "Learned attackers", learned),
    Section("model_based", "Model-based attacks", model_based),
    Section("certified", "Certified bounds", certified),
    Section("ood", "Out-of-distribution detection", ood),
]


#: a learned attacker's folder (``attacker=`` / ``q=``): a threat refuses an attacker trained
#: against another agent, so in any stored evaluation it is the agent's own; and a push's
#: direction, chosen per agent among several
_ATTACKER_PATH = re.compile(r'\b(attacker|q)=("(?:[^"\\]|\\.)*"|[^,]+)')  # a quoted path may hold commas
_PUSH_DIRECTION = re.compile(r"^(push:.*\bdirection=)[^,]+")


def comparison_key(spec: str) -> str:
    """The comparison view's row of threat ``spec``: learned attackers trained against each
    agent share one row (``paad:attacker=(own),eps=0.075``), since each agent has its own, and
    so do pushes along each agent's own direction (``push:eps=0.075,direction=(own)``)."""
    return _PUSH_DIRECTION.sub(r"\1(own)", _ATTACKER_PATH.sub(r"\1=(own)", spec))


def _by_comparison_key(g: AgentRuns) -> dict[str, Evaluation]:
    """An agent's evaluations by comparison row; where several of its own attackers of one kind
    share a row (Robust Sarsa's Q functions), the strongest (lowest mean return)."""
    rows: dict[str, Evaluation] = {}
    for spec, ev in g.evaluations.items():
        key = comparison_key(spec)
        if key not in rows or ev.summary["return_mean"] < rows[key].summary["return_mean"]:
            rows[key] = ev
    return rows


def comparison(groups: list[AgentRuns]) -> list[dict]:
    """Per env with several agents: every threat at least two of them ran (rows; learned
    attackers trained against each agent share a row, see :func:`comparison_key`) by agent
    (columns, a gap where an agent did not run it), and the
    agents ranked by their strongest-of return (lowest budget's row first, then the others)."""
    by_env: dict[str, list[AgentRuns]] = defaultdict(list)
    for g in groups:
        by_env[g.env].append(g)
    views = []
    for env, members in by_env.items():
        if len(members) < 2:
            continue
        keyed = [_by_comparison_key(g) for g in members]
        counts: dict[str, int] = defaultdict(int)
        for rows in keyed:
            for spec in rows:
                counts[spec] += 1
        specs = sorted((s for s, n in counts.items() if n > 1 and s != "argmin_agent"), key=lambda s: (s != "clean", s))
        table = [{"spec": spec, "cells": [row(rows[spec]) if spec in rows else None for rows in keyed]}
                 for spec in specs]
        budgets = sorted({r["eps"] for g in members for r in g.strongest if r["eps"] is not None})
        ranking = []
        for g in members:
            by_eps = {r["eps"]: r for r in g.strongest}
            ranking.append({"label": g.label, "clean": row(g.clean) if g.clean else None,
                            "strongest": [by_eps.get(b) for b in budgets]})
        # robust first: sort by the strongest-of return at the largest budget, then the smaller ones
        ranking.sort(key=lambda r: [-(s["return_mean"] if s else float("-inf")) for s in reversed(r["strongest"])])
        views.append({"env": env, "agents": [g.label for g in members], "table": table, "budgets": budgets,
                      "ranking": ranking})
    return views
