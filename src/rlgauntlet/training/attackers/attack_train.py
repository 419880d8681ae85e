"""Resumable SB3 training of a learned attacker's director (PA-AD, SA-RL) on its attack MDP.

The director is an SB3 PPO policy trained on :class:`~rlgauntlet.training.attackers.attack_mdp.AttackVecEnv`
(the victim's env, batched, with the actor and the frozen victim inside). Training runs in
chunks with the same atomic checkpoints as ``rlgauntlet train`` (policy and optimizer state,
``progress.json`` with the learning curve: the victim's mean training-episode return under
attack after each chunk); started again on the same folder it resumes.

Default PPO settings per env family (``ATTACKER_HYPERPARAMS``): the paper tunes its
attackers per env and reports the best of many; ours are one documented setting per family
(docs/decisions.md), overridable from Python. For MuJoCo a second named setting,
``official`` (:func:`director_settings`), is the official code's adversary PPO for that env.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from rlgauntlet.common.outputs import write_text_atomic
from rlgauntlet.envs.presets import make_train_vec_env, mujoco_task, resolve_preset
from rlgauntlet.errors import UserError
from rlgauntlet.threats.learned.actor import AttackActor, check_variant, default_variant
from rlgauntlet.training.attackers.attack_mdp import AttackVecEnv, check_victim_samples
from rlgauntlet.training.checkpoints import (has_checkpoint, recover_folders, replace_folder, restore_vecnormalize,
                                             resume)
from rlgauntlet.training.recipes import TrainPreset
from rlgauntlet.training.kit import (build_model, CheckpointCallback, learn_with_checkpoints, restore_for_resume,
                                    resumed_how)
from rlgauntlet.training.run_state import Restored
from rlgauntlet.victims.base import Victim

#: PPO settings of the director per env family (n_envs, then SB3 PPO keyword arguments)
ATTACKER_HYPERPARAMS: dict[str, dict[str, Any]] = {
    "classic": dict(n_envs=8, policy="MlpPolicy", n_steps=256, batch_size=256, n_epochs=10, learning_rate=3e-4,
                    gamma=0.99, gae_lambda=0.95, ent_coef=0.0, clip_range=0.2,
                    policy_kwargs=dict(net_arch=[64, 64])),
    # the official MuJoCo attack code's PPO: 2048 steps per update, 10 epochs, 32 minibatches.
    # normalize_reward=True (rewards scaled by a running std of the discounted return) is
    # available but off: it slowed PA-AD on Hopper (victim return 2715 vs 1149 after 151k steps)
    "mujoco": dict(n_envs=4, policy="MlpPolicy", n_steps=512, batch_size=64, n_epochs=10, learning_rate=3e-4,
                   gamma=0.99, gae_lambda=0.95, ent_coef=0.0, clip_range=0.2, normalize_reward=False,
                   policy_kwargs=dict(net_arch=[64, 64])),
    # the paper's robust-Atari director: PPO, lr 5e-4, clip 0.1; inputs already in [0, 1]; the
    # Nature CNN with a 128-wide head instead of 512 keeps a checkpoint (weights and Adam state)
    # at about 6 MB instead of 20, small enough to commit between sessions
    "atari": dict(n_envs=8, policy="CnnPolicy", n_steps=128, batch_size=256, n_epochs=4, learning_rate=5e-4,
                  gamma=0.99, gae_lambda=0.95, ent_coef=0.01, clip_range=0.1,
                  policy_kwargs=dict(normalize_images=False, features_extractor_kwargs=dict(features_dim=128))),
    # SA-DQN's own frames (one grey 84×84 frame): the Atari director as it is
    "sa_dqn": dict(n_envs=8, policy="CnnPolicy", n_steps=128, batch_size=256, n_epochs=4, learning_rate=5e-4,
                   gamma=0.99, gae_lambda=0.95, ent_coef=0.01, clip_range=0.1,
                   policy_kwargs=dict(normalize_images=False, features_extractor_kwargs=dict(features_dim=128))),
    # the Atari director's PPO on the MinAtar paper's network (one 3×3 conv, 128 units): the
    # Nature CNN's 8×8 stride-4 kernel does not fit a 10×10 frame
    "minatar": dict(n_envs=8, policy="CnnPolicy", n_steps=128, batch_size=256, n_epochs=4, learning_rate=5e-4,
                    gamma=0.99, gae_lambda=0.95, ent_coef=0.01, clip_range=0.1,
                    policy_kwargs=dict(normalize_images=False, features_extractor_class="MinAtarCNN")),
}


#: the official MuJoCo adversaries' PPO per env (the PA-AD authors' configs, digest 001 §5): policy and
#: value learning rates, clip range, entropy coefficient; one env, 2048 steps per update, 10 epochs,
#: minibatch 64, as their code runs every MuJoCo adversary
OFFICIAL_MUJOCO: dict[str, tuple[float, float, float, float]] = {
    "Hopper": (1e-2, 1e-3, 0.4, 3e-4), "Walker2d": (1e-3, 1e-4, 0.2, 1e-5), "HalfCheetah": (1e-2, 1e-2, 0.2, 3e-4),
    "Ant": (1e-3, 3e-4, 0.2, 1e-3)}
#: the adversary settings the official attack scan chose against SA-PPO per env (ATLA_robust_RL's
#: config_<env>_sappo_convex.json, adv_*; the released attackers' optimizer states hold the same
#: rates and no schedule): policy and value learning rates, clip range, entropy coefficient. The
#: scan trains each for 488 (Ant 2441) iterations of 2048 steps with the rewards scaled by a
#: running std of the return, and keeps the strongest of 216 settings
OFFICIAL_ATTACK_MUJOCO: dict[str, tuple[float, float, float, float]] = {
    "Hopper": (1e-4, 3e-4, 0.4, 0.0), "Walker2d": (1e-3, 1e-3, 0.4, 0.0), "HalfCheetah": (1e-4, 1e-4, 0.4, 5e-3),
    "Ant": (3e-5, 1e-5, 0.4, 3e-5)}
#: the named director settings :func:`director_settings` knows
SETTINGS = ("default", "official", "official-attack")


def director_settings(env_id: str, setting: str = "default") -> dict[str, Any]:
    """The director's PPO settings for ``env_id``: ``default`` is the family's
    (``ATTACKER_HYPERPARAMS``); ``official`` the official code's adversary for that MuJoCo env
    (``OFFICIAL_MUJOCO``), whose policy and value train at rates of their own; ``official-attack``
    the official attack scan's choice against SA-PPO on that env (``OFFICIAL_ATTACK_MUJOCO``),
    slower learning rates and rewards scaled by the return's running std, as that code trains it."""
    if setting == "default":
        return dict(ATTACKER_HYPERPARAMS.get(resolve_preset(env_id), ATTACKER_HYPERPARAMS["classic"]))
    if setting not in SETTINGS:
        raise UserError(f"--setting {setting}: choose one of {', '.join(SETTINGS)}")
    table = OFFICIAL_MUJOCO if setting == "official" else OFFICIAL_ATTACK_MUJOCO
    base = mujoco_task(env_id)
    if base not in table:
        raise UserError(f"--setting {setting}: the official adversary settings exist for "
                        f"{', '.join(table)} (MuJoCo), not {env_id}; use --setting default")
    policy_lr, value_lr, clip, entropy = table[base]
    return dict(n_envs=1, policy="MlpPolicy", n_steps=2048, batch_size=64, n_epochs=10, learning_rate=policy_lr,
                value_learning_rate=value_lr, gamma=0.99, gae_lambda=0.95, ent_coef=entropy, clip_range=clip,
                normalize_reward=setting == "official-attack", policy_kwargs=dict(net_arch=[64, 64]))


