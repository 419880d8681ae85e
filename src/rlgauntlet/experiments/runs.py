"""One run: the episodes of one (agent, env, threat, seed) in the store, and their summary.

The building blocks every job shares: :func:`run_identity` (what makes two runs the same run,
so that ``--resume`` and sweeps find it), :func:`open_run`, :func:`run_evaluation` (run the
missing episodes of a run and summarise it), :func:`summarize` and :func:`run_summary`, and
:func:`check_seed` (episode k uses env seed ``seed + k``).
"""

from __future__ import annotations

import math
import time
from typing import Callable

import gymnasium as gym
import numpy as np

from rlgauntlet.version import __version__
from rlgauntlet.engine.rollout import EpisodeRecord, evaluate_episodes
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.metrics.perceptual import PERCEPTUAL_EVERY, PerceptualMeter
from rlgauntlet.threats.base import Threat
from rlgauntlet.threats.spec import key_spec
from rlgauntlet.victims.base import Victim



def check_seed(seed: int, episodes: int) -> None:
    """Episode k uses env seed ``seed + k``: every one must be a valid env seed."""
    from rlgauntlet.common.seeding import check_seeds

    if episodes < 1:
        raise UserError(f"episodes={episodes}: give at least 1")
    check_seeds([seed], episodes, option="--seed")


