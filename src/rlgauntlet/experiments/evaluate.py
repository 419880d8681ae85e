"""One evaluation: run (or resume) the episodes of one threat and summarise them.

The summary is the JSON contract of ``rlgauntlet evaluate`` (see README, "JSON").
"""

from __future__ import annotations

import math
import time
from typing import Callable

import gymnasium as gym
import numpy as np

import rlgauntlet
from rlgauntlet.engine.rollout import EpisodeRecord, evaluate_episodes
from rlgauntlet.experiments.store import ResultsStore, run_key
from rlgauntlet.metrics.perceptual import PerceptualMeter
from rlgauntlet.threats.base import Threat
from rlgauntlet.victims.base import Victim


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
    }


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
) -> dict:
    """Run one evaluation (clean when ``threat`` is None), storing episodes as they finish.

    With ``resume``, the latest run with the same identity is continued and only missing
    episode indices are run; otherwise a new run is recorded.
    """
    spec = threat.spec if threat is not None else (label or "clean")
    name = threat.label if threat is not None else (label or "clean")
    identity = {
        "agent": victim.description.get("sha256") or victim.description,
        "vecnormalize": victim.description.get("vecnormalize"),
        "env": env_info,
        "spec": spec,
        "seed": seed,
        "deterministic": deterministic,
        "lpips": perceptual is not None and perceptual.lpips is not None,
        "action_change_every": action_change_every,
    }
    key = run_key(identity)
    run_id = store.latest_run(key) if resume else None
    if run_id is None:
        meta = {
            "rlgauntlet_version": rlgauntlet.__version__,
            "agent": victim.description,
            "env": env_info,
            "threat": name,
            "spec": spec,
            "seed": seed,
            "deterministic": deterministic,
            "budget_space": victim.budget_space,
            "params": threat.params.model_dump() if threat is not None else {},
            "p": threat.schedule.p if threat is not None else 1.0,
        }
        run_id = store.create_run(key, meta)
    todo = [k for k in range(episodes) if k not in store.done_episodes(run_id)]

    def record(rec: EpisodeRecord) -> None:
        store.add_episode(run_id, rec)
        if on_episode is not None:
            on_episode(rec)

    start = time.perf_counter()
    try:
        evaluate_episodes(env_fn, victim, threat, todo, seed, n_envs, deterministic, on_episode=record, on_step=on_step,
                          perceptual=perceptual, action_change_every=action_change_every)
    finally:
        store.add_wall_seconds(run_id, time.perf_counter() - start)
    summary = summarize(store.episodes(run_id, limit=episodes), name, spec, seed,
                        str(victim.budget_space), store.wall_seconds(run_id), lpips=identity["lpips"])
    summary["run_id"] = run_id
    summary["deterministic"] = deterministic
    return summary
