"""The gauntlet's plan: which protocol, which evaluations and which learned attackers, decided
and checked against the loaded agent and env before any work (bad input fails here, with a
:class:`~rlgauntlet.errors.UserError`, and nothing is written).

Example:
    >>> plan = plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick",
    ...                      store="runs/g.sqlite")                               # doctest: +SKIP
    >>> len(plan.heuristics), [t.method for t in plan.tasks]                      # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec, as_agent_spec
from rlgauntlet.experiments.cells import CellSet
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.gauntlet.cache import agent_cache, attacker_folder
from rlgauntlet.gauntlet.protocols import Protocol, get_protocol, protocol_fitting
from rlgauntlet.threats.base import Threat

#: the learned attackers' threat names per training method
THREAT_OF_METHOD = {"paad": "paad", "sarl": "sarl", "robust-sarsa": "robust_sarsa"}


@dataclass(frozen=True)
class AttackerTask:
    """One learned attacker to train (a cell of the executor): everything a worker needs."""

    agent: AgentSpec  # every load option and the device: the director trains where the victim runs
    env: str
    method: str
    eps: str  # as written in the protocol (e.g. 1/255)
    eps_value: float
    seed: int
    steps: int
    folder: str
    setting: str = "default"  # the director's PPO settings (Robust Sarsa has none)
    select: str = "last"  # the director checkpoint the attacker is
    patience: int | None = None  # checkpoints without a new best before a director stops
    recurrent: bool = False  # an LSTM director (a memory of the episode), for a victim with a memory
    patience_from: int = 0  # checkpoints up to this many steps do not count towards the patience
    #: (folder, steps, patience, patience_from, ε) of the same director at a shorter budget, trained
    #: first and gone on from: mujoco v7's longer LSTM directors (as v6 trained them:
    #: ``Protocol.first_stage``, at the task's ε) and v8's curriculum directors (at a multiple of it)
    first_stage: tuple[str, int, int | None, int, str] | None = None
    #: the director's PPO settings by name; None: those its ``setting`` names, and the default ones
    #: for a curriculum director (its ``setting`` names the director, its ``first_stage`` the schedule)
    ppo_settings: str | None = None

    def __post_init__(self) -> None:
        if self.ppo_settings is None:
            object.__setattr__(self, "ppo_settings", "default" if self.setting == CURRICULUM else self.setting)

    @property
    def spec(self) -> str:
        """The threat spec that applies the trained attacker."""
        from rlgauntlet.threats.spec import quote_value

        key = "q" if self.method == "robust-sarsa" else "attacker"
        return f"{THREAT_OF_METHOD[self.method]}:{key}={quote_value(self.folder)},eps={self.eps}"

    @property
    def name(self) -> str:
        """The threat, a director setting other than the default and ``@lstm`` for an LSTM
        director: the attackers of two settings are two rows of the results, never pooled."""
        return (THREAT_OF_METHOD[self.method] + ("" if self.setting == "default" else f"@{self.setting}")
                + ("@lstm" if self.recurrent else ""))

    @property
    def label(self) -> str:
        """How results name it: :attr:`name` and ε (its folder left out)."""
        return f"{self.name}:eps={self.eps}"

    def done(self) -> bool:
        manifest = Path(self.folder) / "manifest.json"
        if not manifest.is_file():
            return False
        try:
            written = json.loads(manifest.read_text())
            return "stopped_early" in written or int(written.get("steps", 0)) >= (
                0 if self.method == "robust-sarsa" else self.steps)
        except (ValueError, OSError, TypeError):
            return False

    def steps_done(self) -> int:
        """Director steps trained so far, counting a finished first stage (its steps are part of
        :attr:`steps`): the last checkpoint's, read from the folders. All of :attr:`steps` once the
        task is done (an early stop ends the work); 0 for what has no checkpoint yet, or a file
        being written while read (a progress bar's estimate, never a result)."""
        if self.done():
            return self.steps
        trained = _checkpoint_steps(Path(self.folder))
        if not trained and self.first_stage is not None:
            folder, first_steps = Path(self.first_stage[0]), self.first_stage[1]
            first = replace(self, folder=str(folder), steps=first_steps, first_stage=None)
            trained = first.steps_done()
        return min(trained, self.steps)


def _checkpoint_steps(folder: Path) -> int:
    """The steps of a director's last checkpoint in ``folder`` (``checkpoint/progress.json``), 0
    where there is none or it cannot be read now."""
    try:
        history = json.loads((folder / "checkpoint" / "progress.json").read_text())["history"]
        return int(history[-1]["steps"]) if history else 0
    except (ValueError, OSError, TypeError, KeyError, IndexError):
        return 0


#: the setting name of a curriculum director (:attr:`Protocol.curriculum`): trained with the default
#: PPO settings, first at a multiple of ε
CURRICULUM = "curriculum"


def curriculum_eps(eps: str, multiple: float) -> str:
    """The budget a curriculum director first trains at, as the protocol would write it.

    Example:
        >>> curriculum_eps("0.15", 3.0), curriculum_eps("0.075", 3.0)
        ('0.45', '0.225')
    """
    return f"{eps_value(eps) * multiple:.6g}"


def eps_value(text: str) -> float:
    """A budget as the protocol writes it (``0.1``, ``1/255``) as a number."""
    from rlgauntlet.threats.spec import parse_value

    return float(parse_value(text, f"eps {text}", "eps"))


def with_eps(spec: str, eps: str) -> str:
    """``spec`` with the budget ``eps`` added (``pgd:steps=10`` → ``pgd:steps=10,eps=0.1``)."""
    return f"{spec}{',' if ':' in spec else ':'}eps={eps}"


@lru_cache(maxsize=None)
def threat_eps(spec: str) -> float | None:
    """The budget of a threat spec (parsed once: the summary asks for every spec at every ε)."""
    from rlgauntlet.threats import parse_threat

    return getattr(parse_threat(spec).params, "eps", None)


def check_protocol_version(store: ResultsStore, protocol: Protocol) -> None:
    """Refuse a store that holds gauntlet results of another version of ``protocol``, except a
    version that keeps the same directors (:attr:`Protocol.directors_version`: v6 only adds members
    to v5's, so each runs in the other's store and reuses every director and episode stored, as a
    new version shipping task by task needs); the leaderboard still ranks each version on a board
    of its own. A version this rlgauntlet no longer runs shares with none."""
    shares: dict[object, bool] = {protocol.version: True}

    def sharing(version: object) -> bool:
        if version not in shares:
            try:
                other = get_protocol(f"{protocol.name}@v{version}").directors_version
            except UserError:
                other = None
            shares[version] = other == protocol.directors_version
        return shares[version]

    for _, meta in store.runs("gauntlet"):
        if meta.get("protocol") == protocol.name and not sharing(meta.get("version")):
            raise UserError(f"--store {store.path} holds {protocol.name} gauntlet results of version "
                            f"{meta.get('version')}, and this is version {protocol.version}: results of different "
                            "versions are never ranked together; give a new --store")


def fitting_specs(specs: list[str], victim, env: str, preset: str) -> tuple[list[tuple[str, Threat]], list[dict]]:
    """(spec, its threat parsed and checked once) for the specs that apply to this agent and env,
    and the skipped specs with the reason."""
    from rlgauntlet.experiments.evaluations import checked_threats

    kept, skipped = [], []
    for spec in specs:
        try:
            kept.append((spec, checked_threats([spec], victim, env, preset)[0]))
        except UserError as exc:
            skipped.append({"spec": spec, "reason": str(exc)})
    return kept, skipped


@dataclass(frozen=True)
class GauntletPlan:
    """What a gauntlet will run, decided (and checked against the agent and env) before any work.
    Frozen: running it never changes it; what the run finds (the race's drops, the trained
    attackers' threats) is the run's own record (:class:`rlgauntlet.gauntlet.outcome.Outcome`)."""

    protocol: Protocol
    level: str
    spec: AgentSpec
    env: str
    preset: str
    victim: object
    sha: str
    seeds: list[int]
    store: Path
    heuristics: list[str]
    natural: list[str]
    shifts: list[str]
    skipped: list[dict]
    tasks: list[AttackerTask]
    learned: list[str]  # the learned attackers' threat specs (parsed once they are trained)
    labels: dict[str, str]  # spec -> how results name it (a learned attacker's without its folder)
    parsed: Mapping[str, Threat] = field(default_factory=dict)  # spec -> its threat, parsed and checked once
    exhaustive: bool = False  # every heuristic member in full, no race (a check of the race)
    lstm_directors: bool = False  # LSTM directors asked for an agent the protocol plans none for
    authors: list[str] = field(default_factory=list)  # a published agent's own released attacker, reported beside

    def __post_init__(self) -> None:
        object.__setattr__(self, "parsed", MappingProxyType(dict(self.parsed)))  # read-only once planned

    def eps_of(self, spec: str) -> float | None:
        """The budget of ``spec`` (from its parsed threat when the plan has it)."""
        threat = self.parsed.get(spec)
        return getattr(threat.params, "eps", None) if threat is not None else threat_eps(spec)

    @property
    def settings(self):
        return self.protocol.levels[self.level]

    @property
    def racing(self) -> bool:
        """Whether the heuristic members are raced before the finalists run in full."""
        return self.protocol.race is not None and not self.exhaustive

    def threats(self, specs: list[str], learned: Mapping[str, Threat] = MappingProxyType({})) -> list[Threat]:
        """The parsed threat of each of ``specs``: planned ones from the plan, a learned attacker's
        from ``learned`` (parsed by the run once it is trained)."""
        unknown = [s for s in specs if s not in self.parsed and s not in learned]
        if unknown:
            raise KeyError(f"not in the plan (or a learned attacker not trained yet): {unknown}")
        return [self.parsed[s] if s in self.parsed else learned[s] for s in specs]

    def cells(self, store: ResultsStore, specs: list[str],
              learned: Mapping[str, Threat] = MappingProxyType({}), episodes: int | None = None,
              impact: bool = True) -> list[CellSet]:
        """The cells of ``specs`` (with clean and, for a discrete agent when ``impact``, the argmin
        agent) on every seed of the plan, greedy, ``episodes`` each (default the level's), their
        runs found or created in ``store``. The plan's loaded victim and parsed threats are used (a
        learned attacker's from ``learned``): nothing is loaded or parsed again."""
        from rlgauntlet.experiments.cells import open_cells

        threats = self.threats(specs, learned)
        return [open_cells(store, self.spec, self.env, self.preset, self.victim, threats, seed,
                           episodes or self.settings.episodes, deterministic=True, impact=impact) for seed in self.seeds]

    def selection_cells(self, store: ResultsStore, specs: list[str], episodes: int,
                        extra: Mapping[str, Threat] = MappingProxyType({})) -> CellSet:
        """The race's cells of ``specs``: ``episodes`` selection episodes each (env seeds from
        :data:`~rlgauntlet.gauntlet.race.SELECTION_SEED`), greedy, no clean or argmin cell,
        stored as ``selection`` runs (a member the plan does not hold, a board's transferred
        director, from ``extra``)."""
        from rlgauntlet.experiments.cells import open_cells
        from rlgauntlet.gauntlet.race import SELECTION_SEED

        return open_cells(store, self.spec, self.env, self.preset, self.victim, self.threats(specs, extra),
                          SELECTION_SEED, episodes, deterministic=True, impact=False, clean=False, kind="selection")

    def race_groups(self) -> list[tuple[str, list[str]]]:
        """The heuristic members raced together: (ε, its members) for each ε of the grid that has some."""
        groups = ((e, [s for s in self.heuristics if self.eps_of(s) == eps_value(e)]) for e in self.protocol.eps_grid)
        return [(e, g) for e, g in groups if g]

    def preview(self) -> dict:
        """What running the plan will do, before anything runs (``gauntlet --plan``): its members,
        each learned attacker with its steps and whether the store already holds it trained, and
        the training left. The training left is in steps (less what an interrupted training already
        did: ``steps_done``), and in worker-seconds where the store has trained the same attacker
        (same folder name) against other agents on this env: their mean, for the steps left.
        Episodes are not estimated: the race decides how many run."""
        from rlgauntlet.gauntlet.cache import trained_seconds

        measured = trained_seconds(self.store, self.env)
        attackers, left_steps, left_seconds, unmeasured = [], 0, 0.0, 0
        for task in self.tasks:
            row = {"attacker": task.label, "steps": task.steps, "trained": task.done()}
            if not row["trained"]:
                seen = measured.get(Path(task.folder).name, [])
                row["steps_done"] = task.steps_done()
                left = 1.0 - row["steps_done"] / task.steps if task.steps else 1.0
                row["estimated_seconds"] = round(left * sum(seen) / len(seen), 1) if seen else None
                left_steps += task.steps - row["steps_done"]
                left_seconds += row["estimated_seconds"] or 0.0
                unmeasured += not seen
            attackers.append(row)
        return {"protocol": self.protocol.tag, "level": self.level, "agent": self.spec.agent, "env": self.env,
                "seeds": list(self.seeds), "episodes_per_seed": self.settings.episodes,
                "heuristic_members": len(self.heuristics), "raced": self.racing, "natural": len(self.natural),
                "shifts": len(self.shifts), "authors_attack": len(self.authors), "skipped": len(self.skipped),
                "learned_attackers": attackers, "training_left_steps": left_steps,
                # a partial sum would read as the whole: no estimate unless every untrained one is measured
                "training_left_seconds": round(left_seconds, 1) if not unmeasured else None,
                "unmeasured": unmeasured}

    def parse_learned(self) -> dict[str, Threat]:
        """The learned attackers' threats, parsed and checked once (their specs name trained
        folders: call once the attackers exist)."""
        from rlgauntlet.experiments.evaluations import checked_threats

        return dict(zip(self.learned, checked_threats(self.learned, self.victim, self.env, self.preset)))


def director_settings_for(protocol: Protocol, env: str, skipped: list[dict],
                          settings: Sequence[str] | None = None) -> list[str]:
    """The protocol's director settings (or ``settings``) that exist for ``env`` (the official
    code's adversary settings exist for four MuJoCo envs); each one missing goes to ``skipped``
    with the reason."""
    from rlgauntlet.training.attackers.attack_train import director_settings

    kept = []
    for setting in protocol.director_settings if settings is None else settings:
        try:
            director_settings(env, setting)
        except UserError as exc:
            row = {"spec": f"director setting {setting}", "reason": str(exc)}
            if row not in skipped:
                skipped.append(row)
            continue
        kept.append(setting)
    return kept


def plan_gauntlet(agent: str | AgentSpec, env: str, protocol: str | None = None, level: str = "standard",
                  seeds: Sequence[int] | None = None, store: str | Path = "gauntlet.sqlite", exhaustive: bool = False,
                  lstm_directors: bool = False, **load_options) -> GauntletPlan:
    """Load the agent, pick the protocol and level, and list every evaluation and attacker the
    gauntlet runs (entries that do not fit the agent or env are kept in ``skipped`` with the
    reason; ``exhaustive`` runs every heuristic member in full instead of racing them;
    ``lstm_directors`` adds an LSTM director of every director method for any agent, where the
    protocol plans them for recurrent agents only). Bad input fails here, before any work, with a
    :class:`UserError`."""
    from rlgauntlet.common.seeding import check_seeds
    from rlgauntlet.experiments.store import check_store_location

    spec = as_agent_spec(agent, **load_options)
    if not isinstance(spec, AgentSpec):
        from rlgauntlet.victims.agent_ref import AGENT_FORMS

        raise UserError(f"the gauntlet runs an agent spec ({AGENT_FORMS}), not a loaded victim")
    chosen = protocol_fitting(protocol, env, spec.preset).for_env(env)  # the env's own budgets, where it has them
    settings = chosen.level(level)
    seeds = check_seeds(settings.seeds if seeds is None else seeds, settings.episodes)
    if chosen.race is not None and not exhaustive:
        from rlgauntlet.gauntlet.race import check_disjoint

        check_disjoint(seeds, settings.episodes, max(chosen.race.rounds(settings.episodes), default=0))
    store_path = check_store_location(store)
    victim, preset = spec.load(env)
    sha = victim.description.get("sha256") or "unhashed"
    if victim.budget_space is None:
        raise UserError("the agent's input space is unknown, so ε has no unit; pass --input-space")
    if store_path.exists():  # a new store is created by the first episodes, not by a check
        results = ResultsStore(store_path)
        try:
            check_protocol_version(results, chosen)
        finally:
            results.close()

    kinds = list(chosen.heuristics[victim.kind])
    if chosen.push and not victim.is_discrete:
        from rlgauntlet.threats.attacks.push import direction_param, push_directions

        kinds += [f"push:direction={direction_param(d)}" for d in push_directions(victim.action_space.shape[0])]
    fitted, skipped = fitting_specs([with_eps(h, e) for e in chosen.eps_grid for h in kinds], victim, env, preset)
    heuristics = [spec for spec, _ in fitted]
    natural: list[str] = []
    if chosen.natural:
        from rlgauntlet.threats.suites import natural_suite

        fitted_natural, skipped_natural = fitting_specs(natural_suite(victim, env), victim, env, preset)
        fitted += fitted_natural
        natural = [spec for spec, _ in fitted_natural]
        skipped += skipped_natural
    fitted_shifts, skipped_shifts = fitting_specs([s for s in chosen.shifts(env, settings.shifts) if s not in natural],
                                                  victim, env, preset)
    fitted += fitted_shifts
    shifts = [spec for spec, _ in fitted_shifts]
    skipped += skipped_shifts

    learned_eps = [chosen.headline_eps] if settings.learned_at == "headline" else list(chosen.eps_grid)
    cache = agent_cache(store_path, sha, env)
    directors = [(setting, chosen.select, False) for setting in director_settings_for(chosen, env, skipped)]
    extras = {m: [(setting, steps) for setting, steps in chosen.extra_directors_of(level, m)
                  if director_settings_for(chosen, env, skipped, [setting])]
              for m in chosen.learned_methods(victim.is_discrete)}
    tasks = []
    methods = list(chosen.learned_methods(victim.is_discrete))
    if victim.recurrent and "robust-sarsa" in methods:  # Q of a policy of the state alone
        methods.remove("robust-sarsa")
        skipped.append({"spec": "learned attacker robust-sarsa", "reason": "it learns Q of a policy of the state "
                        "alone, and this agent is recurrent (LSTM): its action also depends on its memory"})
    # LSTM directors: the protocol's for a recurrent agent, every director method's with lstm_directors
    own_lstm = [m for m in chosen.recurrent_directors if m in methods] if victim.recurrent else []
    lstm = [m for m in methods if m != "robust-sarsa"] if lstm_directors else own_lstm
    cpu_spec = spec.model_copy(update={"device": "cpu"})  # Robust Sarsa's Q function trains on the CPU only
    for seed in seeds:
        for m in methods:
            for e in ([chosen.headline_eps] if m == "robust-sarsa" else learned_eps):
                kinds = [("default", "last", False)] if m == "robust-sarsa" else \
                    directors + ([("default", chosen.select, True)] if m in lstm else [])
                extra = {} if m == "robust-sarsa" else dict(extras[m])
                kinds += [(setting, chosen.select, False) for setting in extra]
                if m != "robust-sarsa" and chosen.curriculum_of(level, env, m):  # an LSTM one too where LSTM directors are
                    kinds += [(CURRICULUM, chosen.select, False)] + ([(CURRICULUM, chosen.select, True)] if m in lstm else [])
                for setting, select, recurrent in kinds:
                    curriculum = chosen.curriculum_of(level, env, m, recurrent) if setting == CURRICULUM else None
                    if m == "robust-sarsa":
                        steps = settings.attacker_steps
                    elif curriculum:  # both stages
                        steps = 2 * curriculum[1]
                    else:
                        steps = extra.get(setting) or chosen.director_steps_of(level, env, recurrent)
                    folder = attacker_folder(cache, m, None if m == "robust-sarsa" else e, setting, select, seed,
                                             chosen.name, chosen.directors_version, steps, recurrent)
                    # an LSTM director's return plateaus for a third of 400k steps before it learns to use its
                    # memory (docs/protocols.md), where the patience rule would stop it: it trains its whole budget,
                    # or (v7) counts only the checkpoints after that; an extra director trains every step: the
                    # official-attack one dips for 300k+ steps before it breaks through
                    # a curriculum director trains every step too: its return at ε starts far above
                    # where its first stage's at the larger ε ended
                    patience, patience_from = (None, 0) if setting in extra or setting == CURRICULUM else \
                        chosen.director_patience(level, recurrent)
                    if curriculum:
                        stage, stage_eps = (curriculum[1], None, 0), curriculum_eps(e, curriculum[0])
                    else:
                        stage = chosen.first_stage(level, env) if recurrent and setting not in extra else None
                        stage_eps = e
                    first = None if stage is None else \
                        (str(attacker_folder(cache, m, stage_eps, setting, select, seed, chosen.name,
                                             chosen.directors_version, stage[0], recurrent)), *stage, stage_eps)
                    tasks.append(AttackerTask(spec if m != "robust-sarsa" else cpu_spec, env, m, e, eps_value(e), seed,
                                              steps, str(folder), setting, select, patience, recurrent, patience_from,
                                              first))
    # a Robust Sarsa Q function serves every ε: one training, one MinQ evaluation per learned ε
    labels = {s: s for s in heuristics + natural + shifts}
    learned_labels = {with_eps(t.spec.rsplit(",eps=", 1)[0], e): f"{t.name}:eps={e}" for t in tasks
                      for e in (learned_eps if t.method == "robust-sarsa" else [t.eps])}
    labels.update(learned_labels)
    learned = list(learned_labels)
    fitted_authors = authors_attack(spec, chosen, env, victim, preset, skipped)
    fitted += fitted_authors
    authors = [s for s, _ in fitted_authors]
    labels.update({s: "authors' attacker" for s in authors})
    return GauntletPlan(chosen, level, spec, env, preset, victim, sha, seeds, store_path, heuristics, natural, shifts,
                        skipped, tasks, learned, labels, dict(fitted), exhaustive,
                        lstm_directors=set(lstm) != set(own_lstm), authors=authors)


def authors_attack(spec: AgentSpec, protocol: Protocol, env: str, victim, preset: str,
                   skipped: list[dict]) -> list[tuple[str, Threat]]:
    """A published agent's own released attacker at the headline ε (``released_attacker``),
    reported beside the gauntlet's worst case and not part of it (the protocol is the same for
    every agent); none for other agents, or where the user's clone lacks the file (skipped)."""
    if spec.source != "published":
        return []
    from rlgauntlet.published import local_file, release
    from rlgauntlet.threats.spec import quote_value

    entry = release(spec.ref.name)
    if not entry.get("attacker"):
        return []
    try:
        path = local_file(entry, "attacker")
    except UserError as exc:
        skipped.append({"spec": "the authors' attacker", "reason": str(exc)})
        return []
    text = f"released_attacker:path={quote_value(str(path))},eps={protocol.headline_eps}"
    kept, failed = fitting_specs([text], victim, env, preset)
    skipped += [{**row, "spec": "the authors' attacker"} for row in failed]
    return kept
