"""Fourier analysis of threats on the states an agent visits (Daylight §4, Figure 1).

The clean agent is rolled out by the engine (episodes seeded ``seed``, ``seed + 1``, ...);
each threat perturbs the collected inputs, and :mod:`rlgauntlet.metrics.spectrum` compares
the power spectra of the newest frame of each input.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import gymnasium as gym
import torch

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.errors import UserError
from rlgauntlet.metrics.spectrum import spectrum_report
from rlgauntlet.threats.base import perturb_once
from rlgauntlet.victims import Victim


def visited_inputs(victim: Victim, env_fn: Callable[[], gym.Env], steps: int, seed: int) -> torch.Tensor:
    """The first ``steps`` clean network inputs the agent sees, episode after episode (one env)."""
    xs: list[torch.Tensor] = []

    def collect(x: torch.Tensor) -> bool:
        xs.extend(x)
        return len(xs) >= steps

    evaluate_episodes(env_fn, victim, None, itertools.count(), seed, n_envs=1, on_inputs=collect)
    return torch.stack(xs[:steps])


def analyse_spectrum(victim: Victim, env_fn: Callable[[], gym.Env], threats: Sequence, steps: int = 256,
                     seed: int = 0) -> dict:
    """Power spectra of clean vs perturbed newest frames of ``steps`` visited states, and the
    energy change per band, for each threat (observation threats on image agents)."""
    if victim.budget_space != "pixel01":
        raise UserError("spectrum analyses image observations; this agent's input is not an image")
    for t in threats:
        if t.place != "observation":
            raise UserError(f"spectrum analyses observation threats; {t.spec} acts on the {t.place}")
        t.check_victim(victim)
    states = visited_inputs(victim, env_fn, steps, seed)
    rng = BatchRNG([episode_generator(seed, k, "threat") for k in range(states.shape[0])])
    perturbed = {t.spec: perturb_once(t, states, victim, rng)[:, -1] for t in threats}
    report = spectrum_report(states[:, -1], perturbed)
    report.update({"agent": victim.description, "steps": int(states.shape[0]), "seed": seed,
                   "frame": "newest frame of each stacked input, network input scale [0, 1]"})
    return report


def spectrum(agent, env: str, threats: Sequence[str], steps: int = 256, seed: int = 0,
             threads: int | None = None) -> dict:
    """The spectrum job (``rlgauntlet spectrum``): ``agent`` (a spec string, an ``AgentSpec`` or a
    Victim) plays ``env`` clean for ``steps`` steps from episode seed ``seed`` on, and each
    observation threat of ``threats`` (specs) is analysed on the states it visited."""
    from rlgauntlet.experiments.agents import open_job
    from rlgauntlet.threats import parse_threat

    parsed = [parse_threat(s) for s in threats]  # a bad spec fails before anything loads
    with open_job(agent, env, threads=threads) as job:
        report = analyse_spectrum(job.victim, job.env_fn, parsed, steps, seed)
    report["env"] = env
    return report
