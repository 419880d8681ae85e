"""ATLA-PPO and PA-ATLA-PPO: an agent trained in alternation with a learned adversary.

ATLA (Zhang et al. 2021, "Robust RL on State Observations with Learned Optimal Adversary")
alternates (a) agent training in the env attacked by the current SA-RL adversary and (b)
adversary training in the SA-MDP of the current agent. PA-ATLA (Sun et al. 2022, PA-AD §5)
does the same with the PA-AD adversary: a director trained on the PA-MDP with its FGSM actor.
As in the official code (digest 001 §5): one PPO iteration of the agent, then one of the
adversary, each one rollout of the same number of steps; the agent's step may carry the SA
regulariser (the strongest variants, "ATLA-PPO + SA-Reg" and the official PA-ATLA-PPO).

Both are SB3 PPO models trained by their own ``learn``; what couples them:

* the agent's envs are a :class:`~rlgauntlet.training.threat_env.ThreatVecEnv` whose threat is
  :class:`LiveAdversary`: the adversary's current policy (actions *sampled*, as a stochastic
  adversary explores) through its actor, against the agent's current policy (FGSM on it for
  PA-AD);
* the adversary's envs are an :class:`~rlgauntlet.training.attackers.attack_mdp.AttackVecEnv` whose
  victim is the agent's current policy, acting greedily as it is evaluated.

Schedules (learning rate, clip range, the SA ε ramp) follow the agent's total budget across
all the short ``learn`` calls, not each call's. A checkpoint holds both policies and both
optimizers as weights-only files and ``progress.json`` (iteration, both step counters, the
learning curve, the config); a killed run resumes from it without losing or repeating an
iteration. A preset with ``select_clean_min`` also keeps every checkpoint's agent
(``RUN_DIR/snapshots/iter-NNNN``) and, as the run's agent, the best one by its training-time
signals (``RUN_DIR/best``: :func:`selection_score`).

Example:
    >>> train_atla("cartpole-pa-atla-ppo", "runs/pa-atla", total_agent_steps=2048)   # doctest: +SKIP
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from gymnasium import spaces

from rlgauntlet.common import stopping
from rlgauntlet.common.outputs import write_text_atomic
from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Memory, Threat, ThreatParams
from rlgauntlet.threats.learned.actor import AttackActor, default_variant
from rlgauntlet.training.greedy_eval import greedy_returns
from rlgauntlet.training.recipes import ATLA_PRESETS, ATLAPreset, agent_recipe, get_atla_preset, training_digest
from rlgauntlet.victims.base import Victim

class LiveAdversary(Threat):
    """An observation threat played by an adversary being trained: its SB3 policy picks the
    director action from the clean input (sampled), its actor makes the perturbed input.
    A recurrent adversary (sb3-contrib's LSTM policy, as the released ATLA-LSTM adversaries)
    keeps its LSTM state per episode in the env's memory (:meth:`new_state`) and moves it on
    every step. Not registered: it exists only inside a training run."""

    name = "live_adversary"
    family = "learned"
    budget_params = ("eps",)
    white_box = True

    class Params(ThreatParams):
        eps: float

    def __init__(self, adversary, actor: AttackActor) -> None:
        super().__init__(self.Params(eps=actor.eps), spec=f"live_adversary:eps={actor.eps:g}")
        self.adversary, self.actor = adversary, actor
        self.recurrent = hasattr(adversary.policy, "lstm_actor")

    def new_state(self) -> dict | None:
        """A recurrent adversary's memory of the episode: its actor LSTM's (h, c) at the start,
        each (layers, 1, units); None for a memoryless one."""
        if not self.recurrent:
            return None
        lstm = self.adversary.policy.lstm_actor
        shape = (lstm.num_layers, 1, lstm.hidden_size)
        return {"lstm": (torch.zeros(shape), torch.zeros(shape))}

    def _actions(self, x: torch.Tensor, states: list[dict] | None = None) -> torch.Tensor:
        """The adversary's sampled actions (B, *action_shape) for clean inputs ``x``, clipped to its
        action space; a recurrent adversary reads and moves on each row's ``states`` entry."""
        policy = self.adversary.policy
        obs = x.detach().to(torch.float32).reshape(len(x), *self.adversary.observation_space.shape).to(policy.device)
        with torch.no_grad():
            if not self.recurrent:
                # SB3's predict() minus its per-call checks and array round trips (0.12 of 0.63 ms a call,
                # A/B timed; 3% of a PA-ATLA step): the same sample from the same draws, clipped as predict() does
                actions = policy._predict(obs, deterministic=False)
            else:  # each row one step of its own sequence: the state was reset by new_state at its episode's start
                held = [torch.cat([s["lstm"][k] for s in states], dim=1).to(policy.device) for k in (0, 1)]
                dist, (h, c) = policy.get_distribution(obs, (held[0], held[1]), torch.zeros(len(obs), device=policy.device))
                actions = dist.get_actions(deterministic=False)
                for i, state in enumerate(states):
                    state["lstm"] = (h[:, i:i + 1].cpu().clone(), c[:, i:i + 1].cpu().clone())
        actions = actions.cpu()
        space = self.adversary.action_space
        if isinstance(space, spaces.Box):
            actions = torch.clamp(actions, torch.as_tensor(space.low), torch.as_tensor(space.high))
        return actions

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        if self.recurrent:
            raise RuntimeError("a recurrent live adversary needs its memory of the episode: it runs through apply()")
        return self.actor.perturb(x, victim, self._actions(x), rng)

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.recurrent:
            return super().apply(x, victim, rng, memory, scheduled)
        actions = self._actions(x, memory.states)  # every row's memory moves every step, acted on or not
        if not scheduled.any():
            return x, scheduled
        with torch.enable_grad():  # PA-AD's actor takes a gradient step on the agent
            perturbed = self.actor.perturb(x, victim, actions, rng).detach()
        return torch.where(scheduled.reshape(-1, *([1] * (x.ndim - 1))), perturbed, x), scheduled


class AdversaryPool(Threat):
    """The agent's training threat with a pool of adversaries: each episode meets one member,
    drawn at its first step from its own random stream and kept to its end: the learned adversary
    (:class:`LiveAdversary`) with probability 1 − ``push_share``, else one of the constant push
    directors (``threats.attacks.push``: a PA-AD director that never changes its mind, the
    strongest attack the gauntlet finds on most Hopper agents), uniformly over the directions and
    the push budgets ``eps_fractions`` × ε (a push below the full budget can topple an agent that
    only met pushes at it). Not registered: it exists only inside a training run.

    With ``push_temperature`` (in return units) the push members are drawn worst first: the pool
    keeps each member's return over the episodes it met (an exponential average,
    :attr:`RETURN_RATE` per episode; :meth:`episode_ended`, called by the training env) and
    shares ``push_share`` among the pushes as (1 − :attr:`UNIFORM_FLOOR`) × softmax(−return /
    temperature) + :attr:`UNIFORM_FLOOR` / pushes: the agent trains most against the push it
    currently does worst against (the gauntlet scores the worst member, not the average), and
    every push keeps being met, so its estimate stays current. A push not met yet counts as the
    worst one met; before any, the draw is uniform. The learned adversary's share is unchanged."""

    #: the share of the pushes' probability spread uniformly whatever their returns
    UNIFORM_FLOOR = 0.25
    #: the weight of a member's newest episode in its running return
    RETURN_RATE = 0.3

    name = "adversary_pool"
    family = "learned"
    budget_params = ("eps",)
    white_box = True

    class Params(ThreatParams):
        eps: float

    def __init__(self, learned: LiveAdversary, directions: list[list[int]], push_share: float,
                 eps_fractions: tuple[float, ...] = (1.0,), push_temperature: float | None = None) -> None:
        if not 0.0 < push_share < 1.0:
            raise ValueError(f"push_share {push_share}: give a share strictly between 0 and 1")
        if not eps_fractions or not all(0.0 < f <= 1.0 for f in eps_fractions):
            raise ValueError(f"eps_fractions {eps_fractions}: give push budgets as fractions of ε in (0, 1]")
        super().__init__(self.Params(eps=learned.actor.eps), spec=f"adversary_pool:eps={learned.actor.eps:g}")
        directions = [list(d) for d in dict.fromkeys(tuple(d) for d in directions)]  # 1-d: the axes are the corners
        self.learned, self.directions, self.push_share = learned, directions, push_share
        if push_temperature is not None and not push_temperature > 0:
            raise ValueError(f"push_temperature {push_temperature}: give a positive return scale, or None for uniform pushes")
        self.eps_fractions = tuple(dict.fromkeys(eps_fractions))
        self.push_temperature = push_temperature
        self._pushes = self._push_threats(learned.actor.eps)
        #: each member's running return over the training episodes it met (None: not met yet), the
        #: learned adversary first; only a prioritised pool's draw reads it
        self.member_returns: list[float | None] = [None] * (1 + len(self._pushes))

    def _push_threats(self, eps: float) -> list[Threat]:
        """The push members, direction by direction, each at every budget fraction (in that order)."""
        from rlgauntlet.threats import parse_threat
        from rlgauntlet.threats.attacks.push import direction_param

        return [parse_threat(f"push:direction={direction_param(d)},eps={eps * f:g}")
                for d in self.directions for f in self.eps_fractions]

    @property
    def probabilities(self) -> list[float]:
        """Each member's probability per episode: the learned adversary first, then each push."""
        pushes = len(self.directions) * len(self.eps_fractions)
        met = [r for r in self.member_returns[1:] if r is not None]
        if self.push_temperature is None or not met:
            return [1.0 - self.push_share] + [self.push_share / pushes] * pushes
        returns = np.array([min(met) if r is None else r for r in self.member_returns[1:]])
        weights = np.exp(-(returns - returns.min()) / self.push_temperature)
        shares = (1.0 - self.UNIFORM_FLOOR) * weights / weights.sum() + self.UNIFORM_FLOOR / pushes
        return [1.0 - self.push_share] + [float(p) for p in self.push_share * shares]

    def episode_ended(self, state: dict, episode_return: float) -> None:
        """Fold a finished training episode's return into its member's running return."""
        member = state.get("member")
        if member is None:
            return
        old = self.member_returns[member]
        self.member_returns[member] = float(episode_return) if old is None else \
            (1.0 - self.RETURN_RATE) * old + self.RETURN_RATE * float(episode_return)

    def learned_state(self) -> dict:
        """What the pool learnt from its episodes, as data (an exact resume's run state)."""
        return {"member_returns": list(self.member_returns)}

    def load_learned_state(self, state: dict) -> None:
        if len(state["member_returns"]) != len(self.member_returns):
            raise ValueError(f"saved with {len(state['member_returns'])} pool members, this pool has "
                             f"{len(self.member_returns)}")
        self.member_returns = [None if r is None else float(r) for r in state["member_returns"]]

    def member_specs(self) -> list[str]:
        """The members' names, in :attr:`probabilities`' order."""
        return ["learned", *(t.spec for t in self._pushes)]

    @property
    def actor(self) -> AttackActor:
        return self.learned.actor

    @actor.setter
    def actor(self, actor: AttackActor) -> None:
        """A new budget (the ε ramp) for every member."""
        self.learned.actor = actor
        self._pushes = self._push_threats(actor.eps)

    def new_state(self) -> dict:
        return {"member": None}

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory, scheduled: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        draws = rng.uniform(()).reshape(-1).cpu()  # one draw per row and step: a row's stream never depends on others
        if any(state["member"] is None for state in memory.states):  # an episode's first step
            edges = np.cumsum(self.probabilities)
            for state, draw in zip(memory.states, draws.tolist()):
                if state["member"] is None:
                    state["member"] = int(min(np.searchsorted(edges, draw, side="right"), len(edges) - 1))
        members = [s["member"] for s in memory.states]
        threats = [self.learned, *self._pushes]
        out = x.clone()
        # only the members some row meets this step (a loop over all 43 cost a fifth of a training step)
        for index in sorted(set(members)):
            rows = torch.tensor([m == index for m in members], device=scheduled.device) & scheduled
            if rows.any():
                with torch.enable_grad():
                    out[rows] = threats[index].perturb(x[rows], victim, rng.subset(rows)).detach()
        return out, scheduled


def _global_schedule(model, total_steps: int) -> None:
    """Make ``model``'s schedules see progress over ``total_steps`` (the whole run) instead of
    over each short ``learn`` call."""
    def update(num_timesteps: int, _call_total: int) -> None:
        model._current_progress_remaining = max(0.0, 1.0 - float(num_timesteps) / float(total_steps))
    model._update_current_progress_remaining = update


def _adversary_recipe(preset: ATLAPreset, recipe):
    from rlgauntlet.training.attackers.attack_train import ATTACKER_HYPERPARAMS
    from rlgauntlet.training.recipes import TrainPreset

    settings = {**ATTACKER_HYPERPARAMS["classic"], **preset.adversary}
    settings.pop("normalize_reward", None)
    settings.pop("n_envs", None)
    steps = recipe.hyperparams["n_steps"] * recipe.n_envs
    settings["n_steps"] = steps // recipe.n_envs  # one adversary rollout per agent rollout, as long
    algo = "ppo_split_lr" if "value_learning_rate" in settings else "ppo"  # the critic at a rate of its own
    if preset.adversary_recurrent:
        from rlgauntlet.training.attackers.attack_train import recurrent_settings

        # an LSTM director as the gauntlet's recurrent directors are trained: RecurrentPPO's loss through
        # our sequence loop with no regulariser (training.attackers.attack_train.learn_attacker)
        settings, algo = {**recurrent_settings(settings), "sa_kappa": 0.0}, "sa_recurrent_ppo"
    return TrainPreset(name=f"{preset.name}-adversary", env_id=recipe.env_id, algo=algo,
                       total_timesteps=preset.total_agent_steps, n_envs=recipe.n_envs,
                       seed=recipe.seed + 1, hyperparams=settings, target_return=0.0, checkpoint_every=steps,
                       stop_at_target=False)


def _save(folder: Path, agent, adversary, progress: dict) -> None:
    """Both policies and optimizers (weights only), the agent's VecNormalize statistics (if
    any) and the progress, replaced atomically."""
    from rlgauntlet.training.checkpoints import replace_folder
    from rlgauntlet.training.kit import find_vecnormalize
    from rlgauntlet.training.run_state import NotResumable, RUN_STATE, save_run_state
    from rlgauntlet.victims.sb3_files import write_agent_zip

    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    progress.pop("inexact_resume", None)  # each checkpoint says its own
    for part, model in (("agent", agent), ("adversary", adversary)):
        (tmp / part).mkdir(parents=True)
        torch.save(model.policy.state_dict(), tmp / part / "policy.pt")
        torch.save(model.policy.optimizer.state_dict(), tmp / part / "optimizer.pt")
        # between two iterations, after both updates: nothing pending (training.run_state)
        try:
            save_run_state(model, tmp / part / RUN_STATE, pending_update=False)
        except NotResumable as exc:
            progress["inexact_resume"] = f"the {part}: {exc}"
    schedule = agent.__dict__.pop("_update_current_progress_remaining", None)  # a closure: not saved
    try:
        agent.save(tmp / "agent" / "full.zip")
    finally:
        if schedule is not None:
            agent._update_current_progress_remaining = schedule
    # the agent as evaluation reads it (as data): the zoo's weights-only zip. The optimizer is in
    # optimizer.pt for the resume; a copy in the zip would double every snapshot, best/ and validated/
    write_agent_zip(tmp / "agent" / "full.zip", tmp / "agent" / "model.zip")
    (tmp / "agent" / "full.zip").unlink()
    norm = find_vecnormalize(agent.get_env())
    if norm is not None:
        norm.save(str(tmp / "agent" / "vecnormalize.pkl"))  # read back as data (restore_vecnormalize)
    # what a zoo entry records of the agent (as a plain training checkpoint's progress.json)
    config = progress["config"]
    (tmp / "agent" / "progress.json").write_text(json.dumps(
        {"preset": config["preset"], "seed": config["seed"], "num_timesteps": progress["agent_steps"],
         "init_from": progress.get("init_from"), "adversary": {"method": config["method"], "eps": config["eps"],
                                                               "steps": progress["adversary_steps"]}}, indent=2))
    (tmp / "progress.json").write_text(json.dumps(progress, indent=2))
    replace_folder(tmp, folder)


def _applied(threat_env, adversary_env) -> dict:
    """What the adversary did in this process so far, measured, not assumed: in the agent's
    envs (observations perturbed, of all, largest ℓ∞) and in its own (agent actions changed)."""
    core = adversary_env.core
    return {"agent_envs": {"perturbed_steps": threat_env.perturbed_steps, "steps": threat_env.total_steps,
                           "linf_max": threat_env.linf_max},
            "adversary_envs": {"steps": core.steps, "agent_action_changed": core.changed, "linf_max": core.linf_max}}


def _restore(folder: Path, agent, adversary, progress: dict) -> str:
    """Both models' weights, optimizers and counters, the agent's statistics and, where the
    checkpoint holds them, both runs' states (training.run_state); returns how it resumes
    (``exactly``, or along another trajectory and why), as recorded in ``progress["resumes"]``."""
    from rlgauntlet.training.checkpoints import load_checkpoint_parts, restore_vecnormalize
    from rlgauntlet.training.kit import find_vecnormalize, restore_for_resume, resumed_how

    load_checkpoint_parts(agent, folder / "agent", {"num_timesteps": progress["agent_steps"]})
    norm = find_vecnormalize(agent.get_env())
    if norm is not None:
        restore_vecnormalize(norm, folder / "agent" / "vecnormalize.pkl")
    load_checkpoint_parts(adversary, folder / "adversary", {"num_timesteps": progress["adversary_steps"]})
    agent._n_updates = adversary._n_updates = 0  # logging only
    # both were saved at one moment, so the random streams each puts back are the same
    parts = [restore_for_resume(model, folder / part, progress) for part, model in
             (("agent", agent), ("adversary", adversary))]
    restored = next((p for p in parts if not p.exact), parts[0])
    progress.setdefault("resumes", []).append({"steps": int(progress["agent_steps"]), "exact": restored.exact,
                                               **({} if restored.exact else {"why": restored.why})})
    return resumed_how(restored)


#: greedy clean games played at each checkpoint (history's ``clean_greedy_return``): an agent
#: trained only on perturbed observations can score more under its adversary than clean, and its
#: clean return swings between checkpoints, so the run records it, not just the attacked return
CLEAN_GAMES = 5


def _clean_games(recipe, agent_env):
    """The envs of the checkpoints' clean games, seeded apart from training and evaluation
    (SEED + GREEDY_SEED_OFFSET + i); normalised with the agent's statistics (:func:`_clean_return`)."""
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.kit import GREEDY_SEED_OFFSET

    games = make_train_vec_env(recipe.env_id, CLEAN_GAMES, recipe.seed + GREEDY_SEED_OFFSET)
    if recipe.normalize:
        from stable_baselines3.common.vec_env import VecNormalize

        games = VecNormalize(games, norm_obs=True, norm_reward=False, training=False)
    return games


def _clean_return(agent, games, agent_env, seed: int) -> float:
    """Mean return of the clean greedy games, with the agent's statistics as they are now."""
    from rlgauntlet.training.kit import GREEDY_SEED_OFFSET

    if hasattr(games, "obs_rms"):
        games.obs_rms = agent_env.obs_rms  # read each time: a resume replaces the object
    return float(np.mean(greedy_returns(agent, games, seed + GREEDY_SEED_OFFSET)))


def selection_score(point: dict, preset: ATLAPreset) -> float | None:
    """How a checkpoint (one ``history`` entry) ranks as the run's agent: its recent return under
    the training adversaries, when the adversary's ε had reached ``preset.eps`` and the clean
    greedy return reaches ``preset.select_clean_min``; None (never chosen) otherwise. Only
    training-time signals: a gauntlet number never picks the agent it then scores."""
    if preset.select_clean_min is None or point.get("recent_return_attacked") is None:
        return None
    if point["eps"] < preset.eps or point["clean_greedy_return"] < preset.select_clean_min:
        return None
    return float(point["recent_return_attacked"])


def _keep_selected(run_dir: Path, ckpt: Path, preset: ATLAPreset, point: dict) -> None:
    """Keep the agent just saved in ``ckpt`` as ``snapshots/iter-NNNN`` and, when it outranks
    the one in ``best`` (:func:`selection_score`), as ``best`` with ``selection.json``."""
    from rlgauntlet.training.checkpoints import copy_agent_files, read_selection, replace_folder

    snapshot = run_dir / "snapshots" / f"iter-{point['iteration']:04d}"
    replace_folder(copy_agent_files(ckpt / "agent", snapshot), snapshot)
    score = selection_score(point, preset)
    best = run_dir / "best"
    kept = read_selection(best)
    if score is None or (kept is not None and float(kept["score"]) >= score):
        return
    tmp = copy_agent_files(ckpt / "agent", best)
    (tmp / "selection.json").write_text(json.dumps(
        {"iteration": point["iteration"], "agent_steps": point["agent_steps"], "score": score,
         "clean_greedy_return": point["clean_greedy_return"],
         "rule": f"highest recent return under the training adversaries among checkpoints at ε {preset.eps:g} "
                 f"with a clean greedy return of at least {preset.select_clean_min:g}"}, indent=2))
    replace_folder(tmp, best)


def _restore_last_snapshot(run_dir: Path, ckpt: Path, point: dict) -> None:
    """Keep the checkpoint's agent as its iteration's snapshot when that snapshot is missing: a run
    stopped between saving a checkpoint and validating it, then resumed on another machine (the
    snapshots are not committed), has that agent only in ``ckpt``."""
    from rlgauntlet.training.checkpoints import copy_agent_files, replace_folder

    snapshot = run_dir / "snapshots" / f"iter-{point['iteration']:04d}"
    if not (snapshot / "model.zip").exists():
        replace_folder(copy_agent_files(ckpt / "agent", snapshot), snapshot)


def run_agent(preset_name: str, run_dir: str | Path, for_zoo: bool = False) -> Path:
    """The folder of the agent a run of ``preset_name`` gives: ``best`` for a preset that selects
    its checkpoint (once one qualified), else the last checkpoint's agent. ``for_zoo``: a
    selecting run that selected nothing is refused (the zoo never gets an unselected agent)."""
    from rlgauntlet.training.defences.validation import rule_folder

    preset, run_dir = get_atla_preset(preset_name), Path(run_dir)
    last = run_dir / "checkpoint" / "agent"
    if preset.select_clean_min is None:
        return last
    kept = run_dir / (rule_folder(preset.validate_confirm_episodes > 0, preset.select_with_training_return)
                      if preset.validate_clean_episodes else "best")
    if (kept / "selection.json").exists():
        return kept
    if for_zoo:
        raise UserError(f"{preset_name}: no checkpoint in {run_dir} reached a clean greedy return of "
                        f"{preset.select_clean_min:g} at the full ε, so the run selected no agent for the zoo; "
                        f"rerun the same command with --no-register to keep the run (its last checkpoint: {last})")
    return last


def adversary_eps(preset: ATLAPreset, agent_steps: int) -> float:
    """The adversary's budget after ``agent_steps`` of the agent's: ε grows linearly from 0 over
    the first ``eps_ramp`` fraction of the run, then stays at ``preset.eps`` (never above it)."""
    ramp = preset.eps_ramp * preset.total_agent_steps
    return preset.eps * (min(1.0, agent_steps / ramp) if ramp > 0 else 1.0)


def adversary_actor(preset: ATLAPreset, agent: Victim) -> AttackActor:
    """The actor that turns the adversary's actions into perturbed inputs of ``agent``: SA-RL's
    (the action is the perturbation) for ATLA, the PA-AD actor of the agent's kind for PA-ATLA."""
    return AttackActor("sarl" if preset.method == "atla" else default_variant(agent), preset.eps)


#: the preset fields that choose which checkpoint a run keeps, not how it trains
SELECTION_FIELDS = ("select_clean_min", "validate_clean_episodes", "validate_push_episodes",
                    "validate_confirm_episodes", "validate_finalists", "select_with_training_return")


def trains_as(preset: ATLAPreset, other_name: str) -> bool:
    """Whether preset ``other_name`` trains exactly as ``preset`` (every field equal but the name,
    the notes and :data:`SELECTION_FIELDS`): then a run of either is a run of both, each keeping
    its own choice of checkpoint (a validated preset ranks a finished selecting run's snapshots)."""
    if other_name not in ATLA_PRESETS:
        return False
    same = {f: getattr(preset, f) for f in ("name", "notes", *SELECTION_FIELDS)}
    return replace(ATLA_PRESETS[other_name], **same) == preset


def _resumable(stored: dict, config: dict, preset: ATLAPreset) -> bool:
    """Whether a run whose ``progress.json`` config is ``stored`` resumes under ``preset`` (whose
    config is ``config``): the same config, or one of a preset that trains as it does; and, for a
    run that recorded it, the same training digest (a recipe changed under its name is refused;
    runs started before the digest was recorded are compared without it)."""
    if stored.get(TRAINING_DIGEST, config[TRAINING_DIGEST]) != config[TRAINING_DIGEST]:
        return False
    stored, config = ({k: v for k, v in c.items() if k != TRAINING_DIGEST} for c in (stored, config))
    if stored == config:
        return True
    drop = ("preset", *SELECTION_FIELDS)
    return (trains_as(preset, stored.get("preset"))
            and {k: v for k, v in stored.items() if k not in drop} == {k: v for k, v in config.items() if k not in drop})


#: the config key of the run's :func:`~rlgauntlet.training.recipes.training_digest`
TRAINING_DIGEST = "training_sha256"


def _config(preset: ATLAPreset, seed: int) -> dict:
    config = {"preset": preset.name, "method": preset.method, "eps": preset.eps, "eps_ramp": preset.eps_ramp,
              "seed": seed, "agent_preset": preset.agent_preset, "sa_kappa": preset.sa_kappa,
              "init_from": preset.init_from, "total_agent_steps": preset.total_agent_steps}
    if preset.push_share > 0:  # only then: every earlier run's config (and its resume) is unchanged
        config["push_share"] = preset.push_share
    if preset.push_eps_fractions != (1.0,):
        config["push_eps_fractions"] = list(preset.push_eps_fractions)
    if preset.push_temperature is not None:
        config["push_temperature"] = preset.push_temperature
    if preset.select_clean_min is not None:
        config["select_clean_min"] = preset.select_clean_min
    if preset.adversary_recurrent:
        config["adversary_recurrent"] = True
    config[TRAINING_DIGEST] = training_digest(preset, SELECTION_FIELDS)
    return config


def train_atla(name: str, run_dir: str | Path, total_agent_steps: int | None = None, seed: int | None = None,
               device: str = "cpu", log: Callable[[str], None] = print, show_progress: bool = False,
               deadline: float | None = None, threads: int | None = None) -> Path:
    """Train (or resume) alternating-training preset ``name`` in ``run_dir``; returns the
    checkpoint folder (``agent/model.zip`` is the trained agent).

    Args:
        total_agent_steps: override the preset's budget (the adversary takes as many steps).
        seed: override the agent preset's seed (the adversary uses seed + 1).
        deadline: a ``time.monotonic()`` value: save and stop after the first iteration past it.
        threads: torch intra-op threads while it runs (default: the thread policy's, one per
            process: two runs side by side on two cores must not oversubscribe them).
    """
    from rlgauntlet.common.threads import thread_policy

    with thread_policy(threads):
        return _train_atla(name, run_dir, total_agent_steps, seed, device, log, show_progress, deadline)


def _train_atla(name: str, run_dir: str | Path, total_agent_steps: int | None, seed: int | None, device: str,
                log: Callable[[str], None], show_progress: bool, deadline: float | None) -> Path:
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.attackers.attack_mdp import AttackVecEnv
    from rlgauntlet.training.kit import build_model, init_from_agent, quiet_logger
    from rlgauntlet.training.threat_env import ThreatVecEnv
    from rlgauntlet.victims.sb3 import SB3Victim

    preset = get_atla_preset(name)
    if total_agent_steps is not None:
        preset = replace(preset, total_agent_steps=int(total_agent_steps))
    recipe = agent_recipe(preset)
    if seed is not None:
        recipe = replace(recipe, seed=int(seed))
    if preset.method == "pa_atla" and recipe.algo in ("recurrent_ppo", "sa_recurrent_ppo"):
        raise UserError(f"{name}: PA-ATLA's actor needs the LSTM agent's gradient in its own training envs, whose "
                        "memory the agent's rollout keeps to itself; train an LSTM agent with ATLA (an SA-RL adversary)")
    if preset.adversary_recurrent and preset.push_share > 0:
        raise UserError(f"{name}: the adversary pool draws one member per episode and keeps no member's memory; "
                        "a recurrent adversary trains without pushes (push_share 0)")
    adversary_recipe = _adversary_recipe(preset, recipe)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    from rlgauntlet.training.checkpoints import recover_folders

    recover_folders(run_dir)  # its checkpoint, snapshots or kept agents, should a kill have left one moved aside
    ckpt = run_dir / "checkpoint"
    config = _config(preset, recipe.seed)

    agent_env = make_train_vec_env(recipe.env_id, recipe.n_envs, recipe.seed)
    if recipe.normalize:
        # the agent's normaliser: its envs update it while the agent trains; the adversary's
        # live view of the agent reads it, unchanged while the adversary trains (its envs are
        # raw and the agent's do not step then); ε is in these normalised units on both sides
        from stable_baselines3.common.vec_env import VecNormalize

        agent_env = VecNormalize(agent_env, norm_obs=True, norm_reward=True,
                                 gamma=recipe.hyperparams.get("gamma", 0.99))
    adversary_base = make_train_vec_env(recipe.env_id, recipe.n_envs, adversary_recipe.seed)
    # the adversary's env needs the agent, and the agent's env needs the adversary: build the
    # agent on its plain envs first, then wrap both envs around the live models
    agent = build_model(recipe, agent_env, device)
    clean_games = _clean_games(recipe, agent_env)
    live_agent = SB3Victim.from_model(agent)
    actor = adversary_actor(preset, live_agent)
    adversary_env = AttackVecEnv(adversary_base, live_agent, actor, seed=adversary_recipe.seed)
    adversary = build_model(adversary_recipe, adversary_env, device)
    agent_threat: Threat = LiveAdversary(adversary, actor)
    if preset.push_share > 0:
        from rlgauntlet.threats.attacks.push import push_directions

        agent_threat = AdversaryPool(agent_threat, push_directions(int(agent_env.action_space.shape[0])),
                                     preset.push_share, preset.push_eps_fractions, preset.push_temperature)
    threat_env = ThreatVecEnv(agent_env, agent_threat, seed=recipe.seed)
    agent.set_env(threat_env)
    threat_env.attach(agent)

    progress: dict[str, Any] = {"config": config, "iteration": 0, "agent_steps": 0, "adversary_steps": 0,
                                "history": [], "train_seconds": 0.0}
    if (ckpt / "progress.json").exists():
        progress = json.loads((ckpt / "progress.json").read_text())
        stored = progress.get("config") or {}
        if not _resumable(stored, config, preset) and _resumable({**stored, TRAINING_DIGEST: config[TRAINING_DIGEST]},
                                                                 config, preset):
            raise UserError(f"{run_dir} was started with another recipe of {stored.get('preset')} (its settings or its "
                            "agent's changed since: training digest differs); finish it with the version that started "
                            "it, or give a new --run-dir")
        if not _resumable(stored, config, preset):
            raise UserError(f"{run_dir} holds a {progress.get('config', {}).get('preset')} run "
                            f"({progress.get('config')}); resume it with the same preset and settings, or give a new "
                            "--run-dir")
        how = "finished"
        if progress["agent_steps"] < preset.total_agent_steps:
            how = _restore(ckpt, agent, adversary, progress)
        # else a finished run: nothing trains, so its resume-only files (the policies' and optimizers'
        # state, the adversary) are not read; its agent files rank and register it, and a finished run
        # may be kept without the rest (checkpoints/defences/README.md)
        if "pool_returns" in progress:  # a prioritised pool's draw goes on from where the checkpoint left it
            agent_threat.member_returns = list(progress["pool_returns"])
        log(f"[{name}] resuming at iteration {progress['iteration']} ({progress['agent_steps']} agent steps), {how}")
        last = progress["history"][-1] if progress["history"] else None
        if preset.select_clean_min is not None and last is not None and last["agent_steps"] == progress["agent_steps"]:
            _restore_last_snapshot(run_dir, ckpt, last)  # (a stop between points saves an agent that is no point's)
        if preset.validate_clean_episodes:  # before the checkpoint moves on: its agent is only here until then
            _validate(run_dir, preset, recipe.env_id, progress["history"], log=lambda line: None)
    elif preset.init_from is not None:
        progress["init_from"] = init_from_agent(agent, threat_env, preset.init_from, recipe)
    _global_schedule(agent, preset.total_agent_steps)
    _global_schedule(adversary, preset.total_agent_steps)
    quiet_logger(agent)
    quiet_logger(adversary)
    per_iteration = recipe.hyperparams["n_steps"] * recipe.n_envs
    started, base_seconds = time.perf_counter(), progress["train_seconds"]
    bar = None
    if show_progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        bar = Progress(TextColumn(f"[{name}]"), BarColumn(), MofNCompleteColumn(), TextColumn("return {task.fields[ret]}"),
                       TimeRemainingColumn(), transient=True)
        bar.start()
        task = bar.add_task("train", total=preset.total_agent_steps, completed=progress["agent_steps"], ret="-")

    def set_eps(steps: int) -> None:
        """The adversary's budget for the next iteration (the ramp), in both envs' actors."""
        eps = adversary_eps(preset, steps)
        if eps != threat_env.threat.actor.eps:
            new = AttackActor(actor.variant, eps)
            threat_env.threat.actor = adversary_env.core.actor = new

    # a signal asks the loop to stop after this iteration, saved there (common.stopping): leaving the block
    # then raises Interrupted, before the run is marked or validated as finished
    with stopping.safe_points():
        try:
            while progress["agent_steps"] < preset.total_agent_steps:
                set_eps(progress["agent_steps"])
                agent.learn(per_iteration, reset_num_timesteps=False)
                adversary.learn(per_iteration, reset_num_timesteps=False)
                progress["iteration"] += 1
                progress["agent_steps"] = int(agent.num_timesteps)
                progress["adversary_steps"] = int(adversary.num_timesteps)
                done = progress["agent_steps"] >= preset.total_agent_steps
                signalled = stopping.requested()
                late = signalled is not None or deadline is not None and time.monotonic() >= deadline
                if late and not done and progress["iteration"] % preset.checkpoint_every != 0:
                    # saved between two iterations with no history point: the run that goes on has none here
                    # (a point is a candidate of the selection rules)
                    progress["train_seconds"] = round(base_seconds + time.perf_counter() - started, 1)
                    _save(ckpt, agent, adversary, progress)
                elif progress["iteration"] % preset.checkpoint_every == 0 or done:
                    recent = [e["r"] for e in agent.ep_info_buffer]
                    progress["history"].append({"iteration": progress["iteration"],
                                                "agent_steps": progress["agent_steps"],
                                                "adversary_steps": progress["adversary_steps"],
                                                "eps": threat_env.threat.actor.eps,
                                                "recent_return_attacked": float(np.mean(recent)) if recent else None,
                                                "clean_greedy_return": _clean_return(agent, clean_games, agent_env,
                                                                                     recipe.seed),
                                                "applied": _applied(threat_env, adversary_env)})
                    if preset.push_temperature is not None:
                        progress["pool_returns"] = list(agent_threat.member_returns)
                        progress["history"][-1]["pool_worst"] = _pool_worst(agent_threat)
                    progress["train_seconds"] = round(base_seconds + time.perf_counter() - started, 1)
                    _save(ckpt, agent, adversary, progress)
                    point = progress["history"][-1]
                    if preset.select_clean_min is not None:
                        _keep_selected(run_dir, ckpt, preset, point)
                    if preset.validate_clean_episodes:
                        _validate(run_dir, preset, recipe.env_id, progress["history"], log=lambda line: None)
                    log(f"[{name}] iteration {progress['iteration']}: {progress['agent_steps']} agent steps, recent "
                        f"return under the adversary {point['recent_return_attacked']}, clean (greedy, "
                        f"{CLEAN_GAMES} games) {point['clean_greedy_return']:.1f}")
                if bar is not None:
                    recent = [e["r"] for e in agent.ep_info_buffer]
                    bar.update(task, completed=progress["agent_steps"], ret=f"{np.mean(recent):.1f}" if recent else "-")
                if late and not done:
                    why = "time budget reached" if signalled is None else f"{signal.Signals(signalled).name} received"
                    log(f"[{name}] {why} at {progress['agent_steps']} agent steps; saved, stopping")
                    break
        finally:
            if bar is not None:
                bar.stop()
            agent_env.close()
            adversary_base.close()
            clean_games.close()
    progress["finished"] = progress["agent_steps"] >= preset.total_agent_steps
    write_text_atomic(ckpt / "progress.json", json.dumps(progress, indent=2))
    if preset.validate_clean_episodes:
        _validate(run_dir, preset, recipe.env_id, progress["history"], log=lambda line: log(f"[{name}] {line}"))
    return ckpt


def _pool_worst(pool: AdversaryPool) -> dict:
    """The push the prioritised pool now draws most (for the run's history): its name, running
    training return and probability per episode."""
    probabilities = pool.probabilities
    worst = 1 + int(np.argmax(probabilities[1:]))
    return {"member": pool.member_specs()[worst], "return": pool.member_returns[worst],
            "probability": probabilities[worst]}


def _validate(run_dir: Path, preset: ATLAPreset, env_id: str, history: list[dict], log: Callable[[str], None]) -> None:
    """Keep the validated (or confirmed) rule's choice among the checkpoints so far in its folder
    (``RUN_DIR/validated``, ``RUN_DIR/confirmed``, ``validation.rule_folder``); each snapshot is
    played once: ``training.defences.validation``."""
    from rlgauntlet.training.defences.validation import rule_folder, select_validated

    chosen = select_validated(run_dir, history, env_id, preset.eps, preset.select_clean_min,
                              preset.validate_clean_episodes, preset.validate_push_episodes, log=log,
                              eps_fractions=preset.push_eps_fractions,
                              confirm_episodes=preset.validate_confirm_episodes, finalists=preset.validate_finalists,
                              with_training_return=preset.select_with_training_return)
    if chosen is not None:
        rule = rule_folder(preset.validate_confirm_episodes > 0, preset.select_with_training_return)
        log(f"{rule}: kept iteration {chosen['iteration']} (score {chosen['score']:.1f})")
