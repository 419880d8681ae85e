"""The model-based attack paper's protocol (Weng et al. 2020, Tables 1–3): attacks and baselines
on the same runs, judged by total distance to the unsafe state and by total reward.

Run k is episode k (env seed ``seed + k``) for every method, so every method starts from the
same initial states. Per run we record the total loss Σ_t d(s_t, target) over the true states
after every step (the paper's "total loss"; an episode the env terminated early keeps its last
state up to the time limit, ``Target.episode_loss``; ``loss_lived`` is the sum without that), the return, the length and the largest
perturbation applied. The comparison gives mean (std), median, min and max per method, the
averaged ratio ours / baseline (the mean of per-run ratios) and "best attack" counts: in how
many runs each method has the lowest total loss among all methods compared.

Example:
    >>> runs = {"ours": [{"loss": 1.0, "return": 5.0}, {"loss": 2.0, "return": 4.0}],
    ...         "flip": [{"loss": 4.0, "return": 9.0}, {"loss": 1.0, "return": 9.0}]}
    >>> table = compare(runs, ours="ours")
    >>> table["ratios"]["flip"]["loss"], table["wins"]
    (1.125, {'ours': 1, 'flip': 1})
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.threats.model_based.target import Target
from rlgauntlet.threats.spec import parse_threat
from rlgauntlet.victims.base import Victim


def attack_runs(victim: Victim, env_fn: Callable, env_id: str, spec: str | None, target: Target, episodes: int,
                seed: int = 0, n_envs: int = 1) -> list[dict]:
    """Run episodes ``0 .. episodes-1`` under ``spec`` (None: clean) and measure each run."""
    losses: dict[int, list[float]] = {}

    def on_transition(episode, obs, action, next_obs) -> None:
        s = torch.as_tensor(np.asarray(next_obs, dtype=np.float64)).reshape(1, -1)
        losses.setdefault(episode, []).append(float(target.distance(s)[0]))

    probe = env_fn()
    max_steps = probe.spec.max_episode_steps if probe.spec is not None else None
    probe.close()
    threat = parse_threat(spec) if spec else None
    started = time.perf_counter()
    records = evaluate_episodes(env_fn, victim, threat, range(episodes), seed, n_envs=n_envs,
                                on_transition=on_transition)
    seconds = time.perf_counter() - started
    return [{"episode": r.episode, "seed": r.seed, "loss": target.episode_loss(losses.get(r.episode, []), max_steps),
             "loss_lived": float(sum(losses.get(r.episode, []))), "return": r.episode_return,
             "length": r.length, "linf_max": r.linf_max, "seconds": seconds / max(1, len(records))}
            for r in sorted(records, key=lambda r: r.episode)]


def run_stats(values: list[float]) -> dict:
    """mean, std (ddof = 1, as the paper's tables), median, min and max over runs."""
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if len(a) > 1 else 0.0, "median": float(np.median(a)),
            "min": float(a.min()), "max": float(a.max())}


def compare(runs: dict[str, list[dict]], ours: str) -> dict:
    """Statistics per method, ratios of ``ours`` to each other method, and wins (module docstring).

    ``runs[method]`` lists one dict per run (same runs, same order, for every method) with
    ``loss`` and ``return``. A tie for the lowest loss counts for every tied method.
    """
    methods = list(runs)
    n = len(runs[ours])
    if any(len(r) != n for r in runs.values()):
        raise ValueError("every method needs the same runs")
    stats = {m: {"loss": run_stats([r["loss"] for r in runs[m]]), "return": run_stats([r["return"] for r in runs[m]])}
             for m in methods}
    ratios = {}
    for m in methods:
        if m == ours:
            continue
        ratios[m] = {key: float(np.mean([o[key] / b[key] if b[key] != 0 else np.nan
                                         for o, b in zip(runs[ours], runs[m])]))
                     for key in ("loss", "return")}
    wins = {m: 0 for m in methods}
    for k in range(n):
        best = min(runs[m][k]["loss"] for m in methods)
        for m in methods:
            wins[m] += int(runs[m][k]["loss"] == best)
    return {"runs": n, "stats": stats, "ratios": ratios, "wins": wins}
