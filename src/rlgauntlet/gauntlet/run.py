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

import json
import time
from pathlib import Path
from typing import Callable, Sequence

from rlgauntlet.version import __version__
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.gauntlet.plan import AttackerTask, GauntletPlan, agent_cache, eps_value, plan_gauntlet
from rlgauntlet.gauntlet.summary import authors_stronger, record_result, summarise

#: episodes per chunk (the unit of work an executor hands a worker), stepped side by side as one
#: batch of envs: one batched forward per step (the episodes do not depend on it)
CHUNK_EPISODES = 5
#: what a cached certification or checks file is, in its mark (common.outputs)
CACHE_KIND = "gauntlet cache"


def train_attacker_task(task: AttackerTask) -> dict:
    """Train (or resume) one learned attacker; runs in a worker, writes only its folder."""
    from rlgauntlet.experiments.attackers import train_attacker

    manifest = train_attacker(task.agent, task.env, task.method, eps=task.eps_value, steps=task.steps, run_dir=task.folder,
                              seed=task.seed, eval_episodes=0, log=lambda line: None, setting=task.setting, select=task.select,
                              patience=task.patience)
    return {"steps": manifest.get("steps"), "train_seconds": manifest.get("train_seconds")}


def run_gauntlet(agent: str | AgentSpec, env: str, protocol: str | None = None, level: str = "standard",
                 seeds: Sequence[int] | None = None, store: str | Path = "gauntlet.sqlite", executor: str = "local",
                 workers: int = 1, address: str | None = None, method: str | None = None,
                 on_stage: Callable[[str, int, int], None] | None = None,
                 on_advance: Callable[[int], None] | None = None, plan: GauntletPlan | None = None,
                 exhaustive: bool = False, **load_options) -> dict:
    """Run the protocol of ``env``'s family (or ``protocol``) at ``level`` on ``agent``.

    Args:
        agent: ``zoo:NAME``, ``sb3:PATH.zip``, ``torchscript:PATH`` or an :class:`AgentSpec`;
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
    """
    from rlgauntlet.common.executors import check_executor

    check_executor(executor, workers, address)  # before the store is made or a run row is written
    if plan is None:
        plan = plan_gauntlet(agent, env, protocol, level, seeds, store, exhaustive, **load_options)
    [out] = run_plans([plan], executor, workers, address, [method], on_stage, on_advance)
    return out


def run_plans(plans: list[GauntletPlan], executor: str = "local", workers: int = 1, address: str | None = None,
              methods: Sequence[str | None] | None = None, on_stage: Callable[[str, int, int], None] | None = None,
              on_advance: Callable[[int], None] | None = None) -> list[dict]:
    """Run several gauntlets (a board: one :func:`plan_gauntlet` per agent) as one plan: each
    phase's cells of every agent go to the executor together, so that every worker stays busy
    across agents; then each agent's certification, checks and result. Returns one result per
    plan, in order (``methods``: each plan's leaderboard label, default its agent spec)."""
    from contextlib import ExitStack

    from rlgauntlet.common.executors import OnDemandExecutor
    from rlgauntlet.common.threads import thread_policy
    from rlgauntlet.experiments.cells import cell_report, run_chunks
    from rlgauntlet.experiments.store import store_of

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

        def episodes(specs_of: Callable[[GauntletPlan], list[str]]) -> list[list]:
            """Run whatever episodes of each plan's specs its store lacks, all plans at once."""
            cell_sets = [plan.cells(results, specs_of(plan)) for plan, results in zip(plans, store)]
            total = sum(len(c.cells) * plan.settings.episodes for sets, plan in zip(cell_sets, plans) for c in sets)
            stage("episodes", total, total - sum(c.missing_episodes for sets in cell_sets for c in sets))
            for sets, results in _by_store(cell_sets, store):
                run(pool, results, [chunk for cells in sets for chunk in cells.chunks(CHUNK_EPISODES, CHUNK_EPISODES)])
            return cell_sets

        # 1. the race of the heuristic members on selection episodes (every agent's round together),
        #    then the finalists and everything else that needs no training, before any attacker trains
        races = [(race_rounds(plan, results), results) for plan, results in zip(plans, store) if plan.racing]
        while races:
            rounds = []
            for race, results in races:
                step = next(race, None)
                if step is not None:
                    rounds.append((race, results, step))
            if not rounds:
                break
            total, done = sum(r[2][1] for r in rounds), sum(r[2][2] for r in rounds)
            stage("race", total, done)
            per_store: dict[int, tuple[object, list]] = {}  # every agent's round in one executor call
            for _, results, (chunks, _, _) in rounds:
                per_store.setdefault(id(results), (results, []))[1].extend(chunks)
            for results, chunks in per_store.values():
                run(pool, results, chunks)
            races = [(race, results) for race, results, _ in rounds]
        base = {id(plan): plan.finalists + plan.natural + plan.shifts + plan.authors for plan in plans}
        episodes(lambda plan: base[id(plan)])
        # 2. the learned attackers of every agent, cached (a killed training resumes from its checkpoint)
        tasks = [t for plan in plans for t in plan.tasks]
        todo = [t for t in tasks if not t.done()]
        stage("learned attackers", len(tasks), len(tasks) - len(todo))
        if todo:
            pool.run(train_attacker_task, todo, lambda task, result: advance(1))
        # 3. the learned attackers' episodes, and one strongest-of group per ε
        for plan in plans:
            plan.parse(plan.learned)  # their specs name trained folders: parsed (once) now that they exist
        final = episodes(lambda plan: base[id(plan)] + plan.learned)
        reports = [[cell_report(cells, results, plan.strongest_groups()) for cells in sets]
                   for plan, results, sets in zip(plans, store, final)]

    stage("certification and checks", 2 * len(plans))
    outs = []
    for plan, method, plan_reports in zip(plans, methods, reports):
        with thread_policy(None):
            certified = certified_summary(plan)
            advance(1)
            checks = run_checks(plan)
            advance(1)
        summary = summarise(plan, plan_reports, method)
        out = {"rlgauntlet_version": __version__, **summary, "certified": certified, "checks": checks,
               "warnings": list(checks.get("warnings", [])) + authors_stronger(summary), "store": str(plan.store)}
        out["seconds"] = round(time.perf_counter() - start, 1)
        record_result(plan, out)
        outs.append(out)
    return outs