def summarize(records: list[EpisodeRecord], threat_name: str, spec: str, seed: int,
              budget_space: str, wall_seconds: float, lpips: bool = False) -> dict:
    """Aggregate episode records into the evaluation summary of the JSON contract.

    ``return_std`` is the population standard deviation (as SB3's ``evaluate_policy``);
    ``return_sem`` is the sample standard deviation over √n. ``perturbed_fraction`` is
    perturbed steps over all steps; ``linf_mean`` and ``l2_mean`` are averages over
    perturbed steps, ``action_change_rate`` over the perturbed steps whose clean action was
    compared (0 when nothing was perturbed).
    """
    records = sorted(records, key=lambda r: r.episode)
    returns = [r.episode_return for r in records]
    n = len(returns)
    steps = sum(r.length for r in records)
    perturbed = sum(r.perturbed_steps for r in records)
    per_perturbed = (lambda total: total / perturbed) if perturbed else (lambda total: 0.0)
    return {
        "threat": threat_name,
        "spec": spec,
        "episodes": n,
        "seed": seed,
        "return_mean": float(np.mean(returns)) if n else math.nan,
        "return_std": float(np.std(returns)) if n else math.nan,
        "return_sem": float(np.std(returns, ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
        "returns": returns,
        "lengths": [r.length for r in records],
        "perturbed_fraction": perturbed / steps if steps else 0.0,
        "action_change_rate": (sum(r.action_changes for r in records) / checks) if (checks := sum(
            r.action_checks for r in records)) else 0.0,
        "linf_mean": per_perturbed(sum(r.linf_sum for r in records)),
        "linf_max": max((r.linf_max for r in records), default=0.0),
        "l2_mean": per_perturbed(sum(r.l2_sum for r in records)),
        "e_adv": [r.perturbed_steps / r.length if r.length else 0.0 for r in records],
        **_perceptual_summary(records, lpips),
        "budget_space": budget_space,
        "wall_seconds": wall_seconds,
        **_world_summary(records),
        **_uncertainty_summary(records),
    }


def _uncertainty_summary(records: list[EpisodeRecord]) -> dict:
    """For runs that scored the agent's uncertainty: its mean per step and its largest value."""
    steps = sum(r.uncertainty_steps for r in records)
    if not steps:
        return {}
    return {"uncertainty_mean": sum(r.uncertainty_sum for r in records) / steps,
            "uncertainty_max": max(r.uncertainty_max for r in records), "uncertainty_steps": steps}


def _world_summary(records: list[EpisodeRecord]) -> dict:
    """For world threats: what the changed episodes' envs were set to (the first one; every
    changed episode gets the same setting) and how many episodes were changed."""
    changed = [r.world for r in records if r.world is not None]
    return {"world": changed[0], "world_episodes": len(changed)} if changed else {}


def _perceptual_summary(records: list[EpisodeRecord], lpips: bool = False) -> dict:
    """Mean SSIM, PSNR (from the mean squared error, pixels in [0, 1]) and, when measured,
    LPIPS over the sampled steps."""
    n = sum(r.perceptual_steps for r in records)
    if n == 0:
        return {"ssim_mean": None, "psnr_mean": None, "lpips_mean": None, "perceptual_steps": 0}
    mse = sum(r.mse_sum for r in records) / n
    return {
        "ssim_mean": sum(r.ssim_sum for r in records) / n,
        "psnr_mean": None if mse == 0 else 10.0 * math.log10(1.0 / mse),  # None: identical images
        "lpips_mean": sum(r.lpips_sum for r in records) / n if lpips else None,
        "perceptual_steps": n,
    }


def run_identity(env_info: dict, victim: Victim, threat: Threat | None, seed: int, deterministic: bool = True,
                 label: str | None = None, lpips: bool = False, action_change_every: int = 1,
                 uncertainty: str | None = None, uncertainty_series: bool = False,
                 perceptual_every: int = PERCEPTUAL_EVERY) -> tuple[dict, dict]:
    """What determines an evaluation run's episodes (hashed into its store key) and the meta
    stored with it: (identity, meta). A sweep and ``evaluate --resume`` find the same run."""
    spec = threat.spec if threat is not None else (label or "clean")
    name = threat.label if threat is not None else (label or "clean")
    identity = {
        "agent": victim.description.get("sha256") or victim.description,
        "vecnormalize": victim.description.get("vecnormalize"),
        "env": env_info,
        "spec": key_spec(threat) if threat is not None else spec,  # files by name and content, not place
        "seed": seed,
        "deterministic": deterministic,
        "lpips": lpips,
        "action_change_every": action_change_every,
    }
    if not victim.clip_actions:  # only then: scored as its authors score it, never mixed with clipped runs
        identity["actions"] = "unclipped"
    if perceptual_every != PERCEPTUAL_EVERY:  # only then: the keys of earlier runs stay as they were
        identity["perceptual_every"] = perceptual_every
    files = threat.fingerprint() if threat is not None else {}
    if files:  # a learned attacker retrained or resumed in the same folder is another run
        identity["threat_files"] = files
    if uncertainty is not None:  # only then: the keys of earlier runs stay as they were
        identity["uncertainty"] = {"reduce": uncertainty, "series": uncertainty_series,
                                   "method": victim.uncertainty_method}
        if victim.uncertainty_output != "policy":  # only then: keys of policy-output runs stay as they were
            identity["uncertainty"]["output"] = victim.uncertainty_output
    meta = {
        "rlgauntlet_version": __version__,
        "agent": victim.description,
        "env": env_info,
        "threat": name,
        "spec": spec,
        "seed": seed,
        "deterministic": deterministic,
        "budget_space": threat.measure_space(victim) if threat is not None else victim.budget_space,
        "place": threat.place if threat is not None else None,
        "params": threat.params.model_dump() if threat is not None else {},
        "p": threat.schedule.p if threat is not None else 1.0,
    }
    if files:
        meta["threat_files"] = files
    if uncertainty is not None:
        meta["uncertainty"] = identity["uncertainty"]
    return identity, meta


def open_run(store: ResultsStore, env_info: dict, victim: Victim, threat: Threat | None, seed: int,
             deterministic: bool = True, resume: bool = False, kind: str = "evaluation", **identity_args) -> tuple[int, dict]:
    """The run an evaluation writes to: with ``resume`` the latest run of the same identity,
    else (or when there is none) a new one. Returns (run_id, identity)."""
    identity, meta = run_identity(env_info, victim, threat, seed, deterministic, **identity_args)
    key = run_key(identity)
    run_id = store.latest_run(key) if resume else None
    if run_id is None and resume and threat is not None and identity["spec"] != threat.spec:
        # a run stored before keys named files by name and content (2026-12-04) has the whole path
        run_id = store.latest_run(run_key({**identity, "spec": threat.spec}))
    if run_id is None:
        run_id = store.create_run(key, meta, kind=kind)
    return run_id, identity


def run_evaluation(
    store: ResultsStore,
    env_fn: Callable[[], gym.Env],
    env_info: dict,
    victim: Victim,
    threat: Threat | None,
    episodes: int,
    seed: int,
    n_envs: int = 1,
    deterministic: bool = True,
    resume: bool = False,
    on_step: Callable[[int], None] | None = None,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
    label: str | None = None,
    perceptual: PerceptualMeter | None = None,
    action_change_every: int = 1,
    kind: str = "evaluation",
    uncertainty: str | None = None,
    uncertainty_series: bool = False,
    chunked: bool = False,
) -> dict:
    """Run one evaluation (clean when ``threat`` is None), storing episodes as they finish.

    ``chunked``: the episodes ``n_envs`` at a time, each group run to its end before the next
    starts, as the gauntlet runs its chunks (``n_envs`` 5), so that a board's episodes are
    reproduced to the last bit (docs/decisions.md, "An episode depends on its batch"); otherwise
    a finished env starts the next episode at once.

    With ``resume``, the latest run with the same identity is continued and only missing
    episode indices are run; otherwise a new run is recorded. ``uncertainty`` (``mean`` or
    ``max``) scores every step with the agent's own uncertainty (OOD detection), keeping the
    per-step series when ``uncertainty_series``.
    """
    run_id, identity = open_run(store, env_info, victim, threat, seed, deterministic, resume=resume, label=label,
                                lpips=perceptual is not None and perceptual.lpips is not None,
                                action_change_every=action_change_every, kind=kind, uncertainty=uncertainty,
                                uncertainty_series=uncertainty_series,
                                perceptual_every=PERCEPTUAL_EVERY if perceptual is None else perceptual.every)
    todo = [k for k in range(episodes) if k not in store.done_episodes(run_id)]

    last = [time.perf_counter()]

    def record(rec: EpisodeRecord) -> None:
        store.add_episode(run_id, rec)
        now = time.perf_counter()
        store.add_wall_seconds(run_id, now - last[0])  # as episodes finish: a kill keeps the time spent
        last[0] = now
        if on_episode is not None:
            on_episode(rec)

    groups = [todo[start:start + n_envs] for start in range(0, len(todo), n_envs)] if chunked else [todo]
    try:
        for group in groups:
            evaluate_episodes(env_fn, victim, threat, group, seed, n_envs, deterministic, on_episode=record,
                              on_step=on_step, perceptual=perceptual, action_change_every=action_change_every,
                              uncertainty=uncertainty, uncertainty_series=uncertainty_series)
    finally:
        store.add_wall_seconds(run_id, time.perf_counter() - last[0])
    return run_summary(store, run_id, victim, threat, seed, episodes, deterministic, label, identity["lpips"])


def run_summary(store: ResultsStore, run_id: int, victim: Victim, threat: Threat | None, seed: int, episodes: int,
                deterministic: bool = True, label: str | None = None, lpips: bool = False) -> dict:
    """The evaluation summary of a stored run (its first ``episodes`` episodes), with its run id
    and run-level metrics."""
    spec = threat.spec if threat is not None else (label or "clean")
    name = threat.label if threat is not None else (label or "clean")
    space = threat.measure_space(victim) if threat is not None else str(victim.budget_space)
    summary = summarize(store.episodes(run_id, limit=episodes), name, spec, seed,
                        space, store.wall_seconds(run_id), lpips=lpips)
    summary["place"] = threat.place if threat is not None else None
    summary["metrics"] = store.metrics(run_id)
    summary["run_id"] = run_id
    summary["deterministic"] = deterministic
    return summary
