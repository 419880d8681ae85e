"""The job kit's planning, shared by the evaluate job, sweeps and the gauntlet: which threat specs
an evaluation runs (threats, suites, budget grids), parsed and checked against the agent and env
before any episode; the evaluation report and its strongest-of rows; impact against the argmin
agent or a fixed minimum; the certified evaluations (GWC and ACR per budget).

Example:
    >>> from rlgauntlet.experiments.agents import load_for_env
    >>> victim, preset = load_for_env("zoo:cartpole-dqn", "CartPole-v1")
    >>> threat_specs(victim, ["pgd:steps=10"], eps_grid="0.05,0.1")
    ['pgd:steps=10,eps=0.05', 'pgd:steps=10,eps=0.1']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import gymnasium as gym

from rlgauntlet.experiments.runs import run_evaluation
from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.threats.base import Threat
from rlgauntlet.version import __version__
from rlgauntlet.victims.base import Victim


@dataclass
class Report:
    """What ``rlgauntlet evaluate`` computes: one summary per evaluation (clean first), and
    the impact scale when impact was computed. :meth:`to_dict` is the CLI's JSON."""

    agent: dict
    env: dict
    evaluations: list[dict]
    score_max: float | None = None
    score_min: float | None = None
    min_score_fixed: float | None = None
    impact: bool = False
    strongest_of: list[dict] = field(default_factory=list)
    version: str = field(default_factory=lambda: __version__)

    def to_dict(self) -> dict:
        out = {"rlgauntlet_version": self.version, "agent": self.agent, "env": self.env,
               "evaluations": self.evaluations}
        if self.strongest_of:
            out["strongest_of"] = self.strongest_of
        if self.impact:
            out.update(score_max=self.score_max, score_min=self.score_min, min_score_fixed=self.min_score_fixed)
        return out


def threat_specs(victim: Victim, threats: Sequence[str] = (), suite: Sequence[str] = (), eps: str | None = None,
                 eps_grid: str | None = None, env_id: str | None = None) -> list[str]:
    """Every threat spec an evaluation runs: the given ones and the suites', each budget of
    ``eps_grid`` applied to those without ``eps``."""
    from rlgauntlet.threats.suites import expand_eps_grid, suite_specs

    specs = expand_eps_grid(list(threats), eps_grid) if eps_grid else list(threats)
    for name in suite:
        items = suite_specs(name, victim, eps, grid=eps_grid is not None, env_id=env_id)
        specs += expand_eps_grid(items, eps_grid) if eps_grid else items
    return specs


def checked_threats(specs: Sequence[str], victim: Victim, env: str, preset: str) -> list[Threat]:
    """Parse every spec and check it against the victim and the env (one probe env), so that a
    threat that does not fit fails before any episode runs."""
    from rlgauntlet.envs import make_env
    from rlgauntlet.threats import parse_threat

    threats = [parse_threat(s) for s in specs]
    probe = make_env(env, preset)
    try:
        for t in threats:
            t.check_victim(victim)
            t.check_env(probe, env)
    finally:
        probe.close()
    return threats


def strongest_rows(evaluations: list[dict], specs: list[str], store: ResultsStore, seed: int,
                   parsed: dict[str, Threat] | None = None) -> list[dict]:
    """The strongest-of protocol: per budget, the lowest mean return among the evaluations of
    ``specs`` and the attack that achieved it (ties: the first listed). Each row is stored as a
    ``strongest_of`` run whose meta names its member runs, with the minimum as metrics.
    ``parsed`` gives threats already parsed (by spec), so that none is parsed again."""
    from rlgauntlet.threats import parse_threat

    parsed = parsed or {}
    by_spec = {ev["spec"]: ev for ev in evaluations}
    groups: dict[float | None, list[dict]] = {}
    for spec in specs:
        budget = getattr((parsed.get(spec) or parse_threat(spec)).params, "eps", None)
        groups.setdefault(budget, []).append(by_spec[spec])
    rows = []
    for budget, members in groups.items():
        best = min(members, key=lambda ev: ev["return_mean"])
        row = {"eps": budget, "attacks": [ev["spec"] for ev in members], "return_mean": best["return_mean"],
               "return_std": best["return_std"], "return_sem": best["return_sem"], "winner": best["spec"],
               "winner_run_id": best["run_id"], "episodes": best["episodes"], "seed": seed,
               "by_attack": {ev["spec"]: ev["return_mean"] for ev in members}}
        meta = {"strongest_of": row["attacks"], "eps": budget, "members": {ev["spec"]: ev["run_id"] for ev in members},
                "winner": best["spec"]}
        key = run_key(meta)
        run_id = store.latest_run(key) or store.create_run(key, meta, kind="strongest_of")
        store.add_metric(run_id, "return_mean", best["return_mean"], "mean return under the strongest attack")
        store.add_metric(run_id, "winner_run_id", best["run_id"], "run id of the attack that achieved the minimum")
        row["run_id"] = run_id
        rows.append(row)
    return rows


def certified_evaluations(victim: Victim, env: str, eps: str | None, eps_grid: str | None, episodes: int, seed: int,
                          n_envs: int, store: ResultsStore) -> list[dict]:
    """``--suite certified``: one GWC evaluation per budget (``threat`` = ``gwc``), its ACR among
    its metrics, as ``rlgauntlet certify`` computes them."""
    from rlgauntlet.experiments.certify import certify

    result = certify(victim, env, eps=eps, eps_grid=eps_grid, episodes=episodes, seed=seed, n_envs=n_envs,
                     store=store)
    return [{**row["gwc"], "threat": "gwc", "spec": f"gwc:eps={row['eps']}", "place": None} for row in result["rows"]]


def add_impact(report: Report, store: ResultsStore, victim: Victim, env_fn: Callable[[], gym.Env], episodes: int,
               seed: int, n_envs: int, deterministic: bool, min_score: float | None) -> None:
    """Add impact and generalized impact to every evaluation of ``report`` (Daylight §2.5), and
    store both as run-level metrics of each evaluation run."""
    from rlgauntlet.metrics.impact import ARGMIN_LABEL, ArgminVictim, default_min_score
    from rlgauntlet.metrics.impact import impact as impact_of

    score_max = report.evaluations[0]["return_mean"]
    score_min = None
    if victim.is_discrete:
        argmin = run_evaluation(store, env_fn, report.env, ArgminVictim(victim), None, episodes, seed, n_envs=n_envs,
                                deterministic=deterministic, resume=True, label=ARGMIN_LABEL)
        score_min = argmin["return_mean"]
    fixed_min = min_score if min_score is not None else default_min_score(report.env["id"], report.env["preset"])
    report.impact = True
    report.score_max, report.score_min, report.min_score_fixed = score_max, score_min, fixed_min
    for ev in report.evaluations:
        ev["impact"] = impact_of(score_max, ev["return_mean"], score_min)
        ev["generalized_impact"] = impact_of(score_max, ev["return_mean"], fixed_min)
        for name in ("impact", "generalized_impact"):
            if ev[name] is not None:
                store.add_metric(ev["run_id"], name, ev[name], "fraction of the clean-to-minimum score range")
        ev["metrics"] = store.metrics(ev["run_id"])
