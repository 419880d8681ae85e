"""Resumable Stable-Baselines3 training of the zoo presets.

``train_preset`` trains in chunks of ``preset.checkpoint_every`` agent steps and, after each
chunk, atomically writes a checkpoint folder (the SB3 zip with policy and optimizer state,
the VecNormalize statistics, the replay buffer of off-policy algorithms, and
``progress.json``). Started again on the same folder it resumes where the last checkpoint
stopped, so a killed job loses at most one chunk.

Example:
    >>> from rlgauntlet.training.sb3_train import train_preset   # doctest: +SKIP
    >>> train_preset("cartpole-ppo", run_dir="runs/cartpole-ppo")  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

import torch

from rlgauntlet.common.outputs import write_text_atomic
from rlgauntlet.errors import UserError
from rlgauntlet.training.checkpoints import has_checkpoint, load_replay_buffer, recover_folders, resume
from rlgauntlet.training.kit import (CheckpointCallback, build_env, build_model, greedy_games_callback, init_from_agent,
                                     learn_with_checkpoints, quiet_logger, restore_for_resume, resumed_how)
from rlgauntlet.training.run_state import Restored
from rlgauntlet.training.recipes import get_preset


def train_preset(
    name: str,
    run_dir: str | Path,
    device: str = "cpu",
    total_timesteps: int | None = None,
    threads: int = 1,
    stop_at_target: bool = True,
    log: Callable[[str], None] = print,
    show_progress: bool = False,
    seed: int | None = None,
    init_from: str | None = None,
    threat: str | None = None,
    allow_pickle: bool = False,
    deadline: float | None = None,
    subproc_envs: bool = False,
) -> Path:
    """Train (or resume training) the zoo preset ``name`` in ``run_dir``.

    Args:
        name: preset name (see ``rlgauntlet.training.recipes.PRESETS``).
        run_dir: folder for checkpoints; an existing checkpoint there is resumed.
        device: torch device for SB3 (``cpu`` or ``cuda``).
        total_timesteps: override the preset's budget (agent steps over all envs).
        threads: torch CPU threads.
        stop_at_target: stop once the mean return of the last 100 training episodes
            exceeds the preset's target by a margin (1 point, or 2% of |target|).
        show_progress: draw a rich progress bar (steps, recent return, time left).
        seed: override the preset's seed (envs, network initialisation, sampling).
        init_from: fine-tune: start from the policy weights (and VecNormalize statistics) of
            ``zoo:NAME`` or ``sb3:PATH.zip`` instead of a random initialisation.
        threat: train under this observation threat spec, applied to the training envs at
            the network-input level (after VecNormalize), e.g. ``uniform_noise:eps=0.05``.
        allow_pickle: resume from a pickled replay buffer of an earlier version, and read the
            ``init_from`` agent's pickled VecNormalize file (both run code stored in them).
            Checkpoints and agents are otherwise read as data.
        deadline: a ``time.monotonic()`` value: at the first rollout end after it, save and
            stop (a chunk's time budget; the run resumes from there).
        subproc_envs: step the training envs in worker processes (SB3's SubprocVecEnv; same
            envs and seeds), for machines with cores to spare.

    Returns:
        The checkpoint folder holding ``model.zip`` (and ``vecnormalize.pkl`` if any).
    """
    preset = get_preset(name)
    if seed is not None:
        preset = dataclasses.replace(preset, seed=seed)
    init_from = init_from or preset.init_from
    stop_at_target = stop_at_target and preset.stop_at_target
    if threat is not None:
        from rlgauntlet.threats import parse_threat

        parse_threat(threat)  # a bad spec fails before anything is built
    torch.set_num_threads(threads)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    recover_folders(run_dir)  # before its envs read the checkpoint's VecNormalize statistics
    budget = total_timesteps or preset.total_timesteps
    env = build_env(preset, run_dir, threat, subproc_envs)
    ckpt = run_dir / "checkpoint"
    progress: dict = {"preset": name, "seed": preset.seed, "threat": threat, "history": []}
    restored: Restored | None = None  # what a resume put back
    if has_checkpoint(ckpt):
        model = build_model(preset, env, device)
        progress = json.loads((ckpt / "progress.json").read_text())
        resume(model, ckpt, progress)
        load_replay_buffer(model, ckpt, allow_pickle=allow_pickle)
        if progress.get("seed", preset.seed) != preset.seed or progress.get("threat") != threat:
            raise UserError(f"{run_dir} holds a run with seed {progress.get('seed')} and threat {progress.get('threat')}; "
                            "resume it with the same --seed and --threat, or give a new --run-dir")
        restored = restore_for_resume(model, ckpt, progress)
        log(f"[{name}] resuming at {model.num_timesteps} steps, {resumed_how(restored)}")
    else:
        model = build_model(preset, env, device)
        if init_from is not None:
            progress["init_from"] = init_from_agent(model, env, init_from, preset, allow_pickle)
        log(f"[{name}] starting: {preset.algo.upper()} on {preset.env_id}, {budget} steps, seed {preset.seed}"
            + (f", from {init_from}" if init_from else "") + (f", under {threat}" if threat else ""))
    if threat is not None:
        env.attach(model)
    margin = max(1.0, 0.02 * abs(preset.target_return))
    callback = CheckpointCallback(preset, env, run_dir, progress, margin if stop_at_target else None, log,
                                   budget=budget, show_progress=show_progress, deadline=deadline)
    others: tuple = ()
    if getattr(model, "guard_greedy_return", None) is not None:  # a guard that watches greedy games
        if restored is not None and not restored.exact:  # their schedule starts again, as it always did
            progress.pop("greedy_next_eval", None)
        others = (greedy_games_callback(model, preset, log, progress),)
    # exact resume (training.run_state) where the run's state is data; else it resumes as it always did,
    # and its checkpoints say why (an earlier version's reason is dropped: this run's checkpoints say their own)
    callback.exact_resume = True
    progress.pop("inexact_resume", None)
    # One learn() call over the remaining budget keeps SB3's linear schedules on the
    # preset's nominal budget (progress = 1 - steps/budget), across resumes too.
    if progress.get("stopped_at_target") and total_timesteps is None:
        log(f"[{name}] already reached its target at {model.num_timesteps} steps")
    elif model.num_timesteps < budget:
        learn_with_checkpoints(model, callback, budget, restored, progress, others)
    if threat is not None:
        progress["threat_applied"] = {"perturbed_steps": env.perturbed_steps, "steps": env.total_steps,
                                      "linf_max": env.linf_max}
        log(f"[{name}] {threat} perturbed {env.perturbed_steps} of {env.total_steps} observations "
            f"(largest ℓ∞ {env.linf_max:.4g})")
    progress["finished"] = not progress.get("stopped_at_deadline")
    write_text_atomic(ckpt / "progress.json", json.dumps(progress, indent=2))
    env.close()
    return ckpt


def checkpoint_to_zip(name: str, run_dir: str | Path, target: str | Path, device: str = "cpu") -> Path:
    """Write the checkpoint of preset ``name`` in ``run_dir`` (its zip, or its policy and
    optimizer files as a lent machine returns them) as an SB3 ``model.zip`` at ``target``: the
    file an evaluation (``sb3:TARGET``) or the zoo takes (a VecNormalize preset's statistics stay
    in the checkpoint's ``vecnormalize.pkl``). Nothing of the checkpoint changes."""
    preset = get_preset(name)
    ckpt = Path(run_dir) / "checkpoint"
    if not has_checkpoint(ckpt):
        raise UserError(f"{run_dir} holds no checkpoint of {name}; train it first (rlgauntlet train --preset {name})")
    env = build_env(preset, Path(run_dir))
    try:
        model = build_model(preset, env, device)
        resume(model, ckpt, json.loads((ckpt / "progress.json").read_text()))
        quiet_logger(model)
        model.save(target)
    finally:
        env.close()
    return Path(target)


def train_ensemble(name: str, run_dir: str | Path, solves: Callable[[Path], bool] | None = None,
                   max_seeds: int | None = None, **kwargs) -> tuple[list[Path], list[Path]]:
    """Train (or resume) the members of the ensemble preset ``name``: seed ``preset.seed + k``
    in ``run_dir/member-k`` for k = 0, 1, …, keeping the first ``preset.members`` agents that
    ``solves`` accepts (all, when None), trying at most ``max_seeds`` seeds (default 3·members).
    Keyword arguments are those of :func:`train_preset` (``seed`` moves every member's seed).
    Returns (accepted, rejected) checkpoint folders."""
    preset = get_preset(name)
    base_seed = kwargs.pop("seed", None)
    base_seed = preset.seed if base_seed is None else base_seed
    accepted: list[Path] = []
    rejected: list[Path] = []
    for k in range(max_seeds or 3 * preset.members):
        if len(accepted) == preset.members:
            break
        ckpt = train_preset(name, Path(run_dir) / f"member-{k}", seed=base_seed + k, **kwargs)
        (accepted if solves is None or solves(ckpt) else rejected).append(ckpt)
    if len(accepted) < preset.members:
        raise UserError(f"only {len(accepted)} of {len(accepted) + len(rejected)} seeds of {name} solved the task; "
                        f"an ensemble needs {preset.members} (raise --max-seeds or fix the recipe)")
    return accepted, rejected