def _by_store(cell_sets: list[list], stores: list) -> list[tuple[list, object]]:
    """The plans' cell sets grouped by the store they are written to (one executor call each)."""
    groups: dict[int, tuple[list, object]] = {}
    for sets, results in zip(cell_sets, stores):
        groups.setdefault(id(results), ([], results))[0].extend(sets)
    return list(groups.values())


def race_rounds(plan: GauntletPlan, store):
    """The race of :func:`run_race` one round at a time: yields ``(chunks, total, done)`` (the
    round's selection episodes the store lacks, and its counts), and once the caller has run them
    and asks for the next round, decides which members go on. Fills ``plan.dropped`` and
    ``plan.race`` when it ends."""
    rule = plan.protocol.race
    groups = plan.race_groups()
    alive = {spec: True for group in groups for spec in group}
    record = {spec: {"member": spec, "eps": eps, "episodes": 0, "dropped_after_round": None, "reason": None}
              for eps, group in zip(_group_eps(plan, groups), groups) for spec in group}
    rounds = rule.rounds(plan.settings.episodes)
    for round_index, episodes in enumerate(rounds):
        racing = [s for s in alive if alive[s]]
        cells = plan.selection_cells(store, racing, episodes)
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
                plan.dropped[spec] = reason
                record[spec].update(dropped_after_round=round_index, reason=reason)
    plan.race = list(record.values())


def run_race(plan: GauntletPlan, store, run_round: Callable[[list, int, int], object]) -> None:
    """Race the heuristic members of each ε (:mod:`rlgauntlet.gauntlet.race`): every round, the
    members still in run their selection episodes (``run_round(chunks, total, done)`` runs the
    chunks the store lacks: a re-run continues the race where it stopped), then each ε drops the
    members far above its best. Fills ``plan.dropped`` and ``plan.race``."""
    for chunks, total, done in race_rounds(plan, store):
        run_round(chunks, total, done)


def _group_eps(plan: GauntletPlan, groups: list[list[str]]) -> list[str]:
    """The ε (as the protocol writes it) of each race group."""
    by_value = {eps_value(e): e for e in plan.protocol.eps_grid}
    return [by_value[plan.eps_of(group[0])] for group in groups]


def cached(path: Path, compute: Callable[[], dict]) -> dict:
    """``compute()``, or what an earlier call wrote to ``path`` (a cache file of ours: marked; an
    earlier version's unmarked kind is read too). Any other file there is never replaced."""
    from rlgauntlet.common.outputs import JSON_KIND_KEY, output_kind, write_json

    if path.exists():
        kind = output_kind(path)
        if kind not in (CACHE_KIND, ""):
            raise UserError(f"{path} is in the gauntlet's cache folder but is not a cache file rlgauntlet wrote; it "
                            f"was left untouched: move it away, or give another --store")
        data = json.loads(path.read_text())
        return {k: v for k, v in data.items() if k not in ("generator", JSON_KIND_KEY)}
    data = compute()
    write_json(path, data, kind=CACHE_KIND)
    return data


def cache_file(plan: GauntletPlan, what: str) -> Path:
    """Where the ``what`` (certified, checks) result of ``plan`` is cached, beside its attackers."""
    p = plan.protocol
    return agent_cache(plan.store, plan.sha, plan.env) / \
        f"{what}-{p.name}-v{p.version}-seed{plan.seeds[0]}-{plan.settings.episodes}ep.json"


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
