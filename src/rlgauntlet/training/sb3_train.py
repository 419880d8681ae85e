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
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import Logger

from rlgauntlet.envs.presets import make_train_vec_env
from rlgauntlet.errors import UserError
from rlgauntlet.training.algorithms import SB3_BASES, algorithm_class
from rlgauntlet.training.checkpoints import (has_checkpoint, load_replay_buffer, replace_folder, restore_vecnormalize,
                                             resume, save_replay_buffer)
from rlgauntlet.training.presets import TrainPreset, get_preset


def _build_env(preset: TrainPreset, run_dir: Path, threat: str | None = None, subproc_envs: bool = False):
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_train_vec_env(preset.env_id, preset.n_envs, preset.seed, subproc=subproc_envs)
    if preset.normalize:
        env = VecNormalize(env, norm_obs=True, norm_reward=True, gamma=preset.hyperparams.get("gamma", 0.99))
        stats = run_dir / "checkpoint" / "vecnormalize.pkl"
        if stats.exists() and has_checkpoint(run_dir / "checkpoint"):
            restore_vecnormalize(env, stats)  # read as data: a resumed checkpoint runs no code
    if threat is not None:
        from rlgauntlet.threats import parse_threat
        from rlgauntlet.training.threat_env import ThreatVecEnv

        env = ThreatVecEnv(env, parse_threat(threat), seed=preset.seed)
    return env


def quiet_logger(model) -> None:
    """Give ``model`` a logger that writes nowhere. Without one, every ``learn()`` call makes
    an empty ``SB3-<date>`` folder in the user's temporary directory (SB3's default
    ``configure()``); our progress goes to the run folder's progress.json instead."""
    model.set_logger(Logger(folder=None, output_formats=[]))


def _build_model(preset: TrainPreset, env, device: str):
    cls = algorithm_class(preset.algo)
    kwargs = dict(preset.hyperparams)
    policy = kwargs.pop("policy")
    if preset.action_noise_std is not None:
        from stable_baselines3.common.noise import NormalActionNoise

        dim = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(dim), preset.action_noise_std * np.ones(dim))
    return cls(policy, env, seed=preset.seed, device=device, verbose=0, **kwargs)


def _init_from(model, env, agent: str, preset: TrainPreset, allow_pickle: bool = False) -> dict:
    """Load the policy weights (and VecNormalize statistics) of ``agent`` into a fresh model:
    fine-tuning starts from them with a new optimizer. The files are read as data (weights
    only, statistics without unpickling code, unless ``allow_pickle``: the user's
    ``--allow-pickle``). Returns what was loaded, for the record."""
    from rlgauntlet.victims.sb3 import VecNormalizeStats, sha256_file
    from rlgauntlet.victims.sb3_files import read_sb3_zip, with_target_networks

    path, vecnormalize = _agent_files(agent)
    _, state = read_sb3_zip(path)
    try:
        model.policy.load_state_dict(with_target_networks(state, list(model.policy.state_dict())))
    except (RuntimeError, KeyError) as exc:
        raise UserError(
            f"--init-from {agent}: its policy does not fit the {preset.algo.upper()} policy of preset {preset.name} "
            f"({str(exc).splitlines()[0][:120]}); start from an agent of the same algorithm, env and network"
        ) from None
    record = {"agent": agent, "sha256": sha256_file(path)}
    norm = _find_vecnormalize(env)
    if vecnormalize is not None and norm is not None:
        stats = VecNormalizeStats(vecnormalize, allow_pickle=allow_pickle)
        if stats.mean.shape != norm.obs_rms.mean.shape:
            raise UserError(f"--init-from {agent}: its VecNormalize statistics have shape {stats.mean.shape}, the "
                            f"env's observations {norm.obs_rms.mean.shape}; start from an agent of the same env")
        norm.obs_rms.mean, norm.obs_rms.var = stats.mean.copy(), stats.var.copy()
        norm.obs_rms.count = stats.count
        record["vecnormalize_sha256"] = sha256_file(vecnormalize)
    return record


def _find_vecnormalize(env):
    from stable_baselines3.common.vec_env import VecNormalize

    while env is not None:
        if isinstance(env, VecNormalize):
            return env
        env = getattr(env, "venv", None)
    return None


