"""The trainer kit: what every trainer of this package shares, public so that the defences and
attacker trainers build on it rather than on another module's private names.

* :func:`build_env` and :func:`build_model`: a preset's training envs (VecNormalize, a threat)
  and its SB3 model;
* :func:`init_from_agent`: start from another agent's weights and statistics, read as data;
* :func:`find_vecnormalize`: the VecNormalize wrapper inside a VecEnv;
* :func:`save_checkpoint` and :class:`CheckpointCallback`: resumable checkpoints, a progress
  bar, a time budget and the stop-at-target rule; :func:`greedy_games_callback` for a guard's
  greedy games;
* :func:`quiet_logger`: an SB3 logger that writes nowhere.

It may import the training presets and checkpoints, the envs, threats and victims; trainers
(``sb3_train``, ``atla``, ``attack_train``) import it, never the other way round.

Example:
    >>> from rlgauntlet.training.recipes import get_preset
    >>> preset = get_preset("cartpole-ppo")
    >>> env = build_env(preset, Path("runs/none"))
    >>> type(build_model(preset, env, "cpu")).__name__
    'PPO'
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path
from time import monotonic as autosave_clock  # its own name: tests drive a time budget's ``time.monotonic``

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger

from rlgauntlet.common import stopping
from rlgauntlet.envs.presets import make_train_vec_env
from rlgauntlet.errors import UserError
from rlgauntlet.training.algorithms import algorithm_class
from rlgauntlet.training.checkpoints import has_checkpoint, replace_folder, restore_vecnormalize, save_replay_buffer
from rlgauntlet.training.recipes import TrainPreset
from rlgauntlet.training.run_state import (finish_pending_update, NotResumable, Restored, restore_run_state, RUN_STATE,
                                           save_run_state)


def build_env(preset: TrainPreset, run_dir: Path, threat: str | None = None, subproc_envs: bool = False):
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


def build_model(preset: TrainPreset, env, device: str):
    cls = algorithm_class(preset.algo)
    kwargs = dict(preset.hyperparams)
    policy = kwargs.pop("policy")
    if preset.action_noise_std is not None:
        from stable_baselines3.common.noise import NormalActionNoise

        dim = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(dim), preset.action_noise_std * np.ones(dim))
    return cls(policy, env, seed=preset.seed, device=device, verbose=0, **kwargs)


def init_from_agent(model, env, agent: str, preset: TrainPreset, allow_pickle: bool = False) -> dict:
    """Load the policy weights (and VecNormalize statistics) of ``agent`` into a fresh model:
    fine-tuning starts from them with a new optimizer. The files are read as data (weights
    only, statistics without unpickling code, unless ``allow_pickle``: the user's
    ``--allow-pickle``). Returns what was loaded, for the record."""
    from rlgauntlet.victims.sb3 import VecNormalizeStats, sha256_file
    from rlgauntlet.victims.sb3_files import read_sb3_zip, with_target_networks

    path, vecnormalize = agent_files(agent)
    _, state = read_sb3_zip(path)
    wanted_lstm, given_lstm = hasattr(model.policy, "lstm_actor"), any(k.startswith("lstm_actor.") for k in state)
    if wanted_lstm != given_lstm:
        kinds = {True: "an LSTM policy", False: "a memoryless (MLP) policy"}
        raise UserError(f"--init-from {agent}: it is {kinds[given_lstm]} and preset {preset.name} trains "
                        f"{kinds[wanted_lstm]}; start from an agent of the same kind (or train from scratch)")
    try:
        model.policy.load_state_dict(with_target_networks(state, list(model.policy.state_dict())))
    except (RuntimeError, KeyError) as exc:
        raise UserError(
            f"--init-from {agent}: its policy does not fit the {preset.algo.upper()} policy of preset {preset.name} "
            f"({str(exc).splitlines()[0][:120]}); start from an agent of the same algorithm, env and network"
        ) from None
    record = {"agent": agent, "sha256": sha256_file(path)}
    norm = find_vecnormalize(env)
    if vecnormalize is not None and norm is not None:
        stats = VecNormalizeStats(vecnormalize, allow_pickle=allow_pickle)
        if stats.mean.shape != norm.obs_rms.mean.shape:
            raise UserError(f"--init-from {agent}: its VecNormalize statistics have shape {stats.mean.shape}, the "
                            f"env's observations {norm.obs_rms.mean.shape}; start from an agent of the same env")
        norm.obs_rms.mean, norm.obs_rms.var = stats.mean.copy(), stats.var.copy()
        norm.obs_rms.count = stats.count
        record["vecnormalize_sha256"] = sha256_file(vecnormalize)
    return record


def find_vecnormalize(env):
    from stable_baselines3.common.vec_env import VecNormalize

    while env is not None:
        if isinstance(env, VecNormalize):
            return env
        env = getattr(env, "venv", None)
    return None


def agent_files(agent: str) -> tuple[Path, Path | None]:
    """The SB3 zip (and VecNormalize file) behind ``zoo:NAME`` or ``sb3:PATH.zip``."""
    from rlgauntlet.victims.agent_ref import parse_agent

    try:
        ref = parse_agent(agent)
    except UserError:
        ref = None  # refused below, naming the two sources that can be fine-tuned
    if ref is not None and ref.source == "zoo":
        from rlgauntlet.zoo import zoo_entry, zoo_file

        entry = zoo_entry(ref.name)
        return zoo_file(entry), (zoo_file(entry, "vecnormalize") if "vecnormalize" in entry else None)
    if ref is not None and ref.source == "sb3":
        path = ref.path
        if not path.exists():
            raise UserError(f"--init-from {agent}: {path} not found; give zoo:NAME or sb3:PATH.zip")
        stats = [path.with_name(path.stem + ".vecnormalize" + ext) for ext in (".pkl", ".json")]
        return path, next((s for s in stats if s.exists()), None)
    raise UserError(f"--init-from {agent}: give zoo:NAME or sb3:PATH.zip (an SB3 agent to fine-tune)")


def save_checkpoint(model, env, run_dir: Path, progress: dict, pending_update: bool | None = None) -> None:
    """Write ``run_dir/checkpoint`` (replacing the last one as a whole). ``pending_update`` not None:
    also the run state that makes its resume exact (:mod:`rlgauntlet.training.run_state`), saved
    before (True) or after (False) the update of the rollout just collected; a run whose state is
    not data says why in ``progress["inexact_resume"]``."""
    tmp = run_dir / "checkpoint.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save(tmp / "model.zip")
    # Policy weights and optimizer state also as plain torch files, loadable without SB3.
    torch.save(model.policy.state_dict(), tmp / "policy.pt")
    if getattr(model.policy, "optimizer", None) is not None:
        torch.save(model.policy.optimizer.state_dict(), tmp / "optimizer.pt")
    norm = find_vecnormalize(env)
    if norm is not None:
        norm.save(str(tmp / "vecnormalize.pkl"))
    if hasattr(model, "replay_buffer") and model.replay_buffer is not None:
        save_replay_buffer(model, tmp / "replay_buffer.npz")  # plain arrays: resuming unpickles nothing
    if pending_update is not None:
        try:
            save_run_state(model, tmp / RUN_STATE, pending_update)
        except NotResumable as exc:
            progress["inexact_resume"] = str(exc)
    (tmp / "progress.json").write_text(json.dumps(progress, indent=2))
    replace_folder(tmp, run_dir / "checkpoint")


class StopAtRolloutEnd(Exception):
    """Raised out of ``learn`` by a callback that saved the run at a rollout's end and stops
    there, before that rollout's update (which the resumed run makes first)."""


