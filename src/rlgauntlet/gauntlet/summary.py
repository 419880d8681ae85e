"""The gauntlet's numbers: every seed's episodes pooled per attack, the worst case per ε (the
strongest of every attack within the budget), the natural and shift summaries, and the result
stored as a ``gauntlet`` run under the metric names below (the leaderboard reads them by these
constants, never by strings of its own).

Example:
    >>> worst_case_metric("0.075")
    'worst_case@0.075'
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.gauntlet.outcome import Outcome
from rlgauntlet.gauntlet.plan import GauntletPlan, eps_value
from rlgauntlet.gauntlet.race import SELECTION_SEED
from rlgauntlet.published import method_label
from rlgauntlet.victims.agent_ref import parse_agent

#: the stored metrics of a ``gauntlet`` run (what the leaderboard ranks and shows)
CLEAN_RETURN = "clean_return"
NATURAL_IMPACT = "natural_impact"
WARNINGS = "warnings"


def worst_case_metric(eps: str) -> str:
    """The stored name of the worst-case return at budget ``eps`` (as the protocol writes it)."""
    return f"worst_case@{eps}"


def acr_metric(eps: str) -> str:
    """The stored name of the action certification rate at ``eps``."""
    return f"acr@{eps}"


def gwc_metric(eps: str) -> str:
    """The stored name of the greedy worst-case return at ``eps``."""
    return f"gwc@{eps}"


def pool_episodes(reports: list[dict], label_of: Callable[[str], str | None]) -> dict[str, dict]:
    """Per label, every seed's episodes pooled: mean, standard error, episodes, and per-seed means."""
    returns: dict[str, list[float]] = {}
    per_seed: dict[str, list[float]] = {}
    for report in reports:
        for ev in report["evaluations"]:
            label = label_of(ev["spec"])
            if label is None:
                continue
            returns.setdefault(label, []).extend(ev["returns"])
            per_seed.setdefault(label, []).append(ev["return_mean"])
    out = {}
    for label, values in returns.items():
        n = len(values)
        out[label] = {"return_mean": float(np.mean(values)),
                      "return_sem": float(np.std(values, ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
                      "episodes": n, "seed_means": per_seed[label]}
    return out


def shift_curves(rows: dict[str, dict]) -> dict[str, list[dict]]:
    """Shift grids as curves: ``physics:PARAM`` (or a corruption) -> [{x, return_mean, return_sem}]
    in numeric order of the scale (or severity)."""
    from rlgauntlet.threats.suites import shift_point

    curves: dict[str, list[dict]] = {}
    for spec, row in rows.items():
        point = shift_point(spec)
        if point is not None:
            curves.setdefault(point[0], []).append({"x": point[1], "return_mean": row["return_mean"],
                                                    "return_sem": row["return_sem"]})
    return {k: sorted(v, key=lambda p: p["x"]) for k, v in curves.items()}


def learned_means(outcome: Outcome, reports: list[dict]) -> dict[str, float]:
    """The learned attackers' mean returns over every seed's reported episodes, by label."""
    learned = {outcome.plan.labels[s] for s in outcome.plan.learned}
    pooled = pool_episodes(reports, lambda s: outcome.plan.labels.get(s))
    return {label: row["return_mean"] for label, row in pooled.items() if label in learned}


def summarise(outcome: Outcome, reports: list[dict], method: str | None) -> dict:
    """The episodes' part of the result: clean, the worst case per ε, natural and shifts."""
    plan = outcome.plan
    victim = plan.victim
    labels = outcome.labels
    pooled = pool_episodes(reports, lambda s: "clean" if s == "clean" else labels.get(s))
    clean = pooled["clean"]
    worst_case = []
    spec_of = {labels[s]: s for s in outcome.adversarial}  # what evaluates it again (run_plans' confirmation)
    for e in plan.protocol.eps_grid:
        # an attack within a smaller budget is an attack within this one too: the worst case never rises with ε
        members = {labels[s]: pooled[labels[s]] for s in outcome.adversarial
                   if outcome.eps_of(s) <= eps_value(e) + 1e-12}
        if not members:
            continue
        attack, best = min(members.items(), key=lambda kv: kv[1]["return_mean"])
        worst_case.append({"eps": e, "eps_value": eps_value(e), "budget_space": victim.budget_space,
                           "return_mean": best["return_mean"], "return_sem": best["return_sem"],
                           "episodes": best["episodes"], "attack": attack, "spec": spec_of[attack],
                           "members": {k: v["return_mean"] for k, v in members.items()}})
    impacts: dict[str, list[float]] = {}  # Daylight's impact: generalized (fixed minimum) where the env has one
    for report in reports:
        for ev in report["evaluations"]:
            value = ev.get("generalized_impact") if ev.get("generalized_impact") is not None else ev.get("impact")
            if ev["spec"] in plan.natural and value is not None:
                impacts.setdefault(ev["spec"], []).append(value)
    natural = [{"spec": s, **pooled[s], "impact": float(np.mean(impacts[s])) if s in impacts else None}
               for s in plan.natural]
    for row in natural:  # the share of the clean return lost: what continuous-control papers report
        row["return_drop"] = 1.0 - row["return_mean"] / clean["return_mean"] if clean["return_mean"] else None
    known = [r["impact"] for r in natural if r["impact"] is not None]
    drops = [r["return_drop"] for r in natural if r["return_drop"] is not None]
    from rlgauntlet.threats.suites import shift_point

    shifted = {shift_point(s)[0] for s in plan.shifts if shift_point(s) is not None}
    on_grid = [s for s in plan.natural if shift_point(s) is not None and shift_point(s)[0] in shifted]
    shift_rows = {s: pooled[s] for s in plan.shifts + on_grid}  # the natural suite's shift is a grid point too
    return {
        "protocol": {"name": plan.protocol.name, "version": plan.protocol.version, "level": plan.level,
                     **({"exhaustive": True} if plan.exhaustive else {}),
                     **({"lstm_directors": True} if plan.lstm_directors else {})},
        "agent": {**victim.description, "spec": plan.spec.agent, "sha256": plan.sha,
                  "method": method_of(plan.spec.agent, method)},
        "env": {"id": plan.env, "preset": plan.preset},
        "budget_space": victim.budget_space, "budget_note": plan.protocol.budget_note,
        "headline_eps": plan.protocol.headline_eps, "seeds": plan.seeds, "episodes_per_seed": plan.settings.episodes,
        "clean": {"return_mean": clean["return_mean"], "return_sem": clean["return_sem"], "episodes": clean["episodes"]},
        "worst_case": worst_case,
        "natural": {"rows": natural, "impact_mean": float(np.mean(known)) if known else None,
                    "return_drop_mean": float(np.mean(drops)) if drops else None,
                    "impact": "generalized impact (Daylight §2.5) where the env has a fixed minimum score, "
                              "impact against the argmin agent otherwise"},
        "shifts": {"rows": [{"spec": s, **r} for s, r in shift_rows.items()], "curves": shift_curves(shift_rows)},
        "learned_attackers": [{"method": t.method, "eps": t.eps, "seed": t.seed, "steps": t.steps, "folder": t.folder,
                               "setting": t.setting, "select": t.select, **({"recurrent": True} if t.recurrent else {}),
                               **({"device": t.agent.device} if t.agent.device != "cpu" else {})}
                              for t in plan.tasks],
        "authors_attack": [{"spec": s, "eps": plan.protocol.headline_eps, **pooled[plan.labels[s]]} for s in plan.authors],
        "race": race_summary(outcome),
        **({"transfer": transfer_summary(outcome, pooled)} if outcome.transfer or outcome.transfer_skipped else {}),
        "skipped": plan.skipped,
    }


def headline_of(summary: dict) -> dict | None:
    """The worst case at the headline ε of a result (or its summary); None where nothing ran there.

    Example:
        >>> headline_of({"headline_eps": "0.075", "worst_case": [{"eps": "0.05"}, {"eps": "0.075"}]})
        {'eps': '0.075'}
    """
    return next((w for w in summary["worst_case"] if w["eps"] == summary["headline_eps"]), None)


def authors_stronger(summary: dict) -> list[dict]:
    """One false-robustness warning per authors' attacker (a published agent's own released
    attacker, run beside the protocol) that takes the agent below the gauntlet's worst case at
    its ε by more than two standard errors of the difference: the protocol missed an attack the
    agent's paper released, and its worst case overstates the agent there.

    Example:
        >>> summary = {"worst_case": [{"eps": "0.075", "return_mean": 924.0, "return_sem": 20.0, "attack": "push"}],
        ...            "authors_attack": [{"spec": "released_attacker:eps=0.075", "eps": "0.075",
        ...                                "return_mean": 734.0, "return_sem": 10.0}]}
        >>> [w["check"] for w in authors_stronger(summary)]
        ['authors_attack_stronger']
    """
    worst = {row["eps"]: row for row in summary.get("worst_case", [])}
    warnings = []
    for row in summary.get("authors_attack", []):
        ours = worst.get(row["eps"])
        if ours is None:
            continue
        noise = 2.0 * math.hypot(row.get("return_sem") or 0.0, ours.get("return_sem") or 0.0)
        if row["return_mean"] < ours["return_mean"] - noise:
            warnings.append({"check": "authors_attack_stronger", "eps": row["eps"], "message": (
                f"the authors' attacker takes the return to {row['return_mean']:.1f} ± {row.get('return_sem') or 0:.1f} "
                f"at ε={row['eps']}, below the gauntlet's worst case {ours['return_mean']:.1f} ± "
                f"{ours.get('return_sem') or 0:.1f} ({ours['attack']}): the protocol's attacks miss one this agent's "
                "paper released, so its worst case overstates the agent here")})
    return warnings


def race_summary(outcome: Outcome) -> dict:
    """What the race did: its rule, and per heuristic member its ε, the selection episodes it ran,
    their mean, and the round that dropped it with the reason (None: a finalist)."""
    plan = outcome.plan
    rule = plan.protocol.race
    if not plan.racing:
        return {"raced": False, "reason": "exhaustive: every member ran in full" if plan.exhaustive and rule
                else "the protocol races nothing"}
    return {"raced": True, "first_episodes": rule.first, "z": rule.z, "max_finalists": rule.finalists,
            "rounds": rule.rounds(plan.settings.episodes), "selection_seed": SELECTION_SEED,
            "finalists": len(outcome.finalists), "dropped": len(outcome.race.dropped),
            "members": list(outcome.race.members)}


def transfer_summary(outcome: Outcome, pooled: dict[str, dict]) -> dict:
    """The board's directors this agent received (:mod:`rlgauntlet.gauntlet.transfer`): each
    member with its donor, its race (selection episodes, the round that dropped it) and, for a
    finalist, its reported return; the directors that did not fit this agent, with the reason; the
    earlier versions whose transfer races were replayed, and the members only their races kept."""
    race = {row["member"]: row for row in outcome.transfer_race.members}
    rows = []
    for member in outcome.transfer:
        row = {**member.describe(), "selection": race.get(member.spec)}
        if member.label in pooled and member.spec in outcome.transfer_finalists:
            row.update(return_mean=pooled[member.label]["return_mean"], return_sem=pooled[member.label]["return_sem"])
        rows.append(row)
    labels = {m.spec: m.label for m in outcome.transfer}
    kept = [labels[s] for s in outcome.earlier_finalists if s in outcome.transfer_race.dropped]
    protocol = outcome.plan.protocol
    return {"members": rows, "finalists": len(outcome.transfer_finalists), "skipped": list(outcome.transfer_skipped),
            "replayed_races": [f"{protocol.name}@v{v}" for v in outcome.replayed_versions],
            "kept_by_earlier_version": kept}


def method_of(agent: str, method: str | None = None) -> str:
    """What a result calls ``agent``'s method: ``method`` when given, else a published agent's
    catalogue label, else the agent spec itself.

    Example:
        >>> method_of("published:ppo-hopper"), method_of("zoo:hopper-ppo"), method_of("zoo:hopper-ppo", "PPO (zoo)")
        ('PPO (released)', 'zoo:hopper-ppo', 'PPO (zoo)')
    """
    ref = parse_agent(agent)
    return method or (method_label(ref.name) if ref.source == "published" else None) or agent


def record_result(plan: GauntletPlan, out: dict) -> None:
    """Store the result as a ``gauntlet`` run: what the leaderboard ranks."""
    identity = {"protocol": plan.protocol.name, "version": plan.protocol.version, "level": plan.level,
                "agent": plan.spec.agent, "sha256": plan.sha, "env": plan.env, "seeds": plan.seeds,
                "method": out["agent"]["method"], **({"exhaustive": True} if plan.exhaustive else {}),
                **({"lstm_directors": True} if plan.lstm_directors else {}),
                "load_options": {k: v for k, v in plan.spec.load_options().items() if v not in (None, False, "auto")}}
    results = ResultsStore(plan.store)
    try:
        key = run_key({**identity, "kind": "gauntlet"})
        run_id = results.latest_run(key) or results.create_run(key, identity, kind="gauntlet")
        clean = out["clean"]
        results.add_metric(run_id, CLEAN_RETURN, clean["return_mean"], "return")
        for row in out["worst_case"]:
            results.add_metric(run_id, worst_case_metric(row["eps"]), row["return_mean"], f"return ({row['attack']})")
        natural = out["natural"]
        if natural["impact_mean"] is not None:
            results.add_metric(run_id, NATURAL_IMPACT, natural["impact_mean"], "mean impact of the natural suite")
        else:  # no minimum score to scale by (continuous control): the share of the clean return lost
            results.add_metric(run_id, NATURAL_IMPACT, natural["return_drop_mean"],
                               "mean share of the clean return the natural suite loses")
        for row in out["certified"].get("rows", []):
            if "acr" in row:
                results.add_metric(run_id, acr_metric(row["eps"]), row["acr"], "fraction of steps")
                results.add_metric(run_id, gwc_metric(row["eps"]), row["gwc"], "return")
        results.add_metric(run_id, WARNINGS, len(out["warnings"]), "false-robustness warnings")
        results.add_wall_seconds(run_id, out["seconds"])
    finally:
        results.close()