def _agent_files(agent: str) -> tuple[Path, Path | None]:
    """The SB3 zip (and VecNormalize file) behind ``zoo:NAME`` or ``sb3:PATH.zip``."""
    source, _, rest = agent.partition(":")
    if source == "zoo":
        from rlgauntlet.zoo import zoo_entry, zoo_file

        entry = zoo_entry(rest)
        return zoo_file(entry), (zoo_file(entry, "vecnormalize") if "vecnormalize" in entry else None)
    if source == "sb3":
        path = Path(rest.rsplit(":", 1)[0] if rest.rsplit(":", 1)[-1] in SB3_BASES else rest)
        if not path.exists():
            raise UserError(f"--init-from {agent}: {path} not found; give zoo:NAME or sb3:PATH.zip")
        stats = [path.with_name(path.stem + ".vecnormalize" + ext) for ext in (".pkl", ".json")]
        return path, next((s for s in stats if s.exists()), None)
    raise UserError(f"--init-from {agent}: give zoo:NAME or sb3:PATH.zip (an SB3 agent to fine-tune)")


def _save_checkpoint(model, env, run_dir: Path, progress: dict) -> None:
    tmp = run_dir / "checkpoint.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save(tmp / "model.zip")
    # Policy weights and optimizer state also as plain torch files, loadable without SB3.
    torch.save(model.policy.state_dict(), tmp / "policy.pt")
    if getattr(model.policy, "optimizer", None) is not None:
        torch.save(model.policy.optimizer.state_dict(), tmp / "optimizer.pt")
    norm = _find_vecnormalize(env)
    if norm is not None:
        norm.save(str(tmp / "vecnormalize.pkl"))
    if hasattr(model, "replay_buffer") and model.replay_buffer is not None:
        save_replay_buffer(model, tmp / "replay_buffer.npz")  # plain arrays: resuming unpickles nothing
    (tmp / "progress.json").write_text(json.dumps(progress, indent=2))
    replace_folder(tmp, run_dir / "checkpoint")