class CheckpointCallback(BaseCallback):
    """Saves a checkpoint every ``preset.checkpoint_every`` steps (at the end of a rollout)
    and stops training once recent training episodes beat the target by ``margin``.

    ``exact_resume``: checkpoints also hold the run state (:mod:`rlgauntlet.training.run_state`),
    and a time budget ends the run at a rollout's end with :class:`StopAtRolloutEnd`, so that
    the resumed run is the one that would have gone on. Otherwise the run stops one step into
    the next rollout and saves after the update, as it always did.

    ``autosave_seconds`` (with ``exact_resume``): between checkpoints the run is also written at the
    first rollout end that long after its last write, with no point on the learning curve, so that a
    run killed without warning (SIGKILL, a machine switched off) resumes exactly from minutes ago
    rather than from its last checkpoint, a tenth of its budget ago. It waits at least 20 times the
    last write's duration, so that writing (a replay buffer, say) costs at most 5 %. None: checkpoints only.
    """

    exact_resume = False
    #: the next checkpoint is written before the update of the rollout just collected
    pending_update = True
    autosave_seconds: float | None = 300.0

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
        self.last_write, self.write_seconds = autosave_clock(), 0.0
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
            recent = recent_return(self.model)
            self.bar.update(self.task, completed=self.model.num_timesteps, ret="-" if recent is None else f"{recent:.1f}")
        if self.model.num_timesteps >= self.next_save:
            self.save()
            self.next_save += self.preset.checkpoint_every
        elif self._autosave_due():
            self._write_here()
        signalled = stopping.requested()
        if (signalled is not None or self.deadline is not None and time.monotonic() >= self.deadline) and not self.stop:
            # exact_resume: save here and stop before this rollout's update; else stop at the next step
            # (the update of this rollout still runs, and the run saves after it). A signal stops it the
            # same way (common.stopping: leaving learn_with_checkpoints then raises Interrupted)
            why = "time budget reached" if signalled is None else f"{signal.Signals(signalled).name} received"
            self.log(f"[{self.preset.name}] {why} at {self.model.num_timesteps} steps; saving and stopping")
            self.progress["stopped_at_deadline"] = int(self.model.num_timesteps)
            if self.exact_resume:
                if self.last_steps != self.model.num_timesteps:  # no checkpoint at this rollout's end
                    self._write_here()
                if "inexact_resume" not in self.progress:  # else its resume could not make the pending update
                    raise StopAtRolloutEnd
            self.stop = True

    def _autosave_due(self) -> bool:
        if not self.exact_resume or self.autosave_seconds is None or "inexact_resume" in self.progress:
            return False  # a run whose state is not data would resume along another trajectory anyway
        return autosave_clock() - self.last_write >= max(self.autosave_seconds, 20 * self.write_seconds)

    def _write_here(self) -> None:
        """Write the run as it stands at this rollout's end, before its update: no point on the
        learning curve (the run that goes on has none here)."""
        self.progress["num_timesteps"] = int(self.model.num_timesteps)
        self._record_schedule()  # where RADIAL's ramp stands now, or the resume restarts it
        self.write()

    def save(self) -> None:
        model = self.model
        recent = recent_return(model)
        now = time.time()
        rate = (model.num_timesteps - self.last_steps) / max(now - self.last_time, 1e-9)
        self.last_time, self.last_steps = now, model.num_timesteps
        self.progress["num_timesteps"] = int(model.num_timesteps)
        point = {"steps": int(model.num_timesteps), "recent_return": recent, "steps_per_second": round(rate, 1),
                 "time": round(now)}
        if self._record_schedule():
            point["schedule"] = self.progress["schedule"]
        self.progress["history"].append(point)
        self.write()
        self.log(f"[{self.preset.name}] {model.num_timesteps} steps, recent training return {recent}, {rate:.0f} steps/s")
        if (not self.stop and self.margin is not None and recent is not None
                and len(model.ep_info_buffer) >= 20
                and recent >= self.preset.target_return + self.margin):
            self.log(f"[{self.preset.name}] target reached in training episodes; stopping")
            self.progress["stopped_at_target"] = True
            self.stop = True

    def _record_schedule(self) -> bool:
        """Put the algorithm's schedule state in the progress, where its schedule is state rather than
        a function of the steps (RADIAL's guarded ε ramp); whether it has one."""
        if not hasattr(self.model, "schedule_state"):
            return False
        self.progress["schedule"] = self.model.schedule_state()
        return True

    def write(self) -> None:
        """Write the checkpoint as the run stands (with its run state when ``exact_resume``)."""
        started = autosave_clock()
        save_checkpoint(self.model, self.env, self.run_dir, self.progress,
                        pending_update=self.pending_update if self.exact_resume else None)
        self.last_write = autosave_clock()
        self.write_seconds = self.last_write - started


