"""The OOD-detection benchmark (paper 002): shift grids, the failure scan, and AUROC per shift.

The protocol, as the paper states it:

1. ``ood_scan``: evaluate the agent in the nominal env and under every shift of a grid
   (``--suite ood-cartpole``: one physics parameter × one multiplier at a time) and mark the
   shifts where it *fails*: its normalised return (R − R_random) / (R_clean − R_random)
   falls below ``fail_below`` (default 0.5), where R_random is a uniformly random policy's
   return in the nominal env. With a floor of 0 this is "below half the clean return"; the
   floor makes the rule mean the same for envs with negative returns (Pendulum).
2. ``ood_bench``: on each failing shift, the agent's per-step uncertainty score separates ID
   steps (nominal env) from OOD steps (the shifted env, the same episode seeds). Trial t
   (t = 0 … trials−1) runs ``episodes`` fresh episodes from seed ``seed + t·episodes``; the
   AUROC and FPR at 95% TPR of each trial are reported with their mean, sample std and best.

Every episode is stored (with its per-step scores); a killed benchmark resumes with
``resume=True``. Each shift's result is an ``ood`` run of the store whose metrics are the
AUROC and FPR (mean, with the trials).

Example:
    >>> scan = ood_scan("zoo:cartpole-dqn", "CartPole-v1", suite="ood-cartpole", episodes=5)   # doctest: +SKIP
    >>> bench = ood_bench("zoo:cartpole-dqn-ensemble", "CartPole-v1",
    ...                   shifts=["physics:param=length,scale=4"], trials=5)                 # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from rlgauntlet.version import __version__
from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec, open_job
from rlgauntlet.experiments.evaluations import checked_threats
from rlgauntlet.experiments.runs import check_seed, run_evaluation
from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.metrics.detection import auroc, best_threshold, fpr_at_tpr, trial_summary
from rlgauntlet.threats.suites import ood_suite
from rlgauntlet.victims.base import DelegatingVictim, PolicyOutput, Victim, no_uncertainty_error

FAIL_BELOW = 0.5
RANDOM_POLICY_LABEL = "random_policy"


class UniformPolicy(DelegatingVictim):
    """Uniformly random actions, drawn from each episode's policy stream (run it with
    ``deterministic=False``): the floor of the normalised return."""

    def __init__(self, victim: Victim) -> None:
        super().__init__(victim)
        self.description = {**victim.description, "policy": "uniform random actions"}

    def actions(self, out: PolicyOutput, deterministic: bool = True, noise: torch.Tensor | None = None) -> torch.Tensor:
        if noise is None:
            raise RuntimeError("the uniform policy samples its actions: evaluate it with deterministic=False")
        space = self.action_space
        if self.is_discrete:
            return (noise * space.n).long().clamp(max=space.n - 1) + int(space.start)
        low = torch.as_tensor(space.low, dtype=noise.dtype, device=noise.device)
        high = torch.as_tensor(space.high, dtype=noise.dtype, device=noise.device)
        uniform = 0.5 * (1.0 + torch.erf(noise / 2.0 ** 0.5))  # the normal CDF maps N(0, 1) draws to U(0, 1)
        return low + uniform * (high - low)


def normalised_return(value: float, clean: float, floor: float) -> float | None:
    """(R − R_random) / (R_clean − R_random); None when the clean agent is no better than random."""
    return None if clean <= floor else (value - floor) / (clean - floor)


def ood_scan(
    agent: str | AgentSpec | Victim,
    env: str,
    suite: str | None = None,
    shifts: Sequence[str] = (),
    episodes: int = 10,
    seed: int = 0,
    n_envs: int = 4,
    store: str | Path | ResultsStore | None = None,
    *,
    resume: bool = False,
    fail_below: float = FAIL_BELOW,
    preset: str | None = None,
    threads: int | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_episode: Callable[[str, EpisodeRecord], None] | None = None,
) -> dict:
    """Step 1 of the protocol: the agent's return under every shift, and which shifts it fails.

    Returns ``{"clean", "random_policy", "fail_below", "rows": [{spec, return_mean,
    return_sem, normalised_return, fails, run_id}], "failing": [spec, ...]}``.
    """
    specs = (ood_suite(suite, env) if suite else []) + [s for s in shifts]
    if not specs:
        raise UserError("give --suite (ood-cartpole, ood-pendulum, ood-pong, ood-minatar) or at least one --shift")
    if not 0.0 < fail_below <= 1.0:
        raise UserError(f"--fail-below {fail_below}: give a fraction of the clean-over-random return in (0, 1]")
    check_seed(seed, episodes)
    with open_job(agent, env, store, threads, preset) as job:
        victim, env_info, env_fn = job.victim, job.env_info, job.env_fn
        threats = checked_threats(specs, victim, job.env_id, job.preset)
        results = job.store  # opened once the input is accepted

        def run(threat, label=None, who=victim, deterministic=True):
            name = label or (threat.spec if threat is not None else "clean")
            if on_start is not None:
                on_start(name, episodes)
            return run_evaluation(results, env_fn, env_info, who, threat, episodes, seed, n_envs=n_envs,
                                  deterministic=deterministic, resume=resume, label=label,
                                  on_episode=None if on_episode is None else (lambda r: on_episode(name, r)))

        clean = run(None)
        floor = run(None, RANDOM_POLICY_LABEL, UniformPolicy(victim), deterministic=False)
        rows = []
        for threat in threats:
            ev = run(threat)
            norm = normalised_return(ev["return_mean"], clean["return_mean"], floor["return_mean"])
            rows.append({"spec": threat.spec, "world": ev.get("world"), "return_mean": ev["return_mean"],
                         "return_sem": ev["return_sem"], "normalised_return": norm,
                         "fails": norm is not None and norm < fail_below, "run_id": ev["run_id"]})
    if clean["return_mean"] <= floor["return_mean"]:
        raise UserError(f"the agent's clean return {clean['return_mean']:.4g} is no better than a random policy's "
                        f"{floor['return_mean']:.4g}; a failure scan needs an agent that solves the nominal env")
    return {"rlgauntlet_version": __version__, "agent": victim.description, "env": env_info,
            "suite": suite, "episodes": episodes, "seed": seed, "fail_below": fail_below,
            "clean": {k: clean[k] for k in ("return_mean", "return_sem", "run_id")},
            "random_policy": {k: floor[k] for k in ("return_mean", "return_sem", "run_id")},
            "rows": rows, "failing": [r["spec"] for r in rows if r["fails"]]}


def _scores(records: list[EpisodeRecord]) -> np.ndarray:
    return np.concatenate([np.asarray(r.uncertainty_series or [], dtype=np.float64)
                           for r in sorted(records, key=lambda r: r.episode)])


def ood_bench(
    agent: str | AgentSpec | Victim,
    env: str,
    suite: str | None = None,
    shifts: Sequence[str] = (),
    trials: int = 5,
    episodes: int = 10,
    seed: int = 0,
    n_envs: int = 4,
    store: str | Path | ResultsStore | None = None,
    *,
    reduce: str = "mean",
    score_of: str = "policy",
    resume: bool = False,
    fail_below: float = FAIL_BELOW,
    scan_agent: str | AgentSpec | Victim | None = None,
    preset: str | None = None,
    threads: int | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_episode: Callable[[str, EpisodeRecord], None] | None = None,
) -> dict:
    """Steps 2–4 of the protocol: AUROC (OOD positive) and FPR at 95% TPR of the agent's
    per-step uncertainty, ID (nominal env) against OOD (each shift), per trial.

    Shifts are ``shifts`` when given; otherwise the shifts of ``suite`` where the agent
    (``scan_agent`` when given) fails, found with :func:`ood_scan` on the same episodes as
    trial 0. ``score_of`` is ``policy`` (the agent's output) or ``critic`` (an actor-critic's
    value of the action it takes). Returns ``{"rows": [{spec, auroc: {mean, std, best, trials}, fpr95: {...},
    threshold, id_steps, ood_steps, run_id, series}], ...}``; ``series`` holds trial 0's first
    ID and OOD episodes' per-step scores (for the plot).
    """
    from rlgauntlet.victims.uncertainty import REDUCTIONS, SCORE_OUTPUTS

    if score_of not in SCORE_OUTPUTS:
        raise UserError(f"--score-of {score_of}: choose one of {', '.join(SCORE_OUTPUTS)}")
    if trials < 1:
        raise UserError(f"--trials {trials}: give at least 1")
    if reduce not in REDUCTIONS:
        raise UserError(f"--reduce {reduce}: choose one of {', '.join(REDUCTIONS)}")
    check_seed(seed, episodes * trials)
    if shifts and suite:
        raise UserError("give --suite (its failing shifts are benchmarked) or --shift (these shifts), not both")
    scan = None
    if not shifts:
        if not suite:
            raise UserError("give --suite (its failing shifts are benchmarked) or at least one --shift")
        scan = ood_scan(scan_agent or agent, env, suite, episodes=episodes, seed=seed, n_envs=n_envs,
                        store=store, resume=resume, fail_below=fail_below, preset=preset,
                        threads=threads, on_start=on_start, on_episode=on_episode)
        shifts = scan["failing"]
    with open_job(agent, env, store, threads, preset) as job:
        victim, env_info, env_fn = job.victim, job.env_info, job.env_fn
        if victim.uncertainty_method is None:
            raise no_uncertainty_error(victim)
        if score_of == "critic" and victim.is_discrete:
            raise UserError("--score-of critic needs an actor-critic agent with an action-value critic "
                            "(TD3, DDPG, SAC); a DQN's output already is its Q-values")
        victim.uncertainty_output = score_of
        threats = checked_threats(list(shifts), victim, job.env_id, job.preset)
        results = job.store  # opened once the input is accepted

        def scored(threat, trial):
            name = f"{threat.spec if threat is not None else 'nominal'} (trial {trial + 1})"
            if on_start is not None:
                on_start(name, episodes)
            ev = run_evaluation(results, env_fn, env_info, victim, threat, episodes, seed + trial * episodes,
                                n_envs=n_envs, resume=resume, kind="ood", uncertainty=reduce,
                                uncertainty_series=True,
                                on_episode=None if on_episode is None else (lambda r: on_episode(name, r)))
            return ev, results.episodes(ev["run_id"], limit=episodes)

        nominal = [scored(None, t) for t in range(trials)]
        rows = [_bench_row(threat, nominal, [scored(threat, t) for t in range(trials)], victim, env_info,
                           results, reduce, seed, episodes) for threat in threats]
    return {"rlgauntlet_version": __version__, "agent": victim.description, "env": env_info,
            "detector": victim.uncertainty_method, "reduce": reduce, "score_of": score_of, "trials": trials, "episodes": episodes,
            "seed": seed, "suite": suite, "scan": scan,
            "nominal": {"return_mean": [ev["return_mean"] for ev, _ in nominal],
                        "run_ids": [ev["run_id"] for ev, _ in nominal]},
            "rows": rows}


def _bench_row(threat, nominal, shifted, victim, env_info, results: ResultsStore, reduce, seed, episodes) -> dict:
    """AUROC and FPR@95 per trial for one shift, stored as an ``ood`` run with run-level metrics."""
    aurocs, fprs, thresholds, id_steps, ood_steps = [], [], [], [], []
    for (_, id_records), (_, ood_records) in zip(nominal, shifted):
        id_scores, ood_scores = _scores(id_records), _scores(ood_records)
        aurocs.append(auroc(id_scores, ood_scores))
        fprs.append(fpr_at_tpr(id_scores, ood_scores))
        thresholds.append(best_threshold(id_scores, ood_scores))
        id_steps.append(int(id_scores.size))
        ood_steps.append(int(ood_scores.size))
    identity = {"agent": victim.description.get("sha256") or victim.description, "env": env_info,
                "shift": threat.spec, "reduce": reduce, "output": victim.uncertainty_output, "seed": seed, "episodes": episodes, "trials": len(nominal)}
    meta = {**identity, "rlgauntlet_version": __version__, "detector": victim.uncertainty_method,
            "nominal_runs": [ev["run_id"] for ev, _ in nominal], "shifted_runs": [ev["run_id"] for ev, _ in shifted]}
    key = run_key(identity)
    run_id = results.latest_run(key) or results.create_run(key, meta, kind="ood")
    auroc_summary, fpr_summary = trial_summary(aurocs), trial_summary(fprs)
    results.add_metric(run_id, "auroc", auroc_summary["mean"], "AUROC, OOD positive (mean over trials)", aurocs)
    results.add_metric(run_id, "auroc_best", auroc_summary["best"], "AUROC, best trial")
    results.add_metric(run_id, "auroc_std", auroc_summary["std"], "AUROC, sample std over trials (ddof=1)")
    results.add_metric(run_id, "fpr95", fpr_summary["mean"], "FPR at 95% TPR (mean over trials)", fprs)
    first_id = min(nominal[0][1], key=lambda r: r.episode)
    first_ood = min(shifted[0][1], key=lambda r: r.episode)
    return {"spec": threat.spec, "world": shifted[0][0].get("world"), "auroc": auroc_summary, "fpr95": fpr_summary,
            "threshold": float(np.mean(thresholds)), "id_steps": id_steps, "ood_steps": ood_steps,
            "return_mean": [ev["return_mean"] for ev, _ in shifted], "run_id": run_id,
            "series": {"id": first_id.uncertainty_series or [], "ood": first_ood.uncertainty_series or [],
                       "threshold_trial_1": thresholds[0]}}
