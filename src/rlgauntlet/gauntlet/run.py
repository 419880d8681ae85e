"""Running the gauntlet: the three phases (the sweep of everything that needs no training, the
learned attackers trained as executor cells and cached, the sweep again with them and one
strongest-of group per ε), then the certification and the false-robustness checks, both cached
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
from rlgauntlet.gauntlet.summary import record_result, summarise

#: what a cached certification or checks file is, in its mark (common.outputs)
CACHE_KIND = "gauntlet cache"


def train_attacker_task(task: AttackerTask) -> dict:
    """Train (or resume) one learned attacker; runs in a worker, writes only its folder."""
    from rlgauntlet.experiments.attackers import train_attacker

    spec = AgentSpec(**dict(task.agent))
    manifest = train_attacker(spec, task.env, task.method, eps=task.eps_value, steps=task.steps, run_dir=task.folder,
                              seed=task.seed, eval_episodes=0, log=lambda line: None, setting=task.setting, select=task.select)
    return {"steps": manifest.get("steps"), "train_seconds": manifest.get("train_seconds")}


def run_gauntlet(agent: str | AgentSpec, env: str, protocol: str | None = None, level: str = "standard",
                 seeds: Sequence[int] | None = None, store: str | Path = "gauntlet.sqlite", executor: str = "local",
                 workers: int = 1, address: str | None = None, method: str | None = None,
                 on_stage: Callable[[str, int, int], None] | None = None,
                 on_advance: Callable[[int], None] | None = None, plan: GauntletPlan | None = None,
                 **load_options) -> dict:
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
        executor, workers, address: where sweep chunks and attacker trainings run.
        method: the label the leaderboard groups agents by (several training seeds of one
            method); default the agent spec.
        on_stage: called with (stage name, done, total) when a stage starts.
        on_advance: called with the work units (episodes, attackers) each finished piece did.
        plan: the :func:`plan_gauntlet` of these arguments, when the caller made it already (the
            CLI plans before it draws progress bars); the agent is then not loaded again.
    """
    from rlgauntlet.common.threads import thread_policy
    from rlgauntlet.common.executors import check_executor, make_executor
    from rlgauntlet.experiments.sweep import run_sweep

    start = time.perf_counter()
    check_executor(executor, workers, address)  # before the store is made or a run row is written
    if plan is None:
        plan = plan_gauntlet(agent, env, protocol, level, seeds, store, **load_options)
    advance = on_advance or (lambda n: None)

    def stage(name: str, total: int, done: int = 0) -> None:
        if on_stage is not None:
            on_stage(name, done, total)

    def sweep(threats: list[str], groups: list[list[str]]) -> dict:
        spec = plan.sweep(threats, groups)
        return run_sweep(spec, plan.store, executor, workers, address,
                         on_plan=lambda p: stage("episodes", p.total_episodes, p.total_episodes - p.missing_episodes),
                         on_chunk=lambda chunk, records: advance(len(records)), resolved=plan.resolved(spec))

    # 1. everything that needs no training, stored before any attacker trains
    base = plan.heuristics + plan.natural + plan.shifts
    sweep(base, [])
    # 2. the learned attackers, cached (a killed training resumes from its checkpoint)
    todo = [t for t in plan.tasks if not t.done()]
    stage("learned attackers", len(plan.tasks), len(plan.tasks) - len(todo))
    if todo:
        with make_executor(executor, workers, address) as pool:
            pool.run(train_attacker_task, todo, lambda task, result: advance(1))
    # 3. the learned attackers' episodes, and one strongest-of group per ε
    plan.parse(plan.learned)  # their specs name trained folders: parsed (once) now that they exist
    groups = plan.strongest_groups()
    reports = sweep(base + plan.learned, groups)["reports"]

    stage("certification and checks", 2)
    with thread_policy(None):
        certified = certified_summary(plan)
        advance(1)
        checks = run_checks(plan)
        advance(1)
    out = {"rlgauntlet_version": __version__, **summarise(plan, reports, method),
           "certified": certified, "checks": checks, "warnings": list(checks.get("warnings", [])),
           "store": str(plan.store)}
    out["seconds"] = round(time.perf_counter() - start, 1)
    record_result(plan, out)
    return out


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
