"""The ``rlgauntlet evaluate`` job as a library call (:func:`evaluate` -> :class:`Report`): the
agent clean and under every threat, suite, budget grid and strongest-of group, with impact.
One run's building blocks (identity, episodes, summary) live in :mod:`rlgauntlet.experiments.runs`.

The report is the JSON contract of ``rlgauntlet evaluate`` (see README, "JSON").

Example:
    >>> from rlgauntlet import evaluate
    >>> report = evaluate("zoo:cartpole-ppo", "CartPole-v1", threats=["uniform_noise:eps=0.1"],
    ...                   episodes=2, n_envs=2)                        # doctest: +SKIP
    >>> [e["spec"] for e in report.evaluations]                         # doctest: +SKIP
    ['clean', 'uniform_noise:eps=0.1']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import gymnasium as gym

from rlgauntlet.version import __version__
from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec, as_agent_spec, open_job
from rlgauntlet.experiments.runs import check_seed, run_evaluation
from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.metrics.perceptual import PERCEPTUAL_EVERY
from rlgauntlet.threats.base import Threat
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


def evaluate(
    agent: str | AgentSpec | Victim,
    env: str,
    threats: Sequence[str] = (),
    suite: Sequence[str] | str | None = None,
    eps: str | float | None = None,
    episodes: int = 20,
    seed: int = 0,
    n_envs: int = 4,
    store: str | Path | ResultsStore | None = None,
    *,
    eps_grid: str | None = None,
    resume: bool = False,
    preset: str | None = None,
    device: str = "cpu",
    kind: str | None = None,
    vecnormalize: str | Path | None = None,
    input_space: str | None = None,
    precision: str = "auto",
    deterministic: bool = True,
    impact: bool = True,
    min_score: float | None = None,
    action_change_every: int = 1,
    perceptual_every: int = PERCEPTUAL_EVERY,
    lpips_weights: str | Path | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_episode: Callable[[str, EpisodeRecord], None] | None = None,
    threads: int | None = None,
    allow_pickle: bool = False,
    strongest_of: Sequence[str] = (),
) -> Report:
    """Evaluate an agent clean and under every threat; the library form of ``rlgauntlet evaluate``.

    Args:
        agent: ``zoo:NAME``, ``sb3:PATH.zip[:ALGO]``, ``torchscript:PATH`` (loaded with the
            keyword options ``preset`` … ``allow_pickle``), an :class:`AgentSpec` or a :class:`Victim`.
        env: Gymnasium id; the preset follows from it (``preset`` overrides).
        threats: threat specs (see README, "Threats").
        suite: named suites (``natural``, ``adversarial``).
        eps: budget of the suites; ``eps_grid``: budgets for every threat without ``eps``.
        episodes: episodes per evaluation; episode k uses env seed ``seed + k``.
        n_envs: envs stepped side by side (results do not depend on it).
        store: SQLite file (or an open store) keeping every episode; None keeps them in memory.
        resume: continue the latest matching runs in the store.
        impact: add impact (argmin agent, discrete agents) and generalized impact.
        action_change_every: compare with the clean action on every k-th step only (an estimate
            of the action-change rate, one network call fewer on the other perturbed steps).
        perceptual_every: SSIM/PSNR (and LPIPS) of image perturbations on every k-th step; 0 never.
        on_start, on_episode: progress callbacks, with the evaluation's label.
        allow_pickle: unpickle an SB3 agent file as SB3 does (runs code stored in it; default:
            read it as data).
        strongest_of: attacks (specs; with ``eps_grid``, each at every budget) whose minimum
            mean return per budget is reported with the attack that achieved it (the
            robust-RL evaluation protocol); they run like ``threats`` and are stored as
            ``strongest_of`` runs.
        threads: torch intra-op threads while it runs (default: ``$RLGAUNTLET_THREADS`` or 1;
            see ``rlgauntlet.common.threads``); the caller's setting is restored afterwards.
    """
    from rlgauntlet.metrics.perceptual import AlexLPIPS, PerceptualMeter
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.threats.suites import expand_eps_grid

    check_seed(seed, episodes)
    suites = [suite] if isinstance(suite, str) else list(suite or [])
    eps = None if eps is None else str(eps)
    if eps is not None and eps_grid is not None:
        raise UserError("give either --eps or --eps-grid, not both")
    if min_score is not None and not math.isfinite(min_score):
        raise UserError(f"--min-score {min_score}: give a finite score")
    strongest = expand_eps_grid(list(strongest_of), eps_grid) if eps_grid else list(strongest_of)
    for s in [*(expand_eps_grid(list(threats), eps_grid) if eps_grid else threats), *strongest]:
        parse_threat(s)  # fail on a bad spec before loading anything
    if len(strongest_of) == 1:
        raise UserError("--strongest-of compares several attacks; give at least two, e.g. "
                        "--strongest-of random:eps=0.1,pgd:eps=0.1,maxdiff:eps=0.1")
    if eps is not None and not suites:
        raise UserError("--eps is the budget of --suite; give it inside the spec instead (e.g. pgd:eps=1/255)")
    spec = as_agent_spec(agent, preset=preset, device=device, kind=kind, vecnormalize=vecnormalize,
                         input_space=input_space, precision=None if precision == "auto" else precision,
                         allow_pickle=allow_pickle or None)
    with open_job(spec, env, store, threads, preset) as job:
        victim, env_info, env_fn = job.victim, job.env_info, job.env_fn
        specs = threat_specs(victim, threats, suites, eps, eps_grid, env)
        specs += [s for s in strongest if s not in specs]
        plan = checked_threats(specs, victim, env, job.preset)
        meter = PerceptualMeter(AlexLPIPS.from_file(lpips_weights) if lpips_weights is not None else None,
                                every=perceptual_every)
        results = job.store  # opened once every input is accepted
        report = Report(victim.description, env_info, [])
        for t in [None, *plan]:
            label = t.spec if t is not None else "clean"
            if on_start is not None:
                on_start(label, episodes)
            report.evaluations.append(run_evaluation(
                results, env_fn, env_info, victim, t, episodes, seed, n_envs=n_envs, deterministic=deterministic,
                resume=resume, perceptual=meter, action_change_every=action_change_every,
                on_episode=None if on_episode is None else (lambda rec, label=label: on_episode(label, rec)),
            ))
        if strongest:
            report.strongest_of = strongest_rows(report.evaluations, strongest, results, seed)
        if "certified" in suites:
            report.evaluations += certified_evaluations(victim, env, eps, eps_grid, episodes, seed, n_envs, results)
        if impact:
            add_impact(report, results, victim, env_fn, episodes, seed, n_envs, deterministic, min_score)
    return report


def strongest_rows(evaluations: list[dict], specs: list[str], store: ResultsStore, seed: int) -> list[dict]:
    """The strongest-of protocol: per budget, the lowest mean return among the evaluations of
    ``specs`` and the attack that achieved it (ties: the first listed). Each row is stored as a
    ``strongest_of`` run whose meta names its member runs, with the minimum as metrics."""
    from rlgauntlet.threats import parse_threat

    by_spec = {ev["spec"]: ev for ev in evaluations}
    groups: dict[float | None, list[dict]] = {}
    for spec in specs:
        budget = getattr(parse_threat(spec).params, "eps", None)
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
