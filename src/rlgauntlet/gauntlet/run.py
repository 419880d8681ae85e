"""Running the gauntlet: the three phases (the episodes of everything that needs no training,
the learned attackers trained as executor cells and cached, then their episodes and one
strongest-of group per ε), all planned as cells (:mod:`rlgauntlet.experiments.cells`) from the
plan's one loaded agent and parsed threats, then the certification and the false-robustness checks, both cached
beside the store; the result is written to the store (:mod:`rlgauntlet.gauntlet.summary`).

Example:
    >>> result = run_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick",
    ...                       store="runs/gauntlet.sqlite", workers=2)      # doctest: +SKIP
    >>> [(w["eps"], w["attack"]) for w in result["worst_case"]]            # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from rlgauntlet.version import __version__
from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.gauntlet.cache import cache_file, cached, continue_shorter
from rlgauntlet.gauntlet.outcome import Outcome
from rlgauntlet.gauntlet.plan import AttackerTask, GauntletPlan, eps_value, plan_gauntlet
from rlgauntlet.gauntlet.race import RaceResult
from rlgauntlet.threats.base import Threat
from rlgauntlet.gauntlet.summary import (authors_stronger, headline_of, learned_means, pool_episodes, record_result,
                                        summarise)
from rlgauntlet.gauntlet.transfer import transfer_members

#: episodes per chunk (the unit of work an executor hands a worker), stepped side by side as one
#: batch of envs: one batched forward per step. Fixed, because a batch of another size can round a
#: forward pass's last bits differently, which a chaotic env amplifies (docs/decisions.md, "An
#: episode depends on its batch"): the same chunks give the same numbers
CHUNK_EPISODES = 5


#: seconds between two reads of the training directors' checkpoints (for the progress bar only)
PROGRESS_POLL_SECONDS = 10.0


class TrainingProgress:
    """The learned attackers' progress in director steps while an executor trains them: every
    ``poll_seconds`` a thread reads each task's last checkpoint (:meth:`AttackerTask.steps_done`;
    the workers write only their folders) and ``advance`` gets the steps gained; when a task
    finishes (:meth:`finished`, the executor's ``on_done``) the rest of its budget is counted, as
    an early stop ends its work. Where the folders are not visible (Ray on another machine) the
    bar moves as tasks finish.

    Example:
        >>> with TrainingProgress(todo, advance) as training:              # doctest: +SKIP
        ...     pool.run(train_attacker_task, todo, training.finished)
    """

    def __init__(self, tasks: Sequence[AttackerTask], advance: Callable[[int], None],
                 poll_seconds: float = PROGRESS_POLL_SECONDS) -> None:
        import threading

        self.tasks, self.advance, self.poll_seconds = list(tasks), advance, poll_seconds
        self.counted = {id(t): t.steps_done() for t in self.tasks}  # steps already on the bar
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._poll, name="rlgauntlet-training-progress", daemon=True)

    @property
    def left(self) -> int:
        """The steps not yet on the bar."""
        with self._lock:
            return sum(t.steps - self.counted[id(t)] for t in self.tasks)

    def _count(self, task: AttackerTask, steps: int) -> None:
        with self._lock:
            gained = min(steps, task.steps) - self.counted[id(task)]
            if gained > 0:
                self.counted[id(task)] += gained
                self.advance(gained)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            for task in self.tasks:
                if self.counted[id(task)] < task.steps:
                    self._count(task, task.steps_done())

    def finished(self, task: AttackerTask, result: object = None) -> None:
        """``task`` is trained: the rest of its budget is done."""
        self._count(task, task.steps)

    def __enter__(self) -> "TrainingProgress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def longest_first(tasks: Sequence[AttackerTask]) -> list[AttackerTask]:
    """``tasks`` in the order a pool should start them: the largest step budget left first, ties in
    the plan's order. Started in the plan's order, a board's last agent's 2M-step director began
    when the others were nearly done and trained alone at the end while the other workers idled.
    Each director's training depends only on its own task (its folder, seed and budget), so the
    order changes when a board finishes, never what it computes.

    Example:
        >>> from types import SimpleNamespace as T
        >>> [t.folder for t in longest_first([T(folder="a", steps=200_000, steps_done=lambda: 0),
        ...                                   T(folder="b", steps=2_000_000, steps_done=lambda: 0),
        ...                                   T(folder="c", steps=1_000_000, steps_done=lambda: 900_000)])]
        ['b', 'a', 'c']
    """
    return sorted(tasks, key=lambda task: task.steps - task.steps_done(), reverse=True)


def train_attacker_task(task: AttackerTask) -> dict:
    """Train (or resume) one learned attacker; runs in a worker, writes only its folder."""
    from rlgauntlet.experiments.attacker_job import train_attacker

    if task.first_stage is not None:  # the shorter budget's director first, exactly as its version trains it
        folder, steps, patience, patience_from, eps = task.first_stage
        stage = replace(task, folder=folder, steps=steps, patience=patience, patience_from=patience_from, eps=eps,
                        eps_value=eps_value(eps), first_stage=None)
        if not stage.done():
            train_attacker_task(stage)
        continue_shorter(Path(task.folder), Path(folder), eps=task.eps_value)
    manifest = train_attacker(task.agent, task.env, task.method, eps=task.eps_value, steps=task.steps, run_dir=task.folder,
                              seed=task.seed, eval_episodes=0, log=lambda line: None, setting=task.ppo_settings, select=task.select,
                              patience=task.patience, recurrent=task.recurrent, patience_from=task.patience_from)
    return {"steps": manifest.get("steps"), "train_seconds": manifest.get("train_seconds")}


def run_gauntlet(agent: str | AgentSpec, env: str, protocol: str | None = None, level: str = "standard",
                 seeds: Sequence[int] | None = None, store: str | Path = "gauntlet.sqlite", executor: str = "local",
                 workers: int = 1, address: str | None = None, method: str | None = None,
                 on_stage: Callable[[str, int, int], None] | None = None,
                 on_advance: Callable[[int], None] | None = None, plan: GauntletPlan | None = None,
                 exhaustive: bool = False, lstm_directors: bool = False, confirm_episodes: int = 0,
                 **load_options) -> dict:
    """Run the protocol of ``env``'s family (or ``protocol``) at ``level`` on ``agent``.

    Args:
        agent: an agent name (:data:`~rlgauntlet.victims.agent_ref.AGENT_FORMS`) or an :class:`AgentSpec`;
            ``load_options`` (vecnormalize, kind, input_space, precision, device, allow_pickle)
            apply to a spec string.
        protocol: a protocol name (default: the env family's).
        level: ``quick``, ``standard`` or ``paper``.
        seeds: evaluation seeds (default: the level's); episode k of seed s uses env seed s + k,
            and the learned attackers of seed s are trained with seed s.
        store: the results store (a path); attackers and cached checks go beside it.
        executor, workers, address: where episode chunks and attacker trainings run.
        method: the label the leaderboard groups agents by (several training seeds of one
            method); default the agent spec.
        on_stage: called with (stage name, done, total) when a stage starts.
        on_advance: called with the work units (episodes, attackers) each finished piece did.
        plan: the :func:`plan_gauntlet` of these arguments, when the caller made it already (the
            CLI plans before it draws progress bars); the agent is then not loaded again.
        exhaustive: run every heuristic member in full instead of racing them (a check of the
            race: the worst case of both should agree within a standard error).
        lstm_directors: train an LSTM director of every director method for this agent too (the
            protocol plans them for recurrent agents).
        confirm_episodes: run clean and the headline worst case's attack on to this many episodes
            per seed (a paper's sample size, 50 for most MuJoCo papers) and report them as
            ``confirmed``, beside the protocol's numbers (:func:`confirm_headlines`); 0: not.
    """
    from rlgauntlet.common.executors import check_executor

    check_executor(executor, workers, address)  # before the store is made or a run row is written
    if plan is None:
        plan = plan_gauntlet(agent, env, protocol, level, seeds, store, exhaustive, lstm_directors, **load_options)
    [out] = run_plans([plan], executor, workers, address, [method], on_stage, on_advance, confirm_episodes)
    return out


def run_plans(plans: list[GauntletPlan], executor: str = "local", workers: int = 1, address: str | None = None,
              methods: Sequence[str | None] | None = None, on_stage: Callable[[str, int, int], None] | None = None,
              on_advance: Callable[[int], None] | None = None, confirm_episodes: int | Sequence[int] = 0) -> list[dict]:
    """Run several gauntlets (a board: one :func:`plan_gauntlet` per agent) as one plan: each
    phase's cells of every agent go to the executor together, so that every worker stays busy
    across agents; then each agent's certification, checks and result. Returns one result per
    plan, in order (``methods``: each plan's leaderboard label, default its agent spec).

    ``confirm_episodes`` (one for all plans, or one per plan; 0: none): where it exceeds the
    level's episodes, clean and the headline worst case's attack run on to that many episodes per
    seed, a paper's sample size, and the result gains ``confirmed`` (:func:`confirm_headlines`).
    """
    from contextlib import ExitStack

    from rlgauntlet.common.executors import OnDemandExecutor
    from rlgauntlet.common.threads import thread_policy
    from rlgauntlet.experiments.cells import cell_report, run_chunks
    from rlgauntlet.experiments.store import store_of

    confirm = [confirm_episodes] * len(plans) if isinstance(confirm_episodes, int) else list(confirm_episodes)
    if len(confirm) != len(plans):  # before a store is opened or anything runs
        raise ValueError(f"confirm_episodes gives {len(confirm)} counts for {len(plans)} plans: give one per plan, "
                         "or one int for all")
    start = time.perf_counter()
    methods = list(methods or [None] * len(plans))
    advance = on_advance or (lambda n: None)

    def stage(name: str, total: int, done: int = 0) -> None:
        if on_stage is not None:
            on_stage(name, done, total)

    def run(pool, results, chunks: list) -> None:
        run_chunks(chunks, results, on_chunk=lambda chunk, records: advance(len(records)), pool=pool)

    with ExitStack() as stack:
        # one connection per store, and one set of workers for every phase of every agent: a worker
        # keeps the agents it loaded from one phase to the next
        opened: dict[Path, object] = {}
        for plan in plans:
            if plan.store not in opened:
                opened[plan.store] = stack.enter_context(store_of(plan.store))
        store = [opened[plan.store] for plan in plans]
        pool = stack.enter_context(OnDemandExecutor(executor, workers, address))

        outcomes = [Outcome(plan) for plan in plans]  # what each plan's run finds, phase by phase

        def episodes(specs_of: Callable[[Outcome], list[str]]) -> list[list]:
            """Run whatever episodes of each plan's specs its store lacks, all plans at once."""
            cell_sets = [outcome.cells(results, specs_of(outcome)) for outcome, results in zip(outcomes, store)]
            total = sum(len(c.cells) * plan.settings.episodes for sets, plan in zip(cell_sets, plans) for c in sets)
            stage("episodes", total, total - sum(c.missing_episodes for sets in cell_sets for c in sets))
            for sets, results in _by_store(cell_sets, store):
                run(pool, results, [chunk for cells in sets for chunk in cells.chunks(CHUNK_EPISODES, CHUNK_EPISODES)])
            return cell_sets

        def race(races: list[tuple[int, "Race"]], name: str) -> dict[int, RaceResult]:
            """Run the races round by round, every agent's round in one executor call; each one's result."""
            results_of: dict[int, RaceResult] = {}
            for _, member in races:
                member.start()
            while races:
                rounds = []
                for index, member in races:
                    step = member.next_round()
                    if step is not None:
                        rounds.append((index, member, step))
                    else:
                        results_of[index] = member.result
                if not rounds:
                    break
                stage(name, sum(r[2][1] for r in rounds), sum(r[2][2] for r in rounds))
                per_store: dict[int, tuple[object, list]] = {}
                for _, member, (chunks, _, _) in rounds:
                    per_store.setdefault(id(member.store), (member.store, []))[1].extend(chunks)
                for results, chunks in per_store.values():
                    run(pool, results, chunks)
                races = [(index, member) for index, member, _ in rounds]
            return results_of

        # 1. the race of the heuristic members on selection episodes (every agent's round together),
        #    then the finalists and everything else that needs no training, before any attacker trains
        raced = race([(index, Race(plan, results)) for index, (plan, results) in enumerate(zip(plans, store))
                      if plan.racing], "race")
        outcomes = [outcome.raced(raced[index]) if index in raced else outcome for index, outcome in enumerate(outcomes)]

        def base(outcome: Outcome) -> list[str]:
            plan = outcome.plan
            return outcome.finalists + plan.natural + plan.shifts + plan.authors

        episodes(base)
        # 2. the learned attackers of every agent, cached (a killed training resumes from its checkpoint)
        #    in director steps, so that a board's hours of training show how far they are and an ETA
        tasks = [t for plan in plans for t in plan.tasks]
        training = TrainingProgress(longest_first([t for t in tasks if not t.done()]), advance)
        budget = sum(t.steps for t in tasks)
        stage("learned attackers", budget, budget - training.left)  # the steps read once, for both
        if training.tasks:
            with training:
                pool.run(train_attacker_task, training.tasks, training.finished)
        # 3. the learned attackers' episodes, and one strongest-of group per ε
        outcomes = [outcome.trained() for outcome in outcomes]  # their specs name trained folders: parsed now
        final = episodes(lambda outcome: base(outcome) + outcome.plan.learned)
        reports = [[cell_report(cells, results, outcome.strongest_groups()) for cells in sets]
                   for outcome, results, sets in zip(outcomes, store, final)]
        # 4. on a board, each agent's strongest directors as members of the other agents' gauntlets
        #    on the same env (gauntlet.transfer): raced as the heuristic members, the finalists in full
        means = [learned_means(o, r) for o, r in zip(outcomes, reports)]
        members = transfer_members(plans, means)
        if any(members):
            versions = sorted({v for plan in plans for v in plan.protocol.replays}, reverse=True)
            earlier = {v: transfer_members(plans, means, replayed=v) for v in versions}
            outcomes = [outcome.with_transfer(m, {v: earlier[v][index] for v in versions})
                        for index, (outcome, m) in enumerate(zip(outcomes, members))]
            raced = race([(index, Race(o.plan, results, o.transfer_groups(), o.transferred))
                          for index, (o, results) in enumerate(zip(outcomes, store)) if o.transfer and o.plan.racing],
                         "transferred directors' race")
            # each earlier version's race over its own members, from the same selection episodes: their
            # finalists run too, so that this version is never weaker than those (gauntlet.transfer)
            replayed = {v: race([(index, Race(o.plan, results, o.transfer_groups(v), o.transferred))
                                 for index, (o, results) in enumerate(zip(outcomes, store))
                                 if v in o.replayed_versions and o.plan.racing], f"v{v}'s transfer race, replayed")
                        for v in versions}
            outcomes = [replace(o, transfer_race=raced.get(index, o.transfer_race),
                                earlier_transfer_races=MappingProxyType(
                                    {v: replayed[v][index] for v in versions if index in replayed[v]}))
                        for index, o in enumerate(outcomes)]
            final = episodes(lambda outcome: base(outcome) + outcome.plan.learned + outcome.transfer_finalists)
            reports = [[cell_report(cells, results, outcome.strongest_groups()) for cells in sets]
                       for outcome, results, sets in zip(outcomes, store, final)]
        summaries = [summarise(outcome, plan_reports, method)
                     for outcome, method, plan_reports in zip(outcomes, methods, reports)]
        # 5. a paper's sample size, where asked: the headline worst case run on, beside it
        confirm_headlines(outcomes, summaries, confirm, store, lambda total, done: stage("confirmation", total, done),
                          lambda results, chunks: run(pool, results, chunks))

    stage("certification and checks", 2 * len(plans))
    outs = []
    for outcome, summary in zip(outcomes, summaries):
        plan = outcome.plan
        with thread_policy(None):
            certified = certified_summary(plan)
            advance(1)
            checks = run_checks(plan)
            advance(1)
        out = {"rlgauntlet_version": __version__, **summary, "certified": certified, "checks": checks,
               "warnings": list(checks.get("warnings", [])) + authors_stronger(summary), "store": str(plan.store)}
        resumed = outcome.inexact_resumes()
        if resumed:  # a number from such a director is one sample of it: said beside the numbers
            out["directors_resumed_inexactly"] = resumed
        out["seconds"] = round(time.perf_counter() - start, 1)
        record_result(plan, out)
        outs.append(out)
    return outs


def confirm_headlines(outcomes: list[Outcome], summaries: list[dict], confirm: Sequence[int], stores: list,
                      on_stage: Callable[[int, int], None], run: Callable[[object, list], None]) -> None:
    """Each plan's clean return and headline worst case at ``confirm[i]`` episodes per seed, a
    paper's sample size, as ``summaries[i]["confirmed"]``: the worst case's attack and clean run on
    in the store runs the protocol's episodes are in (their first episodes are those, so nothing
    runs twice and the protocol's own numbers do not move). The attack is the one the race and the
    level's episodes chose, so this is that attack measured again, not the worst case re-chosen:
    beside the worst case, never instead of it. Plans with ``confirm[i]`` at or below the level's
    episodes, or without a headline worst case, are left as they are.

    ``on_stage(total, done)`` is told the episodes once; ``run(store, chunks)`` runs chunks."""
    from rlgauntlet.experiments.cells import cell_report

    asked = {i: headline_of(summaries[i]) for i, outcome in enumerate(outcomes)
             if confirm[i] > outcome.plan.settings.episodes and headline_of(summaries[i])}
    if not asked:
        return
    sets = {i: outcomes[i].cells(stores[i], [asked[i]["spec"]], confirm[i], impact=False) for i in asked}
    total = sum(len(cells.cells) * cells.episodes for cell_sets in sets.values() for cells in cell_sets)
    on_stage(total, total - sum(cells.missing_episodes for cell_sets in sets.values() for cells in cell_sets))
    for cell_sets, results in _by_store(list(sets.values()), [stores[i] for i in sets]):
        run(results, [chunk for cells in cell_sets for chunk in cells.chunks(CHUNK_EPISODES, CHUNK_EPISODES)])
    for i, cell_sets in sets.items():
        pooled = pool_episodes([cell_report(cells, stores[i], impact=False) for cells in cell_sets], lambda spec: spec)
        figures = ("return_mean", "return_sem", "episodes")
        summaries[i]["confirmed"] = {
            "episodes_per_seed": confirm[i], "clean": {k: pooled["clean"][k] for k in figures},
            "worst_case": {"eps": asked[i]["eps"], "attack": asked[i]["attack"],
                           **{k: pooled[asked[i]["spec"]][k] for k in figures}}}


def _by_store(cell_sets: list[list], stores: list) -> list[tuple[list, object]]:
    """The plans' cell sets grouped by the store they are written to (one executor call each)."""
    groups: dict[int, tuple[list, object]] = {}
    for sets, results in zip(cell_sets, stores):
        groups.setdefault(id(results), ([], results))[0].extend(sets)
    return list(groups.values())


class Race:
    """The race of one plan (:mod:`rlgauntlet.gauntlet.race`), one round at a time, so that a
    board runs every agent's round in one executor call: :meth:`next_round` gives the round's
    selection chunks the store lacks (with its counts), and once the caller has run them and asks
    again, decides which members go on; None when the race is over, and :attr:`result` then holds
    what it decided. The plan is only read."""

    def __init__(self, plan: GauntletPlan, store, groups: list[tuple[str, list[str]]] | None = None,
                 extra: Mapping[str, Threat] = MappingProxyType({})) -> None:
        """``groups``: (ε, members) raced together, default the plan's heuristic members
        (:meth:`GauntletPlan.race_groups`); ``extra``: the threats of members the plan does not hold."""
        self.plan, self.store = plan, store
        self.groups = plan.race_groups() if groups is None else groups
        self.extra = extra
        self.result: RaceResult | None = None
        self._rounds = None

    def start(self) -> None:
        self._rounds = self._run()

    def next_round(self) -> tuple[list, int, int] | None:
        if self._rounds is None:
            self.start()
        return next(self._rounds, None)

    def _run(self):
        plan, store = self.plan, self.store
        rule = plan.protocol.race
        groups = [group for _, group in self.groups]
        alive = {spec: True for group in groups for spec in group}
        dropped: dict[str, str] = {}
        record = {spec: {"member": spec, "eps": eps, "episodes": 0, "dropped_after_round": None, "reason": None}
                  for eps, group in self.groups for spec in group}
        rounds = rule.rounds(plan.settings.episodes)
        for round_index, episodes in enumerate(rounds):
            racing = [s for s in alive if alive[s]]
            cells = plan.selection_cells(store, racing, episodes, self.extra)
            total = len(cells.cells) * episodes
            yield cells.chunks(CHUNK_EPISODES, CHUNK_EPISODES), total, total - cells.missing_episodes
            returns = {cell.spec: [r.episode_return for r in store.episodes(cells.run_ids[cell], limit=episodes)]
                       for cell in cells.cells}
            for group in groups:
                in_race = {s: returns[s] for s in group if alive[s]}
                for spec in in_race:
                    record[spec]["episodes"] = episodes
                    record[spec]["selection_mean"] = float(sum(in_race[spec]) / len(in_race[spec]))
                for spec, reason in rule.decide(in_race, last=round_index == len(rounds) - 1).items():
                    alive[spec] = False
                    dropped[spec] = reason
                    record[spec].update(dropped_after_round=round_index, reason=reason)
        self.result = RaceResult(dropped, tuple(record.values()))


def run_race(plan: GauntletPlan, store, run_round: Callable[[list, int, int], object]) -> RaceResult:
    """Race the heuristic members of each ε (:mod:`rlgauntlet.gauntlet.race`): every round, the
    members still in run their selection episodes (``run_round(chunks, total, done)`` runs the
    chunks the store lacks: a re-run continues the race where it stopped), then each ε drops the
    members far above its best. Returns what the race decided."""
    race = Race(plan, store)
    while (step := race.next_round()) is not None:
        run_round(*step)
    return race.result


def certified_summary(plan: GauntletPlan) -> dict:
    """IBP certification at every ε of the grid (cached), or why the agent cannot be bounded."""
    from rlgauntlet.experiments.certify import certify

    if not plan.protocol.certify:
        return {"available": False, "reason": "the protocol certifies nothing"}
    try:
        plan.victim.layer_chain()
    except NotImplementedError as exc:
        return {"available": False, "reason": f"this agent cannot be bounded: {exc}"}
    seed, episodes = plan.seeds[0], plan.settings.episodes

    def compute() -> dict:
        result = certify(plan.victim, plan.env, eps_grid=",".join(plan.protocol.eps_grid), episodes=episodes, seed=seed,
                         store=plan.store, preset=plan.preset)  # the plan's loaded agent: not loaded again
        rows = []
        for row in result["rows"]:
            item = {"eps": row["eps"], "eps_value": row["eps_value"], "budget_space": row["budget_space"],
                    "nominal": row["nominal"]}
            if "acr" in row:
                item.update(acr=row["acr"], gwc=row["gwc"]["return_mean"], gwc_sem=row["gwc"]["return_sem"])
            else:
                item["certified_action_deviation"] = row["certified_action_deviation"]
            rows.append(item)
        return {"available": True, "seed": seed, "episodes": episodes, "rows": rows}

    return cached(cache_file(plan, "certified"), compute)


def run_checks(plan: GauntletPlan) -> dict:
    from rlgauntlet.envs import make_env
    from rlgauntlet.gauntlet.checks import check_false_robustness

    env, preset = plan.env, plan.preset
    return cached(cache_file(plan, "checks"), lambda: check_false_robustness(
        plan.victim, lambda: make_env(env, preset), [(e, eps_value(e)) for e in plan.protocol.eps_grid],
        plan.seeds[0]))