class _CheckpointCallback(BaseCallback):
    """Saves a checkpoint every ``preset.checkpoint_every`` steps (at the end of a rollout)
    and stops training once recent training episodes beat the target by ``margin``."""

    def __init__(self, preset, env, run_dir, progress, margin, log, budget=None, show_progress=False,
                 deadline: float | None = None):
        super().__init__()
        self.deadline = deadline  # time.monotonic() after which the run saves and stops (a chunk's time budget)
        self.budget, self.show_progress, self.bar = budget, show_progress, None
        self.preset, self.env, self.run_dir = preset, env, run_dir
        self.progress, self.margin, self.log = progress, margin, log
        self.next_save = None
        self.stop = False
        self.last_time = time.time()
        self.last_steps = None

    def _on_training_start(self) -> None:
        self.progress.pop("stopped_at_deadline", None)  # a resumed chunk starts with its own budget
        every = self.preset.checkpoint_every
        self.next_save = (self.model.num_timesteps // every + 1) * every
        self.last_steps = self.model.num_timesteps
        if self.show_progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn(f"[{self.preset.name}]"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("return {task.fields[ret]}"), TimeRemainingColumn(), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("train", total=self.budget, completed=self.model.num_timesteps, ret="-")

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.stop()

    def _on_step(self) -> bool:
        return not self.stop

    def _on_rollout_end(self) -> None:
        if self.bar is not None:
            recent = _recent_return(self.model)
            self.bar.update(self.task, completed=self.model.num_timesteps, ret="-" if recent is None else f"{recent:.1f}")
        if self.model.num_timesteps >= self.next_save:
            self.save()
            self.next_save += self.preset.checkpoint_every
        if self.deadline is not None and time.monotonic() >= self.deadline and not self.stop:
            # stop at the next step: the update of this rollout still runs, and the run saves after it
            self.log(f"[{self.preset.name}] time budget reached at {self.model.num_timesteps} steps; stopping")
            self.progress["stopped_at_deadline"] = int(self.model.num_timesteps)
            self.stop = True

    def save(self) -> None:
        model = self.model
        recent = _recent_return(model)
        now = time.time()
        rate = (model.num_timesteps - self.last_steps) / max(now - self.last_time, 1e-9)
        self.last_time, self.last_steps = now, model.num_timesteps
        self.progress["num_timesteps"] = int(model.num_timesteps)
        point = {"steps": int(model.num_timesteps), "recent_return": recent, "steps_per_second": round(rate, 1),
                 "time": round(now)}
        if hasattr(model, "schedule_state"):  # an algorithm whose schedule is state, not a function of the steps
            self.progress["schedule"] = model.schedule_state()
            point["schedule"] = self.progress["schedule"]
        self.progress["history"].append(point)
        _save_checkpoint(model, self.env, self.run_dir, self.progress)
        self.log(f"[{self.preset.name}] {model.num_timesteps} steps, recent training return {recent}, {rate:.0f} steps/s")
        if (not self.stop and self.margin is not None and recent is not None
                and len(model.ep_info_buffer) >= 20
                and recent >= self.preset.target_return + self.margin):
            self.log(f"[{self.preset.name}] target reached in training episodes; stopping")
            self.progress["stopped_at_target"] = True
            self.stop = True



#: the greedy games a guard watches start from seeds SEED + GREEDY_SEED_OFFSET + i: games of their
#: own, neither the training envs' (SEED + i) nor an evaluation's (0, 1, … by default)
GREEDY_SEED_OFFSET = 10_000


def _greedy_games(model, preset: TrainPreset, log):
    from rlgauntlet.training.greedy_eval import GreedyEvalCallback

    if preset.normalize:
        raise UserError(f"{preset.name}: a greedy-games guard needs a preset without VecNormalize "
                        "(its games would see unnormalised observations); drop guard_greedy_return")
    games = make_train_vec_env(preset.env_id, model.guard_greedy_games, preset.seed + GREEDY_SEED_OFFSET)
    return GreedyEvalCallback(games, model.guard_greedy_every, preset.seed + GREEDY_SEED_OFFSET,
                              log=lambda line: log(f"[{preset.name}] {line}"))


def _recent_return(model) -> float | None:
    buf = getattr(model, "ep_info_buffer", None)
    if not buf:
        return None
    return float(np.mean([e["r"] for e in buf]))


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
        name: preset name (see ``rlgauntlet.training.presets.PRESETS``).
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
    budget = total_timesteps or preset.total_timesteps
    env = _build_env(preset, run_dir, threat, subproc_envs)
    ckpt = run_dir / "checkpoint"
    progress: dict = {"preset": name, "seed": preset.seed, "threat": threat, "history": []}
    if has_checkpoint(ckpt):
        model = _build_model(preset, env, device)
        progress = json.loads((ckpt / "progress.json").read_text())
        resume(model, ckpt, progress)
        load_replay_buffer(model, ckpt, allow_pickle=allow_pickle)
        if progress.get("seed", preset.seed) != preset.seed or progress.get("threat") != threat:
            raise UserError(f"{run_dir} holds a run with seed {progress.get('seed')} and threat {progress.get('threat')}; "
                            "resume it with the same --seed and --threat, or give a new --run-dir")
        log(f"[{name}] resuming at {model.num_timesteps} steps")
    else:
        model = _build_model(preset, env, device)
        if init_from is not None:
            progress["init_from"] = _init_from(model, env, init_from, preset, allow_pickle)
        log(f"[{name}] starting: {preset.algo.upper()} on {preset.env_id}, {budget} steps, seed {preset.seed}"
            + (f", from {init_from}" if init_from else "") + (f", under {threat}" if threat else ""))
    if threat is not None:
        env.attach(model)
    margin = max(1.0, 0.02 * abs(preset.target_return))
    callback = _CheckpointCallback(preset, env, run_dir, progress, margin if stop_at_target else None, log,
                                   budget=budget, show_progress=show_progress, deadline=deadline)
    callbacks = callback
    if getattr(model, "guard_greedy_return", None) is not None:  # a guard that watches greedy games
        callbacks = CallbackList([_greedy_games(model, preset, log), callback])
    # One learn() call over the remaining budget keeps SB3's linear schedules on the
    # preset's nominal budget (progress = 1 - steps/budget), across resumes too.
    if progress.get("stopped_at_target") and total_timesteps is None:
        log(f"[{name}] already reached its target at {model.num_timesteps} steps")
    elif model.num_timesteps < budget:
        quiet_logger(model)
        model.learn(total_timesteps=budget - model.num_timesteps, reset_num_timesteps=False, callback=callbacks)
        if model.num_timesteps != callback.last_steps:
            callback.save()
    if threat is not None:
        progress["threat_applied"] = {"perturbed_steps": env.perturbed_steps, "steps": env.total_steps,
                                      "linf_max": env.linf_max}
        log(f"[{name}] {threat} perturbed {env.perturbed_steps} of {env.total_steps} observations "
            f"(largest ℓ∞ {env.linf_max:.4g})")
    progress["finished"] = not progress.get("stopped_at_deadline")
    (ckpt / "progress.json").write_text(json.dumps(progress, indent=2))
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
    env = _build_env(preset, Path(run_dir))
    try:
        model = _build_model(preset, env, device)
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