def restore_for_resume(model, folder: Path, progress: dict) -> Restored:
    """Put the run state of checkpoint ``folder`` into ``model`` (resumed from it already) and its
    envs; what the run could not save is said in the checkpoint's ``progress`` (``inexact_resume``)."""
    restored = restore_run_state(model, folder)
    if not restored.exact:
        restored.why = progress.get("inexact_resume", restored.why)
    return restored


def resumed_how(restored: Restored) -> str:
    """``exactly``, or along another trajectory and why (for the resume's log line)."""
    return "exactly" if restored.exact else f"along another trajectory: {restored.why}"


def learn_with_checkpoints(model, callback: "CheckpointCallback", total_steps: int, restored: Restored | None,
                           progress: dict, others: tuple = ()) -> None:
    """Train ``model`` to ``total_steps`` with ``callback``'s checkpoints (and ``others`` before it),
    going on from ``restored`` (what a resume put back, None for a fresh run): the resume is
    recorded in ``progress["resumes"]``, a pending update is made first, a time budget that stops
    the run at a rollout's end ends here, and a run that ends off the checkpoint schedule saves once
    more, after its last update (with its run state only where it ended by its budget)."""
    quiet_logger(model)
    if restored is not None:  # which runs were resumed, and whether along their own trajectory
        progress.setdefault("resumes", []).append({"steps": int(model.num_timesteps), "exact": restored.exact,
                                                   **({} if restored.exact else {"why": restored.why})})
        if restored.pending_update:
            finish_pending_update(model, total_steps)
    # a signal asks the run to stop at its next rollout's end, saved there (common.stopping); leaving this
    # block then raises Interrupted, before the caller marks the run finished
    with stopping.safe_points():
        try:
            model.learn(total_timesteps=total_steps - model.num_timesteps, reset_num_timesteps=False,
                        callback=[*(restored.callbacks() if restored else []), *others, callback])
        except StopAtRolloutEnd:  # saved at that rollout's end: the same command goes on from there
            callback.on_training_end()
            return
        if model.num_timesteps != callback.last_steps:
            # after the last update; a run stopped mid-rollout (target, patience) keeps no run state
            callback.pending_update, callback.exact_resume = False, callback.exact_resume and not callback.stop
            callback.save()


#: the greedy games a guard watches start from seeds SEED + GREEDY_SEED_OFFSET + i: games of their
#: own, neither the training envs' (SEED + i) nor an evaluation's (0, 1, … by default)
GREEDY_SEED_OFFSET = 10_000


def greedy_games_callback(model, preset: TrainPreset, log, progress: dict | None = None):
    from rlgauntlet.training.greedy_eval import GreedyEvalCallback

    if preset.normalize:
        raise UserError(f"{preset.name}: a greedy-games guard needs a preset without VecNormalize "
                        "(its games would see unnormalised observations); drop guard_greedy_return")
    games = make_train_vec_env(preset.env_id, model.guard_greedy_games, preset.seed + GREEDY_SEED_OFFSET)
    return GreedyEvalCallback(games, model.guard_greedy_every, preset.seed + GREEDY_SEED_OFFSET,
                              log=lambda line: log(f"[{preset.name}] {line}"), progress=progress)


def recent_return(model) -> float | None:
    buf = getattr(model, "ep_info_buffer", None)
    if not buf:
        return None
    return float(np.mean([e["r"] for e in buf]))
