"""Choosing a defence run's agent by validation against the worst member of its training pool.

An alternating-training run with a push pool (``ATLAPreset.push_share``) trains against its
pool's members *on average* (each episode meets one), and the recent return under the training
adversaries, which ``atla.selection_score`` ranks checkpoints by, is that average. The gauntlet
scores the *worst* member: a checkpoint can average well while one push direction topples it
(the selecting pool recipe's seed 2 kept a checkpoint that scored 1942 under its training pool
and 1128 under the gauntlet's push (0, 0, 1)). A preset with ``validate_clean_episodes`` keeps
instead the checkpoint that holds up best against the pool's worst member:

* every checkpoint's agent (``RUN_DIR/snapshots/iter-NNNN``) is played through the rollout
  engine on validation episodes, env seeds ``VALIDATION_SEED + k`` (apart from the gauntlet's
  evaluation seeds and from training's): clean greedy games, and against each constant push
  director of the pool at the run's ε (:func:`validate_agent`; the push games are left out for a
  checkpoint whose clean return already falls short of the rule's bar, about two thirds of a run's
  checkpoints and half its wall time); the result is kept beside the snapshot (``validation.json``),
  so a snapshot is never played twice;
* the rule (:func:`validated_score`): among checkpoints at the full ε whose validated clean
  return reaches the preset's ``select_clean_min``, the highest min(recent return under the
  training adversaries, the worst push director's validated return);
* a preset with ``validate_confirm_episodes`` (the confirmed rule, its agent in ``RUN_DIR/confirmed``)
  takes that ranking as a shortlist: its best checkpoints play every push again with more games
  (:func:`confirm_agent`) and the one with the best min(training return, worst push over all its
  games) is kept. Two games a push are a screen: the worst-first pool's seed 1 kept a checkpoint
  screened at 2132 against its worst push that the gauntlet's push (0, 0, 1) took to 1616 in ten;
* a preset with ``select_with_training_return`` False (the push-ranked rules, their agents in
  ``RUN_DIR/push-validated`` and ``RUN_DIR/push-confirmed``) ranks by the worst push alone: the
  training return is the average over the learned adversary's and the pushes' training episodes of
  a stochastic policy still changing, and on the worst-first pool's three seeds it, not a push,
  set every confirmed choice's score (docs/decisions.md).

Only the recipe's own threats decide, never a gauntlet number: the learned directors the
gauntlet trains against the kept agent, and the other agents' directors a board transfers,
are what then measures it. Training reads none of this (a run's trajectory is the same with or
without validation), so the rule also applies to a finished run of the same training settings:
the validated preset's ``rlgauntlet train`` on that run's folder plays its snapshots and keeps
the choice in ``RUN_DIR/validated`` (:func:`select_validated`).

Example:
    >>> validated_score({"eps": 0.075, "recent_return_attacked": 1900.0},
    ...                 {"clean_return": 3200.0, "push_min": 1400.0}, eps=0.075, clean_min=3000.0)
    1400.0
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Memory, Threat, ThreatParams
from rlgauntlet.victims.base import Victim

#: the validation episodes' env seeds: episode k starts from VALIDATION_SEED + k (the gauntlet
#: evaluates seeds 0-2 × up to 50 episodes; training's greedy games start at 10_000 + seed)
VALIDATION_SEED = 20_000
#: the folder a validated preset keeps its agent in (a run folder may also hold ``best``: the
#: choice of the selecting preset it was first trained under)
VALIDATED = "validated"
#: the folder a confirmed preset keeps its agent in (a run may hold the validated rule's choice beside it)
CONFIRMED = "confirmed"


def validate_agent(folder: Path, env_id: str, eps: float, clean_episodes: int, push_episodes: int,
                   n_envs: int = 8, eps_fractions: tuple[float, ...] = (1.0,), clean_min: float | None = None) -> dict:
    """Play the agent in ``folder`` (``model.zip``, ``vecnormalize.pkl``) on the validation
    episodes: ``clean_episodes`` clean greedy games, and ``push_episodes`` against each constant
    push director (``threats.attacks.push.push_directions`` of the action space) at each budget
    ``eps_fractions`` × ``eps`` in the agent's budget space (VecNormalize units when it has
    statistics); a push at the full budget is named by its direction, another as ``DIRECTION,eps=E``.
    The clean games start from env seeds ``VALIDATION_SEED + k``; the push games are played side by
    side in one engine call (:class:`PushesSideBySide`), push m's E = ``push_episodes`` games from
    ``VALIDATION_SEED + m·E + j`` (``push_games: "own"`` in the result; a record without it played
    every push on the same E games, and stands as it is).
    ``clean_min``: when the clean return is below it, no push is played (the rule cannot choose the
    agent whatever its pushes): ``push`` is empty and ``pushes_skipped_below`` says why.

    Returns ``{"clean_return", "clean_episodes", "push": {direction: mean return}, "push_min",
    "push_worst", "push_episodes", "eps", "seed"}``; returns are full undiscounted episode returns.
    The global generators (torch's, NumPy's, Python's) are left as they were: building the agent's
    network draws from torch's, and a run validating at its checkpoints must train as one that does not.
    """
    with _global_rngs_kept():
        return _validate_agent(folder, env_id, eps, clean_episodes, push_episodes, n_envs, eps_fractions, clean_min)


@contextmanager
def _global_rngs_kept():
    import random

    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def _validate_agent(folder: Path, env_id: str, eps: float, clean_episodes: int, push_episodes: int,
                    n_envs: int, eps_fractions: tuple[float, ...], clean_min: float | None) -> dict:
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env

    victim = _load(folder)

    def mean_return(threat, episodes: int) -> float:
        records = evaluate_episodes(lambda: make_env(env_id), victim, threat, range(episodes), VALIDATION_SEED,
                                    n_envs=min(n_envs, episodes))
        return float(np.mean([r.episode_return for r in records]))

    dims = _action_dims(env_id)
    clean_return = mean_return(None, clean_episodes)
    skipped = clean_min is not None and clean_return < clean_min
    push = {}
    if push_episodes > 0 and dims > 0 and not skipped:
        push = _push_means(victim, env_id, dims, eps, eps_fractions, push_episodes, VALIDATION_SEED)
    worst = min(push, key=push.get) if push else None
    validation = {"clean_return": clean_return, "clean_episodes": clean_episodes, "push": push,
                  "push_min": push[worst] if push else None, "push_worst": worst, "push_episodes": push_episodes,
                  "push_eps_fractions": list(eps_fractions), "eps": eps, "seed": VALIDATION_SEED}
    if push:
        validation["push_games"] = "own"  # each push its own games (earlier records: every push on the same E)
    if skipped:
        validation["pushes_skipped_below"] = clean_min
    return validation


def _load(folder: Path) -> Victim:
    from rlgauntlet.victims.sb3 import load_sb3

    norm = folder / "vecnormalize.pkl"
    return load_sb3(folder / "model.zip", "ppo", vecnormalize=norm if norm.exists() else None)


def _action_dims(env_id: str) -> int:
    from rlgauntlet.envs import make_env

    probe = make_env(env_id)
    dims = int(probe.action_space.shape[0]) if probe.action_space.shape else 0
    probe.close()
    return dims


def _push_means(victim: Victim, env_id: str, dims: int, eps: float, eps_fractions: tuple[float, ...],
                games_per_push: int, base_seed: int) -> dict[str, float]:
    """The mean return of ``games_per_push`` games against each push director (each direction of
    the action cube at each budget ``eps_fractions`` × ``eps``), by name; push m's games start from
    env seeds ``base_seed + m·E + j`` (E = ``games_per_push``), all played in one engine call."""
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env
    from rlgauntlet.threats.attacks.push import direction_param, push_directions

    members = [(direction, eps * fraction, direction_param(direction) if fraction == 1.0 else
                f"{direction_param(direction)},eps={eps * fraction:g}")
               for direction in dict.fromkeys(tuple(d) for d in push_directions(dims)) for fraction in eps_fractions]
    games = [(direction, budget) for direction, budget, _ in members for _ in range(games_per_push)]
    records = evaluate_episodes(lambda: make_env(env_id), victim, PushesSideBySide(games), range(len(games)),
                                base_seed, n_envs=min(SIDE_BY_SIDE, len(games)))
    returns = {r.episode: r.episode_return for r in records}
    return {name: float(np.mean([returns[m * games_per_push + j] for j in range(games_per_push)]))
            for m, (_, _, name) in enumerate(members)}


#: env seeds of a finalist's confirming push games: push m's C games start from CONFIRM_SEED + m·C + j
#: (apart from the screen's VALIDATION_SEED + k, the gauntlet's and training's seeds)
CONFIRM_SEED = 30_000


def confirm_agent(folder: Path, env_id: str, validation: dict, confirm_episodes: int) -> dict:
    """A finalist's confirmation: ``confirm_episodes`` more games against every push director its
    screen (``validation``, from :func:`validate_agent`) played, from env seeds ``CONFIRM_SEED + m·C + j``.
    Two games a push rank a checkpoint by luck as much as by robustness: a push that topples the
    agent in half its games leaves both of its two games standing a quarter of the time.

    Returns ``{"episodes": C, "seed": CONFIRM_SEED, "push": {name: mean of the C games}, "push_min",
    "push_worst"}`` where ``push_min`` is the worst push's mean over all its E + C games (the screen's
    E and these C), the figure the confirmed rule ranks by."""
    with _global_rngs_kept():
        victim = _load(folder)
        fractions = tuple(validation.get("push_eps_fractions", (1.0,)))
        confirm = _push_means(victim, env_id, _action_dims(env_id), float(validation["eps"]), fractions,
                              confirm_episodes, CONFIRM_SEED)
    screen_games = int(validation["push_episodes"])
    if set(confirm) != set(validation["push"]):
        raise RuntimeError(f"confirmation played {sorted(confirm)}, the screen {sorted(validation['push'])}: a bug")
    combined = {name: (screen_games * validation["push"][name] + confirm_episodes * confirm[name])
                / (screen_games + confirm_episodes) for name in confirm}
    worst = min(combined, key=combined.get)
    return {"episodes": confirm_episodes, "seed": CONFIRM_SEED, "push": confirm, "push_min": combined[worst],
            "push_worst": worst}


#: engine slots of the validation's push games: one batched network call a step serves this many
#: games (a step of 2 games cost 3.4 times as much per game as one of 16 on a loaded core)
SIDE_BY_SIDE = 16


class PushesSideBySide(Threat):
    """The validation's push games in one engine call: episode k (``Memory.episodes``) meets
    ``games[k]`` = (direction, ε), a constant
    push director (:class:`~rlgauntlet.threats.attacks.push.Push`, one FGSM step) with its own
    direction, in its own ℓ∞ ball; one gradient call per budget serves every row at that budget.
    Not registered: only the validation builds it."""

    name = "validation_pushes"
    family = "adversarial"
    budget_params = ("eps",)
    white_box = True

    class Params(ThreatParams):
        eps: float

    def __init__(self, games: list[tuple[list[int], float]]) -> None:
        from rlgauntlet.threats import parse_threat
        from rlgauntlet.threats.attacks.push import direction_param

        super().__init__(self.Params(eps=max(budget for _, budget in games)), spec="validation_pushes")
        self.games = games
        dims = len(games[0][0])
        # one push per budget; each row's direction is the reference its ascent takes
        self.pushes = {budget: parse_threat(f"push:direction={direction_param([1] * dims)},eps={budget:g}")
                       for budget in dict.fromkeys(b for _, b in games)}

    def check_victim(self, victim: Victim) -> None:
        for push in self.pushes.values():
            push.check_victim(victim)

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if len(memory.episodes) != x.shape[0] or max(memory.episodes) >= len(self.games):
            raise RuntimeError(f"validation_pushes: episodes {memory.episodes} for {len(self.games)} games: a bug")
        games = [self.games[k] for k in memory.episodes]
        directions = torch.tensor([direction for direction, _ in games], dtype=x.dtype, device=x.device)
        directions = directions / directions.norm(dim=1, keepdim=True)
        budgets = [budget for _, budget in games]
        out = x.clone()
        for budget, push in self.pushes.items():
            rows = torch.tensor([b == budget for b in budgets], device=x.device) & scheduled
            if rows.any():
                with torch.enable_grad():
                    out[rows] = push.ascend(x[rows].detach(), victim, directions[rows], rng.subset(rows)).detach()
        return out, scheduled


def validated_score(point: dict, validation: dict, eps: float, clean_min: float,
                    with_training_return: bool = True) -> float | None:
    """How a checkpoint ranks under the validated rule: min(its recent return under the training
    adversaries, its worst push director's validated return), when the adversary's ε had reached
    ``eps`` and its validated clean return reaches ``clean_min``; None (never chosen) otherwise.
    A run without push directors (a discrete action space) ranks by the recent return alone.
    ``with_training_return`` False (the push-ranked rules): by the worst push alone."""
    if point.get("recent_return_attacked") is None or point["eps"] < eps or validation["clean_return"] < clean_min:
        return None
    if validation.get("push_min") is None:
        return float(point["recent_return_attacked"])
    if not with_training_return:
        return float(validation["push_min"])
    return min(float(point["recent_return_attacked"]), float(validation["push_min"]))


def rule_folder(confirm: bool, with_training_return: bool = True) -> str:
    """The folder of ``RUN_DIR`` a validation rule keeps its agent in: ``validated``, ``confirmed``,
    or, for the rules ranked by the worst push alone, ``push-validated`` and ``push-confirmed`` (so
    one run folder holds every rule's choice side by side)."""
    folder = CONFIRMED if confirm else VALIDATED
    return folder if with_training_return else f"push-{folder}"


def read_validation(snapshot: Path) -> dict | None:
    """``snapshot/validation.json``, or None; a file that is not one we write is one :class:`UserError`."""
    path = snapshot / "validation.json"
    if not path.exists():
        return None
    try:
        validation = _checked(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{path} is not a validation rlgauntlet wrote ({type(err).__name__}: {err}); remove it "
                        "and rerun the training command to play the snapshot again") from None
    return validation


def _checked(validation: dict) -> dict:
    """``validation`` when it has the fields the rule reads, with their types (else the error
    reading them raises: ValueError, KeyError, TypeError or AttributeError)."""
    float(validation["clean_return"]), int(validation["clean_episodes"]), int(validation["push_episodes"])
    if validation.get("push_min") is not None:
        float(validation["push_min"])
    if "pushes_skipped_below" in validation:
        float(validation["pushes_skipped_below"])
    if "confirm" in validation:
        float(validation["confirm"]["push_min"]), int(validation["confirm"]["episodes"])
    return validation


def _played_with(validation: dict | None, eps: float, clean_episodes: int, push_episodes: int,
                 eps_fractions: tuple[float, ...], clean_min: float) -> bool:
    """Whether ``validation`` was played with these settings, its pushes included unless its clean
    return is below ``clean_min`` (then the rule never reads them)."""
    wanted = {"clean_episodes": clean_episodes, "push_episodes": push_episodes, "eps": eps, "seed": VALIDATION_SEED}
    if tuple(eps_fractions) != (1.0,):  # (files written before push budgets other than ε were possible lack it)
        wanted["push_eps_fractions"] = list(eps_fractions)
    if validation is None or not all(validation.get(k) == v for k, v in wanted.items()):
        return False
    return "pushes_skipped_below" not in validation or float(validation["clean_return"]) < clean_min


def snapshot_validation(snapshot: Path, env_id: str, eps: float, clean_episodes: int, push_episodes: int,
                        eps_fractions: tuple[float, ...] = (1.0,), clean_min: float = 0.0) -> dict:
    """The snapshot's validation: read from ``validation.json`` when it was played with these
    settings, else played (:func:`validate_agent`, no pushes below ``clean_min``) and written there."""
    kept = read_validation(snapshot)
    if _played_with(kept, eps, clean_episodes, push_episodes, eps_fractions, clean_min):
        return kept
    validation = validate_agent(snapshot, env_id, eps, clean_episodes, push_episodes, eps_fractions=eps_fractions,
                                clean_min=clean_min)
    tmp = snapshot / "validation.json.tmp"
    tmp.write_text(json.dumps(validation, indent=2))
    tmp.replace(snapshot / "validation.json")
    return validation


def select_validated(run_dir: Path, history: list[dict], env_id: str, eps: float, clean_min: float,
                     clean_episodes: int, push_episodes: int, log=print,
                     eps_fractions: tuple[float, ...] = (1.0,), confirm_episodes: int = 0,
                     finalists: int = 0, with_training_return: bool = True) -> dict | None:
    """Validate every snapshot of ``run_dir`` that ``history`` (the run's ``progress.json``
    checkpoints) names and keep the best by :func:`validated_score` in ``RUN_DIR/validated``
    (agent files and ``selection.json``); returns the selection, or None when no checkpoint
    qualified (the folder is then left as it was). Every validation is also recorded in
    ``RUN_DIR/validations.json`` (committed with the run, where the snapshots are not), so a run
    resumed on another machine ranks its earlier checkpoints without their snapshots. A
    checkpoint neither recorded nor kept is refused: the rule ranks every checkpoint or none.

    ``confirm_episodes`` > 0 (the confirmed rule, kept in ``RUN_DIR/confirmed``): the screen's
    scores only shortlist. Checkpoints are confirmed (:func:`confirm_agent`) in the order of their
    screen score, best first, and ranked by min(recent return under the training adversaries, worst
    push over the screen's and the confirmation's games); confirming stops after ``finalists``
    checkpoints, or as soon as the best confirmed score reaches the next checkpoint's screen score
    (the screen, a best-of-few, is taken as that checkpoint's most it could confirm at).

    ``with_training_return`` False: every score above is the worst push's alone (the training
    return left out), and the agent is kept in ``RUN_DIR/push-validated`` (``push-confirmed``)."""
    from rlgauntlet.training.checkpoints import copy_agent_files, read_selection, replace_folder

    ledger = _read_ledger(run_dir)
    ranked: list[tuple[float, dict, dict]] = []
    for point in history:
        snapshot = run_dir / "snapshots" / f"iter-{point['iteration']:04d}"
        validation = ledger.get(str(point["iteration"]))
        if not _played_with(validation, eps, clean_episodes, push_episodes, eps_fractions, clean_min):
            if not (snapshot / "model.zip").exists():
                raise UserError(f"{run_dir} has no snapshot of iteration {point['iteration']} ({snapshot}) and no "
                                "validation of it; the validated rule ranks every checkpoint, so it needs a run that "
                                "kept them (a selecting preset's run)")
            validation = snapshot_validation(snapshot, env_id, eps, clean_episodes, push_episodes, eps_fractions,
                                             clean_min)
            ledger[str(point["iteration"])] = validation
            _write_ledger(run_dir, ledger)
        score = validated_score(point, validation, eps, clean_min, with_training_return)
        log(f"iteration {point['iteration']}: clean {validation['clean_return']:.1f}, worst push "
            f"{validation['push_min'] if validation['push_min'] is None else round(validation['push_min'], 1)}, "
            f"score {score if score is None else round(score, 1)}")
        if score is not None:
            ranked.append((score, point, validation))
    if not ranked:
        return None
    ranked_by = ("min(recent return under the training adversaries, worst push director's validated return)"
                 if with_training_return else "worst push director's validated return")
    rule = (f"highest {ranked_by} among checkpoints at ε {eps:g} with a validated clean return of at least "
            f"{clean_min:g} ({clean_episodes} games; {push_episodes} per push direction and budget "
            f"{', '.join(f'{eps * f:g}' for f in eps_fractions)}; env seeds {VALIDATION_SEED}+k)")
    if confirm_episodes > 0:
        score, point, validation = _confirmed_best(run_dir, ledger, ranked, env_id, confirm_episodes, finalists, log,
                                                   with_training_return)
        rule += (f"; the screen's best confirmed with {confirm_episodes} more games per push (env seeds "
                 f"{CONFIRM_SEED}+k), up to {finalists} of them, in screen order until the best confirmed score "
                 "reaches the next screen score, and ranked by the worst push over all their games")
    else:
        score, point, validation = max(ranked, key=lambda entry: entry[0])  # the first of equals
    target = run_dir / rule_folder(confirm_episodes > 0, with_training_return)
    snapshot = run_dir / "snapshots" / f"iter-{point['iteration']:04d}"
    if not (snapshot / "model.zip").exists():  # an earlier machine's choice: kept there already, or lost
        kept = read_selection(target)
        if kept is not None and int(kept["iteration"]) == point["iteration"]:
            return kept
        raise UserError(f"{run_dir}: the validated rule chooses iteration {point['iteration']}, whose snapshot is not "
                        f"here and is not the one in {target}; run it where its snapshots are")
    tmp = copy_agent_files(snapshot, target)
    selection = {"iteration": point["iteration"], "agent_steps": point["agent_steps"], "score": score,
                 "recent_return_attacked": point["recent_return_attacked"], "validation": validation, "rule": rule}
    (tmp / "selection.json").write_text(json.dumps(selection, indent=2))
    replace_folder(tmp, target)
    return selection


def _played_confirm(validation: dict, confirm_episodes: int) -> bool:
    confirm = validation.get("confirm")
    return (isinstance(confirm, dict) and confirm.get("episodes") == confirm_episodes
            and confirm.get("seed") == CONFIRM_SEED and set(confirm.get("push", {})) == set(validation["push"]))


def _confirmed_best(run_dir: Path, ledger: dict, ranked: list[tuple[float, dict, dict]], env_id: str,
                    confirm_episodes: int, finalists: int, log,
                    with_training_return: bool = True) -> tuple[float, dict, dict]:
    """The confirmed rule's choice among ``ranked`` (screen score, point, validation): see
    :func:`select_validated`. Each confirmation is kept in the checkpoint's validation record (the
    ledger and the snapshot's ``validation.json``), so a checkpoint is confirmed once."""
    order = sorted(ranked, key=lambda entry: -entry[0])  # stable: the earlier of equal screen scores first
    best: tuple[float, dict, dict] | None = None
    for count, (screen_score, point, validation) in enumerate(order):
        if count >= max(finalists, 1) or (best is not None and best[0] >= screen_score):
            break
        if validation.get("push_min") is None:  # no push to confirm (a discrete action space)
            if best is None or screen_score > best[0]:
                best = (screen_score, point, validation)
            continue
        if not _played_confirm(validation, confirm_episodes):
            snapshot = run_dir / "snapshots" / f"iter-{point['iteration']:04d}"
            if not (snapshot / "model.zip").exists():
                raise UserError(f"{run_dir} has no snapshot of iteration {point['iteration']} ({snapshot}) and no "
                                "confirmation of it; run the training command where the run's snapshots are")
            validation = {**validation, "confirm": confirm_agent(snapshot, env_id, validation, confirm_episodes)}
            ledger[str(point["iteration"])] = validation
            _write_ledger(run_dir, ledger)
            tmp = snapshot / "validation.json.tmp"
            tmp.write_text(json.dumps(validation, indent=2))
            tmp.replace(snapshot / "validation.json")
        score = float(validation["confirm"]["push_min"])
        if with_training_return:
            score = min(float(point["recent_return_attacked"]), score)
        log(f"iteration {point['iteration']}: screen score {screen_score:.1f}, confirmed worst push "
            f"{validation['confirm']['push_min']:.1f} ({validation['confirm']['push_worst']}), score {score:.1f}")
        if best is None or score > best[0]:
            best = (score, point, validation)
    assert best is not None  # ranked is not empty
    return best


#: the run's record of every checkpoint's validation, by iteration
LEDGER = "validations.json"


def _read_ledger(run_dir: Path) -> dict:
    path = run_dir / LEDGER
    if not path.exists():
        return {}
    try:
        ledger = json.loads(path.read_text())
        for validation in ledger.values():
            _checked(validation)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{path} is not a record rlgauntlet wrote ({type(err).__name__}: {err}); remove it and rerun "
                        "the training command where the run's snapshots are, to play them again") from None
    return ledger


def _write_ledger(run_dir: Path, ledger: dict) -> None:
    tmp = run_dir / (LEDGER + ".tmp")
    tmp.write_text(json.dumps(ledger, indent=1))
    tmp.replace(run_dir / LEDGER)
