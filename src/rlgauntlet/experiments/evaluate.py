"""The ``rlgauntlet evaluate`` job as a library call (:func:`evaluate` -> :class:`Report`): the
agent clean and under every threat, suite, budget grid and strongest-of group, with impact.
One run's building blocks (identity, episodes, summary) live in :mod:`rlgauntlet.experiments.runs`,
the planning it shares with sweeps and the gauntlet in :mod:`rlgauntlet.experiments.evaluations`.

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
from pathlib import Path
from typing import Callable, Sequence

from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec, open_job
from rlgauntlet.experiments.runs import check_seed, run_evaluation
from rlgauntlet.experiments.evaluations import (Report, add_impact, certified_evaluations, checked_threats,
                                        strongest_rows, threat_specs)
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.metrics.perceptual import PERCEPTUAL_EVERY
from rlgauntlet.victims.base import Victim


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
    deterministic: bool = True,
    impact: bool = True,
    min_score: float | None = None,
    action_change_every: int = 1,
    perceptual_every: int = PERCEPTUAL_EVERY,
    lpips_weights: str | Path | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_episode: Callable[[str, EpisodeRecord], None] | None = None,
    threads: int | None = None,
    strongest_of: Sequence[str] = (),
    chunked: bool = False,
) -> Report:
    """Evaluate an agent clean and under every threat; the library form of ``rlgauntlet evaluate``.

    Args:
        agent: an :class:`AgentSpec` (the agent and how to load it: VecNormalize statistics,
            input space, output kind, precision, device, pickled code), a spec string (loaded
            with the defaults) or a loaded :class:`Victim`.
        env: Gymnasium id; the env preset follows from it (an AgentSpec's ``preset``, or
            ``preset`` for a Victim given directly, overrides).
        threats: threat specs (see README, "Threats").
        suite: named suites (``natural``, ``adversarial``).
        eps: budget of the suites; ``eps_grid``: budgets for every threat without ``eps``.
        episodes: episodes per evaluation; episode k uses env seed ``seed + k``.
        n_envs: envs stepped side by side: the same episodes up to the last bits of a batched
            forward pass, which a chaotic env (a MuJoCo walker's fall) can amplify, so a number is
            reproduced with the ``n_envs`` that made it (docs/decisions.md, "An episode depends on its batch").
        store: SQLite file (or an open store) keeping every episode; None keeps them in memory.
        resume: continue the latest matching runs in the store.
        impact: add impact (argmin agent, discrete agents) and generalized impact.
        action_change_every: compare with the clean action on every k-th step only (an estimate
            of the action-change rate, one network call fewer on the other perturbed steps).
        perceptual_every: SSIM/PSNR (and LPIPS) of image perturbations on every k-th step; 0 never.
        on_start, on_episode: progress callbacks, with the evaluation's label.
        strongest_of: attacks (specs; with ``eps_grid``, each at every budget) whose minimum
            mean return per budget is reported with the attack that achieved it (the
            robust-RL evaluation protocol); they run like ``threats`` and are stored as
            ``strongest_of`` runs.
        threads: torch intra-op threads while it runs (default: ``$RLGAUNTLET_THREADS`` or 1;
            see ``rlgauntlet.common.threads``); the caller's setting is restored afterwards.
        chunked: run the episodes ``n_envs`` at a time, each group to its end before the next, as
            the gauntlet's chunks run (``n_envs=5``): a board's episodes to the last bit.
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
    with open_job(agent, env, store, threads, preset) as job:
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
                chunked=chunked,
            ))
        if strongest:
            report.strongest_of = strongest_rows(report.evaluations, strongest, results, seed)
        if "certified" in suites:
            report.evaluations += certified_evaluations(victim, env, eps, eps_grid, episodes, seed, n_envs, results)
        if impact:
            add_impact(report, results, victim, env_fn, episodes, seed, n_envs, deterministic, min_score)
    return report