def _with_classes(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with a named feature extractor replaced by its class."""
    kwargs = settings.get("policy_kwargs", {})
    if isinstance(kwargs.get("features_extractor_class"), str):
        from rlgauntlet.victims.minatar_cnn import MinAtarCNN

        classes = {"MinAtarCNN": MinAtarCNN}
        settings = {**settings, "policy_kwargs": {**kwargs, "features_extractor_class":
                                                  classes[kwargs["features_extractor_class"]]}}
    return settings


def attacker_config(method: str, env_id: str, eps: float, seed: int, variant: str | None, victim: Victim,
                    actor_steps: int = 1, lam: float = 1.0, loss: str = "hinge", recurrent: bool = False,
                    victim_samples: bool = False) -> dict:
    """The settings that define an attacker (compared on resume, recorded in its manifest);
    ``recurrent``: the director is an LSTM policy (sb3-contrib's RecurrentPPO) with a memory of
    the episode, recorded only when set, so that every earlier attacker's config is unchanged;
    ``victim_samples``: in training the victim samples its actions from its policy (the official
    adversary training's frozen agent does), recorded only when set as well."""
    if method not in ("paad", "sarl"):
        raise UserError(f"unknown attack method {method!r}; choose paad or sarl")
    if method == "sarl":
        if variant not in (None, "sarl"):
            raise UserError("--variant is for PA-AD; SA-RL's action is the perturbation itself")
        variant = "sarl"
    else:
        variant = variant or default_variant(victim)
        check_variant(variant, victim)
    if not eps > 0:
        raise UserError(f"--eps {eps}: an attacker needs a positive budget")
    config = {"method": method, "variant": variant, "env": env_id, "eps": float(eps), "seed": int(seed),
              "budget_space": victim.budget_space,
              "actor": {"steps": int(actor_steps), "lam": float(lam), "loss": loss} if method == "paad" else {}}
    if recurrent:
        config["recurrent"] = True
    if victim_samples:
        check_victim_samples(victim)
        config["victim_samples"] = True
    return config


#: a recurrent director's LSTM: the size of the released LSTM adversaries' (ATLA_robust_RL)
DIRECTOR_LSTM_UNITS = 64


def recurrent_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A director's PPO settings as RecurrentPPO's: an LSTM policy of :data:`DIRECTOR_LSTM_UNITS`
    between the same feature extractor (an MLP's flattened input, an image director's CNN) and the
    same layers. One learning rate: RecurrentPPO has one optimizer."""
    if "value_learning_rate" in settings:
        raise UserError("a recurrent director trains its policy and value at one learning rate; use the default "
                        "director setting (--setting default)")
    kwargs = dict(settings.get("policy_kwargs") or {})
    arch = kwargs.pop("net_arch", [64, 64])
    kwargs.update(lstm_hidden_size=DIRECTOR_LSTM_UNITS, net_arch=dict(pi=list(arch), vf=list(arch))
                  if isinstance(arch, list) else arch)
    policy = {"MlpPolicy": "MlpLstmPolicy", "CnnPolicy": "CnnLstmPolicy"}[settings.get("policy", "MlpPolicy")]
    return {**settings, "policy": policy, "policy_kwargs": kwargs}


def learn_attacker(victim: Victim, config: dict, total_steps: int, run_dir: str | Path, device: str = "cpu",
                   checkpoint_every: int | None = None, hyperparams: dict | None = None,
                   log: Callable[[str], None] = print, show_progress: bool = False, deadline: float | None = None,
                   subproc_envs: bool = False, patience: int | None = None,
                   patience_from: int = 0) -> tuple[Path, dict]:
    """Train (or resume) the director defined by ``config`` (see :func:`attacker_config`);
    ``deadline`` (a ``time.monotonic()`` value) saves and stops at the first rollout end after it;
    ``patience`` stops it for good once that many checkpoints in a row found no new best (the
    lowest victim return in training episodes), and a resumed run that stopped so trains no more;
    checkpoints up to ``patience_from`` steps are not counted.

    Returns the checkpoint folder (``model.zip``) and the training record (learning curve,
    wall time, what the actor applied).
    """

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    recover_folders(run_dir)  # its checkpoint or best director, should a kill have left one moved aside
    settings = dict(hyperparams or director_settings(config["env"]))
    if config.get("recurrent"):
        settings = recurrent_settings(settings)
    recorded = json.loads(json.dumps(settings))
    n_envs = settings.pop("n_envs")
    normalize_reward = settings.pop("normalize_reward", False)
    every = checkpoint_every or max(10_000, total_steps // 10)
    algo = "ppo_split_lr" if "value_learning_rate" in settings else "ppo"  # the critic at a rate of its own
    trainer: dict[str, Any] = {}
    if config.get("recurrent"):
        # RecurrentPPO's loss computed by our loop with no regulariser (κ 0): one LSTM call per
        # minibatch where sb3-contrib steps through every sequence that starts an episode
        # (training.defences.sa_recurrent_ppo.whole_sequences; the same outputs, tested). How the
        # loss is computed is not a setting of the director: not recorded, not compared on resume
        algo, trainer = "sa_recurrent_ppo", {"sa_kappa": 0.0}
    preset = TrainPreset(name=f"{config['method']}-attacker", env_id=config["env"], algo=algo,
                         total_timesteps=total_steps, n_envs=n_envs, seed=config["seed"],
                         hyperparams={**_with_classes(settings), **trainer},
                         target_return=0.0, checkpoint_every=every, stop_at_target=False)
    actor = AttackActor(config["variant"], config["eps"], steps=config["actor"].get("steps", 1),
                        lam=config["actor"].get("lam", 1.0), loss=config["actor"].get("loss", "hinge"))
    attack_env = AttackVecEnv(make_train_vec_env(config["env"], n_envs, config["seed"], subproc=subproc_envs),
                              victim, actor, seed=config["seed"],
                              victim_samples=bool(config.get("victim_samples")))
    env = attack_env
    ckpt = run_dir / "checkpoint"
    restored: Restored | None = None  # what a resume put back
    progress: dict = {"config": config, "hyperparams": recorded, "history": [], "train_seconds": 0.0}
    if normalize_reward:
        from stable_baselines3.common.vec_env import VecNormalize

        stats = ckpt / "vecnormalize.pkl"
        env = VecNormalize(attack_env, norm_obs=False, norm_reward=True, gamma=settings.get("gamma", 0.99))
        if has_checkpoint(ckpt) and stats.exists():
            restore_vecnormalize(env, stats)  # read as data
    if has_checkpoint(ckpt):
        progress = json.loads((ckpt / "progress.json").read_text())
        if progress.get("config") != config or progress.get("hyperparams", recorded) != recorded:
            old = {**(progress.get("config") or {}), "hyperparams": progress.get("hyperparams", recorded)}
            raise UserError(f"{run_dir} holds an attacker trained with "
                            f"{_differences(old, {**config, 'hyperparams': recorded})}; "
                            "resume it with the same settings, or give a new --run-dir")
        model = build_model(preset, env, device)
        resume(model, ckpt, progress)  # read as data: a checkpoint runs no code
        if progress.pop("continuation_pending", False):  # a first stage gone on from: envs start from the seed
            log(f"[{preset.name}] going on from the first stage's director at {model.num_timesteps} steps")
        else:
            restored = restore_for_resume(model, ckpt, progress)
            log(f"[{preset.name}] resuming at {model.num_timesteps} steps, {resumed_how(restored)}")
    else:
        model = build_model(preset, env, device)
        log(f"[{preset.name}] starting: {config['variant']} attacker on {config['env']}, eps {config['eps']:g}, "
            f"{total_steps} steps, seed {config['seed']}")
    callback = _TimedCheckpoint(preset, env, run_dir, progress, None, log, budget=total_steps,
                                show_progress=show_progress, deadline=deadline)
    callback.patience, callback.patience_from = patience, patience_from
    callback.count_cpu = not subproc_envs
    callback.exact_resume = True
    if model.num_timesteps < total_steps and "stopped_early" not in progress:
        learn_with_checkpoints(model, callback, total_steps, restored, progress)
    core = attack_env.core
    progress["applied"] = {"steps": core.steps, "victim_action_changed": core.changed, "linf_max": core.linf_max}
    progress["input_shape"] = list(core.input_shape)
    progress["input_bounds"] = None if victim.input_bounds is None else list(victim.input_bounds)
    progress["finished"] = True
    write_text_atomic(ckpt / "progress.json", json.dumps(progress, indent=2))
    env.close()
    return ckpt, progress


#: the folder (in an attacker's run folder) holding the director of its best checkpoint so far
BEST = "best"


def best_director(run_dir: str | Path) -> dict | None:
    """The best checkpoint's record (``steps``, ``recent_return``, ``path`` of its model.zip)
    when the run kept one from its first checkpoint on (a director gone on from a first stage at
    another ε: from its first checkpoint at its own ε), else None (see :class:`_TimedCheckpoint`)."""
    point_file = Path(run_dir) / BEST / "point.json"
    if not point_file.exists():
        return None
    point = json.loads(point_file.read_text())
    tracked_from = 0
    progress_file = Path(run_dir) / "checkpoint" / "progress.json"
    if progress_file.exists():
        try:
            progress = json.loads(progress_file.read_text())
        except ValueError:
            progress = None
        continued = progress.get("continued_from") if isinstance(progress, dict) else "unreadable"
        if not isinstance(continued, (dict, type(None))):
            raise UserError(f"{progress_file} is not a training progress rlgauntlet wrote (malformed); remove "
                            f"{run_dir} and train it again")
        if continued and "eps" in continued:  # the first stage's checkpoints were at another budget
            tracked_from = continued.get("steps")
    return {**point, "path": str(Path(run_dir) / BEST / "model.zip")} if point.get("tracked_from") == tracked_from \
        else None


class _TimedCheckpoint(CheckpointCallback):
    """Checkpoints that also carry the training wall time so far (kept across resumes and
    interruptions: the time of every saved chunk is in its ``progress.json``), and keep the
    director of the best checkpoint so far: the one whose training episodes left the victim the
    lowest mean return (``best/``: its model.zip and point.json, replaced as one folder).

    An attacker's training is not monotone: on Hopper a director at the official settings left
    the vanilla agent at 524 in its training episodes after 90k steps and drifted to 2725 by 241k.
    The attacker may use the strongest policy it found; :func:`best_director` gives it."""

    patience: int | None = None  # checkpoints without a new best before the run stops for good
    patience_from: int = 0  # checkpoints up to this many steps are not counted
    count_cpu: bool = True  # False: the envs step in other processes, whose CPU time this one cannot see

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self.base_seconds, self.started = self.progress.get("train_seconds", 0.0), time.perf_counter()
        # this process's CPU time (director, victim and envs): the training's cost on a machine that
        # other work shares, where wall time is not; None once any part of the run went unmeasured
        # (envs in other processes, or a run begun before CPU time was recorded)
        fresh = not self.progress.get("train_seconds")
        self.base_cpu = self.progress.get("train_cpu_seconds", 0.0 if fresh else None) if self.count_cpu else None
        self.cpu_started = time.process_time()
        # a run started before best checkpoints were kept tracks them from here, and says so
        self.progress.setdefault("best_tracked_from", int(self.model.num_timesteps))

    def write(self) -> None:
        self.progress["train_seconds"] = round(self.base_seconds + time.perf_counter() - self.started, 1)
        self.progress["train_cpu_seconds"] = (None if self.base_cpu is None
                                              else round(self.base_cpu + time.process_time() - self.cpu_started, 1))
        super().write()

    def save(self) -> None:
        super().save()
        point = self.progress["history"][-1]
        self._stop_without_progress()
        best_file = Path(self.run_dir) / BEST / "point.json"  # the record beside the file it describes
        best = json.loads(best_file.read_text()) if best_file.exists() else None
        if point["recent_return"] is None or (best is not None and point["recent_return"] >= best["recent_return"]):
            return
        record = {"steps": point["steps"], "recent_return": point["recent_return"],
                  "tracked_from": self.progress["best_tracked_from"]}
        tmp = Path(self.run_dir) / (BEST + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        shutil.copyfile(Path(self.run_dir) / "checkpoint" / "model.zip", tmp / "model.zip")
        (tmp / "point.json").write_text(json.dumps(record, indent=2))
        replace_folder(tmp, Path(self.run_dir) / BEST)


    def _stop_without_progress(self) -> None:
        """Stop for good (``stopped_early`` in the progress) once :attr:`patience` checkpoints in a
        row, each after :attr:`patience_from` steps, left the victim no lower than the best before them."""
        points = [p for p in self.progress["history"] if p.get("recent_return") is not None]
        returns = [p["recent_return"] for p in points]
        if self.patience is None or self.stop or len(returns) <= self.patience:
            return
        best_at = min(range(len(returns)), key=returns.__getitem__)
        counted = points[-self.patience]["steps"] > self.patience_from  # each of those past patience_from
        if len(returns) - 1 - best_at >= self.patience and counted:
            steps = int(self.model.num_timesteps)
            self.log(f"[{self.preset.name}] no new best in {self.patience} checkpoints; stopping at {steps} steps")
            self.progress["stopped_early"] = steps  # saved with the run's last checkpoint: a resume trains no more
            self.stop = True


def _differences(old: dict | None, new: dict) -> str:
    old = old or {}
    diffs = [f"{k}={old.get(k)!r} (now {new.get(k)!r})" for k in {**old, **new} if old.get(k) != new.get(k)]
    return ", ".join(diffs) or "other settings"

