"""Train a learned attacker for an agent and measure what it does: ``rlgauntlet attack-train``.

:func:`train_attacker` loads the victim, trains the director on its attack MDP (resumable,
see :mod:`rlgauntlet.training.attackers.attack_train`), then writes the attacker folder: ``attacker.zip``
(the director) and ``manifest.json`` (method, variant, ε and its budget space, env, the
victim's sha256 and VecNormalize sha256, actor settings, steps, seed, learning curve,
training wall time) and evaluates the attacker through the engine on ``eval_episodes``
episodes, recording its final strength (mean return of the victim under attack) in the
manifest.

Example:
    >>> from rlgauntlet.experiments.attacker_job import train_attacker   # doctest: +SKIP
    >>> train_attacker("zoo:cartpole-dqn", "CartPole-v1", "paad", eps=0.1, steps=100_000,
    ...                run_dir="runs/paad-dqn")                         # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

from rlgauntlet.common.hashing import sha256_file
from rlgauntlet.common.outputs import check_run_dir, write_text_atomic
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec, as_agent_spec, open_job
from rlgauntlet.threats.learned.base import ATTACKER_FILE, MANIFEST
from rlgauntlet.threats.spec import quote_value
from rlgauntlet.victims.sb3_files import write_canonical_zip

#: the learned attackers ``attack-train`` trains
METHODS = ("paad", "sarl", "robust-sarsa")


def train_attacker(agent: str | AgentSpec, env: str, method: str, eps: float, steps: int, run_dir: str | Path, seed: int = 0,
                   variant: str | None = None, actor_steps: int = 1, lam: float = 1.0, loss: str = "hinge",
                   eval_episodes: int = 20, device: str | None = None, threads: int | None = None, checkpoint_every: int | None = None, hyperparams: dict | None = None,
                   log: Callable[[str], None] = print, show_progress: bool = False, sarsa_eps: float = 0.02,
                   sarsa_reg: float = 0.1, deadline: float | None = None,
                   subproc_envs: bool = False, setting: str = "default", select: str = "last",
                   patience: int | None = None, recurrent: bool = False, victim_samples: bool = False,
                   patience_from: int = 0) -> dict:
    """Train (or resume) an attacker and write its folder; returns the manifest.

    Args:
        agent: the victim, an :class:`AgentSpec` (how to load it: VecNormalize statistics,
            pickled code, the device, ...) or an agent name (``zoo:NAME``, ``sb3:PATH.zip``, ...); it is frozen.
        env: Gymnasium id the victim plays.
        method: ``paad``, ``sarl`` or ``robust-sarsa`` (continuous agents: a Q function of the
            victim, then MinQ with it).
        eps: ℓ∞ budget in the victim's budget space (for ``robust-sarsa`` only the budget of the
            final strength evaluation: one Q function serves every ε).
        steps: director training steps (agent steps over all envs); for ``robust-sarsa`` the
            victim transitions Q is trained on (in iterations of 2048).
        sarsa_eps, sarsa_reg: Robust Sarsa's regulariser radius and weight (official defaults).
        run_dir: the attacker folder (checkpoints, then ``attacker.zip`` and ``manifest.json``).
        variant: PA-AD variant (``stochastic``, ``deterministic``, ``continuous``, ``directional``).
        actor_steps, lam, loss: the PA-AD actor (FGSM, λ = 1, hinge by default).
        eval_episodes: episodes of the final evaluation (episode k uses seed ``seed + k``); 0 skips it.
        device: where the victim and the director run (default: the spec's, else cpu).
        deadline: a ``time.monotonic()`` value: the director's training saves and stops at the
            first rollout end after it (a chunk of a longer run); the folder is then written and
            evaluated as usual, and the next call resumes.
        subproc_envs: step the training envs in worker processes.
        setting: the director's PPO settings by name (``default``, or ``official`` for MuJoCo:
            ``training.attack_train.director_settings``) when ``hyperparams`` is not given.
        select: which director the folder's attacker is: ``last`` (the end of training) or
            ``best`` (the stronger of the last and the checkpoint whose training episodes left
            the victim lowest, on selection episodes of their own: :func:`_select_director`;
            the last where the run did not keep its best from the start). The manifest says which.
        patience: stop the director's training once this many checkpoints in a row found no new
            best (the manifest's ``stopped_early`` says at which step); None trains every step.
            ``patience_from``: checkpoints up to this many steps are not counted.
        recurrent: the director is an LSTM policy (RecurrentPPO) that remembers the episode: the
            attacker a recurrent victim's memory calls for (PA-AD and SA-RL).
        victim_samples: in training the victim samples its actions from its policy, as the
            official adversary training runs the frozen agent (evaluation stays deterministic).
    """
    from rlgauntlet.training.attackers.attack_train import attacker_config, director_settings, learn_attacker

    if method not in METHODS:
        raise UserError(f"--method {method}: choose {', '.join(METHODS[:-1])} or {METHODS[-1]}")
    if select not in ("last", "best"):
        raise UserError(f"--select {select}: choose last or best")
    if loss not in ("hinge", "ce"):
        raise UserError(f"--loss {loss}: choose hinge or ce")
    if not (isinstance(eps, (int, float)) and not isinstance(eps, bool) and math.isfinite(eps) and eps > 0):
        raise UserError(f"--eps {eps}: give a positive number or fraction, e.g. --eps 0.1 or --eps 1/255")
    if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0):
        raise UserError(f"--lam {lam}: give a finite number ≥ 0")
    run_dir = check_run_dir(run_dir)
    spec = as_agent_spec(agent, device=device)  # the victim runs where the attacker trains
    device = spec.device if isinstance(spec, AgentSpec) else (device or "cpu")  # and the director with it
    for flag, given in (("--recurrent", recurrent), ("--victim-samples", victim_samples)):
        if method == "robust-sarsa" and given:
            raise UserError(f"{flag} is for a director (paad, sarl); Robust Sarsa learns a Q function of the state")
    if method == "robust-sarsa" and device != "cpu":
        raise UserError(f"Robust Sarsa trains its Q function on the CPU and cannot use --device {device}; "
                        "give --device cpu")
    with open_job(spec, env, threads=threads) as job:
        victim = job.victim
        identity = {"agent": spec.agent if isinstance(spec, AgentSpec) else str(agent),
                    "sha256": victim.description.get("sha256"),
                    "vecnormalize_sha256": (victim.description.get("vecnormalize") or {}).get("sha256")}
        if not victim.clip_actions:  # its returns are scored on unclipped actions: a director trained on
            identity["actions"] = "unclipped"  # clipped ones is another attacker (retrained, not reused)
        if method == "robust-sarsa":
            manifest = _train_q_function(victim, identity, env, steps, run_dir, seed, sarsa_eps, sarsa_reg, log)
            spec = _threat_spec(method, run_dir, eps)
        else:
            hyperparams = hyperparams or director_settings(env, setting)
            config = attacker_config(method, env, eps, seed, variant, victim, actor_steps, lam, loss, recurrent,
                                     victim_samples)
            config["victim"] = identity
            ckpt, progress = learn_attacker(victim, config, steps, run_dir, device=device,
                                            checkpoint_every=checkpoint_every, hyperparams=hyperparams, log=log,
                                            show_progress=show_progress, deadline=deadline,
                                            subproc_envs=subproc_envs, patience=patience,
                                            patience_from=patience_from)
            manifest = _select_director(victim, env, run_dir, ckpt, config, progress, select, eps, seed, device, log)
            spec = _threat_spec(method, run_dir, eps)
        if eval_episodes == 0:  # the caller evaluates the attacker itself (the gauntlet's sweep)
            return manifest
        return _strength(victim, env, spec, eps, run_dir, manifest, eval_episodes, seed, device, log)


#: episodes (on seeds SELECTION_SEED + k, apart from every evaluation's) that decide between a
#: director's best and last checkpoints
SELECTION_EPISODES, SELECTION_SEED = 5, 10_000


def _write_director(run_dir: Path, source: Path, config: dict, progress: dict, selected: dict) -> dict:
    """Make ``source`` (a director's model.zip) the folder's attacker, with its manifest; written in
    its canonical form, so that the same director always has the same sha256."""
    write_canonical_zip(source, run_dir / ATTACKER_FILE)
    manifest = {**config, "director_sha256": sha256_file(run_dir / ATTACKER_FILE), "selected": selected,
                # the steps its checkpoint holds (a time budget's stop adds no point to the learning curve)
                "steps": int(progress.get("num_timesteps") or (progress["history"][-1]["steps"] if progress["history"]
                                                                else 0)),
                **({k: progress[k] for k in ("stopped_early", "continued_from", "resumes") if k in progress}),
                "train_seconds": round(progress.get("train_seconds", 0.0), 1),
                "train_cpu_seconds": progress.get("train_cpu_seconds"),
                "learning_curve": progress["history"], "applied_in_training": progress.get("applied"),
                "hyperparams": progress.get("hyperparams"), "input_shape": progress["input_shape"],
                "input_bounds": progress["input_bounds"]}
    write_text_atomic(run_dir / MANIFEST, json.dumps(manifest, indent=2))
    return manifest


def _select_director(victim, env: str, run_dir: Path, ckpt: Path, config: dict, progress: dict, select: str,
                     eps: float, seed: int, device: str, log: Callable[[str], None]) -> dict:
    """Write the folder's attacker: the last checkpoint's director, or for ``select="best"`` the
    stronger of the last and the best-in-training one (:func:`best_director`), played with its
    mean action on ``SELECTION_EPISODES`` episodes of seeds of their own: the training return
    that picks the best comes from the director's sampled actions, and its mean action is what
    attacks (a director early in training can be strong sampled and weak deterministic)."""
    from rlgauntlet.training.attackers.attack_train import best_director

    last = progress["history"][-1] if progress["history"] else {"steps": 0, "recent_return": None}
    candidates = {"last": (ckpt / "model.zip", last)}
    best = best_director(run_dir) if select == "best" else None
    if best is not None and best["steps"] != last["steps"]:
        candidates["best"] = (Path(best["path"]), best)
    trials: dict[str, float] = {}
    if len(candidates) > 1:
        spec = _threat_spec(config["method"], run_dir, eps)
        for name, (source, point) in candidates.items():
            trial = _write_director(run_dir, source, config, progress, {"by": name})
            trial = _strength(victim, env, spec, eps, run_dir, trial, SELECTION_EPISODES, SELECTION_SEED + seed,
                              device, lambda line: None)
            trials[name] = trial["strength"]["attacked_mean"]
        log(f"[{config['method']}] best-in-training checkpoint ({best['steps']} steps) against the last: "
            f"{trials['best']:.1f} and {trials['last']:.1f} on the selection episodes")
    chosen = min(trials, key=trials.get) if trials else "last"  # a tie keeps the last
    source, point = candidates[chosen]
    selected = {"by": chosen, "steps": point["steps"], "recent_return": point["recent_return"]}
    if trials:
        selected["selection"] = {"episodes": SELECTION_EPISODES, "seed": SELECTION_SEED + seed,
                                 "attacked_mean": trials, "best_steps": best["steps"]}
    elif select == "best":
        selected["note"] = ("the run did not keep its best checkpoint from its start" if best is None
                            else "the best checkpoint is the last")
    return _write_director(run_dir, source, config, progress, selected)


def attacker_strength(agent: str | AgentSpec, env: str, run_dir: str | Path, eps: float, episodes: int = 20,
                      seed: int = 0, device: str = "cpu", perceptual_every: int | None = None,
                      log: Callable[[str], None] = print) -> dict:
    """Evaluate the attacker trained in ``run_dir`` against ``agent`` at budget ``eps``: the
    victim's clean return and its return under the attacker over ``episodes`` episodes
    (episode k uses seed ``seed + k``), stored as the manifest's ``strength``, as
    ``train_attacker`` does after training. ``perceptual_every`` = 0 skips the SSIM/PSNR of
    image perturbations (the returns do not depend on them). Returns the manifest."""
    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / MANIFEST).read_text())
    threat = _threat_spec(manifest["method"], run_dir, eps)
    with open_job(as_agent_spec(agent, device=device), env) as job:
        return _strength(job.victim, env, threat, eps, run_dir, manifest, episodes, seed, device, log,
                         perceptual_every)


def _threat_spec(method: str, run_dir: Path, eps: float) -> str:
    """The threat spec that applies the attacker (or Q function) trained in ``run_dir``."""
    if method == "robust-sarsa":
        return f"robust_sarsa:q={quote_value(str(run_dir))},eps={eps!r}"
    return f"{method}:attacker={quote_value(str(run_dir))},eps={eps!r}"


def _strength(victim, env: str, threat: str, eps: float, run_dir: Path, manifest: dict, episodes: int, seed: int,
              device: str, log: Callable[[str], None], perceptual_every: int | None = None) -> dict:
    from rlgauntlet.experiments.evaluate import evaluate

    options = {} if perceptual_every is None else {"perceptual_every": perceptual_every}
    report = evaluate(victim, env, [threat], episodes=episodes, seed=seed, impact=False,
                      n_envs=min(8, episodes), **options)
    clean, attacked = report.evaluations[0], report.evaluations[1]
    manifest["strength"] = {"eps": eps, "episodes": episodes, "seed": seed, "clean_mean": clean["return_mean"],
                            "attacked_mean": attacked["return_mean"], "attacked_std": attacked["return_std"],
                            "attacked_returns": attacked["returns"],
                            "action_change_rate": attacked["action_change_rate"], "linf_max": attacked["linf_max"]}
    write_text_atomic(run_dir / MANIFEST, json.dumps(manifest, indent=2))
    log(f"[{manifest['method']}] victim return {clean['return_mean']:.1f} clean, {attacked['return_mean']:.1f} ± "
        f"{attacked['return_std']:.1f} under the attacker (eps {eps:g}, {episodes} episodes)")
    return manifest


def _train_q_function(victim, identity: dict, env: str, steps: int, run_dir: Path, seed: int, sarsa_eps: float,
                      sarsa_reg: float, log: Callable[[str], None]) -> dict:
    """Robust Sarsa: train Q^π (one run, not resumable: minutes) and write its manifest."""
    from rlgauntlet.training.attackers.robust_sarsa import train_robust_sarsa

    if not (sarsa_eps >= 0 and sarsa_reg >= 0):
        raise UserError("--sarsa-eps and --sarsa-reg must be non-negative")
    config = {"method": "robust-sarsa", "variant": "robust-sarsa", "env": env, "eps": float(sarsa_eps),
              "sarsa_eps": float(sarsa_eps), "sarsa_reg": float(sarsa_reg), "seed": int(seed),
              "budget_space": victim.budget_space, "victim": identity}
    iterations = max(3, steps // 2048)
    done = _finished_q_function(run_dir, config, iterations * 2048)
    if done is not None:  # the same Q function, already trained: training it again would repeat minutes
        log(f"[robust-sarsa] {run_dir} already holds this Q function ({done['steps']} transitions)")
        return done
    record = train_robust_sarsa(victim, config, run_dir, iterations=iterations, log=log)
    manifest = {**config, "steps": record["transitions"], "train_seconds": record["train_seconds"],
                "train_cpu_seconds": record["train_cpu_seconds"],
                "input_dim": record["input_dim"], "hidden": record["hidden"], "reward_scale": record["reward_scale"],
                "gamma": record["gamma"], "learning_curve": record["history"]}
    write_text_atomic(run_dir / MANIFEST, json.dumps(manifest, indent=2))
    return manifest


def _finished_q_function(run_dir: Path, config: dict, transitions: int) -> dict | None:
    """The manifest of a Q function ``run_dir`` already holds with exactly ``config`` and
    ``transitions``, or None."""
    from rlgauntlet.threats.learned.robust_sarsa import Q_FILE

    try:
        manifest = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    same = all(manifest.get(key) == value for key, value in config.items())
    return manifest if same and manifest.get("steps") == transitions and (run_dir / Q_FILE).exists() else None
