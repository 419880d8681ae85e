"""The gauntlet: an env family's whole evaluation protocol on one agent, in one call.

:func:`run_gauntlet` takes an agent spec and an env, picks the protocol of the env's family
(:mod:`rlgauntlet.experiments.protocols`, or the one named) and runs it in three phases, all
resumable from the results store:

1. a sweep of everything that needs no training: clean, the heuristic attacks at every ε of
   the grid, the natural suite and the shift grid (episodes stored as they finish);
2. the learned attackers (PA-AD, SA-RL; Robust Sarsa for continuous agents) trained against
   this agent as cells of the same executor (local processes or Ray). Each is cached in the
   store's folder under ``gauntlet-cache/`` by (agent sha256, env, method, ε, seed, protocol
   version, steps): a re-run, or another gauntlet of the same agent, reuses it; a killed
   training resumes from its last checkpoint;
3. the sweep again with the learned attackers added and one strongest-of group per ε.

Then the certification (IBP: GWC and ACR for discrete agents, the certified action deviation
for continuous ones) where the agent can be bounded, and the false-robustness checks
(:mod:`rlgauntlet.experiments.false_robustness`). Both are cached beside the attackers.

The result (:func:`run_gauntlet`'s return value, written as ``gauntlet.json``) holds the protocol
(name, version, level), the agent's identity, the clean return, the worst case per ε (the
lowest mean return over every attack, and the attack that reached it, with every member's
return), the natural, shift and certified summaries, the warnings and the seconds it took. It
is also stored as a ``gauntlet`` run (what ``rlgauntlet leaderboard`` ranks). A store holds one
version of each protocol: results of different versions are never ranked together.

Example:
    >>> result = run_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick",
    ...                       store="runs/gauntlet.sqlite", workers=2)      # doctest: +SKIP
    >>> [(w["eps"], w["attack"]) for w in result["worst_case"]]            # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

import rlgauntlet
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec, as_agent_spec
from rlgauntlet.experiments.protocols import Protocol, protocol_fitting
from rlgauntlet.experiments.store import ResultsStore, run_key

#: the learned attackers' threat names per training method
THREAT_OF_METHOD = {"paad": "paad", "sarl": "sarl", "robust-sarsa": "robust_sarsa"}
CACHE_FOLDER = "gauntlet-cache"
#: what a cached certification or checks file is, in its mark (common.outputs)
CACHE_KIND = "gauntlet cache"


@dataclass(frozen=True)
class AttackerTask:
    """One learned attacker to train (a cell of the executor): everything a worker needs."""

    agent: tuple[tuple[str, object], ...]  # the AgentSpec's fields
    env: str
    method: str
    eps: str  # as written in the protocol (e.g. 1/255)
    eps_value: float
    seed: int
    steps: int
    folder: str
    setting: str = "default"  # the director's PPO settings (Robust Sarsa has none)
    select: str = "last"  # the director checkpoint the attacker is

    @property
    def spec(self) -> str:
        """The threat spec that applies the trained attacker."""
        from rlgauntlet.experiments.attackers import _quoted

        key = "q" if self.method == "robust-sarsa" else "attacker"
        return f"{THREAT_OF_METHOD[self.method]}:{key}={_quoted(Path(self.folder))},eps={self.eps}"

    @property
    def name(self) -> str:
        """The threat, and a director setting other than the default: the attackers of two
        settings are two rows of the results, never pooled."""
        return THREAT_OF_METHOD[self.method] + ("" if self.setting == "default" else f"@{self.setting}")

    @property
    def label(self) -> str:
        """How results name it: :attr:`name` and ε (its folder left out)."""
        return f"{self.name}:eps={self.eps}"

    def done(self) -> bool:
        manifest = Path(self.folder) / "manifest.json"
        if not manifest.is_file():
            return False
        try:
            return int(json.loads(manifest.read_text()).get("steps", 0)) >= (
                0 if self.method == "robust-sarsa" else self.steps)
        except (ValueError, OSError, TypeError):
            return False


def train_attacker_task(task: AttackerTask) -> dict:
    """Train (or resume) one learned attacker; runs in a worker, writes only its folder."""
    from rlgauntlet.experiments.attackers import train_attacker

    spec = AgentSpec(**dict(task.agent))
    manifest = train_attacker(spec, task.env, task.method, eps=task.eps_value, steps=task.steps, run_dir=task.folder,
                              seed=task.seed, eval_episodes=0, log=lambda line: None, allow_pickle=spec.allow_pickle,
                              setting=task.setting, select=task.select)
    return {"steps": manifest.get("steps"), "train_seconds": manifest.get("train_seconds")}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _eps_value(text: str) -> float:
    from rlgauntlet.threats.spec import parse_value

    return float(parse_value(text, f"eps {text}", "eps"))


def _with_eps(spec: str, eps: str) -> str:
    return f"{spec}{',' if ':' in spec else ':'}eps={eps}"


def check_protocol_version(store: ResultsStore, protocol: Protocol) -> None:
    """Refuse a store that holds gauntlet results of another version of ``protocol``."""
    for _, meta in store.runs("gauntlet"):
        if meta.get("protocol") == protocol.name and meta.get("version") != protocol.version:
            raise UserError(f"--store {store.path} holds {protocol.name} gauntlet results of version "
                            f"{meta.get('version')}, and this is version {protocol.version}: results of different "
                            "versions are never ranked together; give a new --store")


def _fits(specs: list[str], victim, env: str, preset: str) -> tuple[list[str], list[dict]]:
    """The specs that apply to this agent and env, and the skipped ones with the reason."""
    from rlgauntlet.experiments.evaluate import checked_threats

    kept, skipped = [], []
    for spec in specs:
        try:
            checked_threats([spec], victim, env, preset)
            kept.append(spec)
        except UserError as exc:
            skipped.append({"spec": spec, "reason": str(exc)})
    return kept, skipped


def _pooled(reports: list[dict], label_of: Callable[[str], str | None]) -> dict[str, dict]:
    """Per label, every seed's episodes pooled: mean, standard error, episodes, and per-seed means."""
    returns: dict[str, list[float]] = {}
    per_seed: dict[str, list[float]] = {}
    for report in reports:
        for ev in report["evaluations"]:
            label = label_of(ev["spec"])
            if label is None:
                continue
            returns.setdefault(label, []).extend(ev["returns"])
            per_seed.setdefault(label, []).append(ev["return_mean"])
    out = {}
    for label, values in returns.items():
        n = len(values)
        out[label] = {"return_mean": float(np.mean(values)),
                      "return_sem": float(np.std(values, ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
                      "episodes": n, "seed_means": per_seed[label]}
    return out


def _shift_curves(rows: dict[str, dict]) -> dict[str, list[dict]]:
    """Shift grids as curves: ``physics:PARAM`` (or a corruption) -> [{x, return_mean, return_sem}]
    in numeric order of the scale (or severity)."""
    from rlgauntlet.threats.suites import shift_point

    curves: dict[str, list[dict]] = {}
    for spec, row in rows.items():
        point = shift_point(spec)
        if point is not None:
            curves.setdefault(point[0], []).append({"x": point[1], "return_mean": row["return_mean"],
                                                    "return_sem": row["return_sem"]})
    return {k: sorted(v, key=lambda p: p["x"]) for k, v in curves.items()}


@dataclass
class GauntletPlan:
    """What a gauntlet will run, decided (and checked against the agent and env) before any work."""

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
    learned: list[str]  # the learned attackers' threat specs
    labels: dict[str, str]  # spec -> how results name it (a learned attacker's without its folder)

    @property
    def settings(self):
        return self.protocol.levels[self.level]

    @property
    def adversarial(self) -> list[str]:
        return self.heuristics + self.learned

    def sweep(self, threats: list[str], groups: list[list[str]]):
        """The sweep of ``threats`` on this agent, with strongest-of ``groups``."""
        from rlgauntlet.experiments.sweep import AgentEntry, SweepSpec

        entry = dict(self.spec.model_dump(), envs=[self.env])
        pickle = entry.pop("allow_pickle")
        agent = AgentEntry(**entry, threats=threats, strongest_of=groups or None)
        if pickle:  # the user's own flag, never a sweep file's
            agent = agent.model_copy(update={"allow_pickle": True})
        return SweepSpec(name=f"gauntlet {self.protocol.tag} {self.level}", agents=[agent], seeds=self.seeds,
                         episodes=self.settings.episodes, chunk_episodes=5, n_envs=1, deterministic=True,
                         impact=True)


def _director_settings(protocol: Protocol, env: str, skipped: list[dict]) -> list[str]:
    """The protocol's director settings that exist for ``env`` (the official code's adversary
    settings exist for four MuJoCo envs); each one missing goes to ``skipped`` with the reason."""
    from rlgauntlet.training.attack_train import director_settings

    kept = []
    for setting in protocol.director_settings:
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
                  seeds: Sequence[int] | None = None, store: str | Path = "gauntlet.sqlite",
                  **load_options) -> GauntletPlan:
    """Load the agent, pick the protocol and level, and list every evaluation and attacker the
    gauntlet runs (entries that do not fit the agent or env are kept in ``skipped`` with the
    reason). Bad input fails here, before any work, with a :class:`UserError`."""
    from rlgauntlet.common.seeding import check_seeds
    from rlgauntlet.experiments.store import check_store_location

    spec = as_agent_spec(agent, **load_options)
    if not isinstance(spec, AgentSpec):
        raise UserError("the gauntlet runs an agent spec (zoo:NAME, sb3:PATH.zip, torchscript:PATH), not a loaded victim")
    chosen = protocol_fitting(protocol, env, spec.preset)
    settings = chosen.level(level)
    seeds = check_seeds(settings.seeds if seeds is None else seeds, settings.episodes)
    store_path = check_store_location(store)
    victim, preset = spec.load(env)
    sha = victim.description.get("sha256") or "unhashed"
    if victim.budget_space is None:
        raise UserError("the agent's input space is unknown, so ε has no unit; pass --input-space")
    if store_path.exists():  # a new store is created by the first sweep, not by a check
        results = ResultsStore(store_path)
        try:
            check_protocol_version(results, chosen)
        finally:
            results.close()

    kinds = list(chosen.heuristics[victim.kind])
    if chosen.push and not victim.is_discrete:
        from rlgauntlet.threats.attacks.push import direction_param, push_directions

        kinds += [f"push:direction={direction_param(d)}" for d in push_directions(victim.action_space.shape[0])]
    heuristics, skipped = _fits([_with_eps(h, e) for e in chosen.eps_grid for h in kinds], victim, env, preset)
    natural: list[str] = []
    if chosen.natural:
        from rlgauntlet.threats.suites import natural_suite

        natural, skipped_natural = _fits(natural_suite(victim, env), victim, env, preset)
        skipped += skipped_natural
    shifts, skipped_shifts = _fits([s for s in chosen.shifts(env, settings.shifts) if s not in natural], victim, env,
                                   preset)
    skipped += skipped_shifts

    learned_eps = [chosen.headline_eps] if settings.learned_at == "headline" else list(chosen.eps_grid)
    cache = store_path.parent / CACHE_FOLDER / sha[:16] / _safe(env)
    options = tuple(sorted(spec.model_dump().items()))
    directors = [(setting, chosen.select) for setting in _director_settings(chosen, env, skipped)]
    tasks = []
    for seed in seeds:
        for m in chosen.learned_methods(victim.is_discrete):
            for e in ([chosen.headline_eps] if m == "robust-sarsa" else learned_eps):
                where = "q" if m == "robust-sarsa" else f"eps{_safe(e)}"
                for setting, select in ([("default", "last")] if m == "robust-sarsa" else directors):
                    how = "".join(f"-{x}" for x in (setting, select) if x not in ("default", "last"))
                    folder = cache / (f"{m}-{where}{how}-seed{seed}-{chosen.name}-v{chosen.version}-"
                                      f"{settings.attacker_steps}steps")
                    tasks.append(AttackerTask(options, env, m, e, _eps_value(e), seed, settings.attacker_steps,
                                              str(folder), setting, select))
    # a Robust Sarsa Q function serves every ε: one training, one MinQ evaluation per learned ε
    labels = {s: s for s in heuristics + natural + shifts}
    learned_labels = {_with_eps(t.spec.rsplit(",eps=", 1)[0], e): f"{t.name}:eps={e}" for t in tasks
                      for e in (learned_eps if t.method == "robust-sarsa" else [t.eps])}
    labels.update(learned_labels)
    learned = list(learned_labels)
    return GauntletPlan(chosen, level, spec, env, preset, victim, sha, seeds, store_path, heuristics, natural, shifts,
                        skipped, tasks, learned, labels)


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
    from rlgauntlet.experiments.executors import make_executor
    from rlgauntlet.experiments.sweep import run_sweep

    from rlgauntlet.experiments.executors import check_executor

    start = time.perf_counter()
    check_executor(executor, workers, address)  # before the store is made or a run row is written
    if plan is None:
        plan = plan_gauntlet(agent, env, protocol, level, seeds, store, **load_options)
    advance = on_advance or (lambda n: None)

    def stage(name: str, total: int, done: int = 0) -> None:
        if on_stage is not None:
            on_stage(name, done, total)

    def sweep(threats: list[str], groups: list[list[str]]) -> dict:
        return run_sweep(plan.sweep(threats, groups), plan.store, executor, workers, address,
                         on_plan=lambda p: stage("episodes", p.total_episodes, p.total_episodes - p.missing_episodes),
                         on_chunk=lambda chunk, records: advance(len(records)))

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
    groups = [g for g in ([s for s in plan.adversarial if _threat_eps(s) == _eps_value(e)]
                          for e in plan.protocol.eps_grid) if len(g) >= 2]
    reports = sweep(base + plan.learned, groups)["reports"]

    stage("certification and checks", 2)
    with thread_policy(None):
        certified = _certified(plan)
        advance(1)
        checks = _checks(plan)
        advance(1)
    out = {"rlgauntlet_version": rlgauntlet.__version__, **_summary(plan, reports, method),
           "certified": certified, "checks": checks, "warnings": list(checks.get("warnings", [])),
           "store": str(plan.store)}
    out["seconds"] = round(time.perf_counter() - start, 1)
    _record(plan, out)
    return out


def _summary(plan: GauntletPlan, reports: list[dict], method: str | None) -> dict:
    """The episodes' part of the result: clean, the worst case per ε, natural and shifts."""
    victim = plan.victim
    pooled = _pooled(reports, lambda s: "clean" if s == "clean" else plan.labels.get(s))
    clean = pooled["clean"]
    worst_case = []
    for e in plan.protocol.eps_grid:
        # an attack within a smaller budget is an attack within this one too: the worst case never rises with ε
        members = {plan.labels[s]: pooled[plan.labels[s]] for s in plan.adversarial
                   if _threat_eps(s) <= _eps_value(e) + 1e-12}
        if not members:
            continue
        attack, best = min(members.items(), key=lambda kv: kv[1]["return_mean"])
        worst_case.append({"eps": e, "eps_value": _eps_value(e), "budget_space": victim.budget_space,
                           "return_mean": best["return_mean"], "return_sem": best["return_sem"],
                           "episodes": best["episodes"], "attack": attack,
                           "members": {k: v["return_mean"] for k, v in members.items()}})
    impacts: dict[str, list[float]] = {}  # Daylight's impact: generalized (fixed minimum) where the env has one
    for report in reports:
        for ev in report["evaluations"]:
            value = ev.get("generalized_impact") if ev.get("generalized_impact") is not None else ev.get("impact")
            if ev["spec"] in plan.natural and value is not None:
                impacts.setdefault(ev["spec"], []).append(value)
    natural = [{"spec": s, **pooled[s], "impact": float(np.mean(impacts[s])) if s in impacts else None}
               for s in plan.natural]
    for row in natural:  # the share of the clean return lost: what continuous-control papers report
        row["return_drop"] = 1.0 - row["return_mean"] / clean["return_mean"] if clean["return_mean"] else None
    known = [r["impact"] for r in natural if r["impact"] is not None]
    drops = [r["return_drop"] for r in natural if r["return_drop"] is not None]
    from rlgauntlet.threats.suites import shift_point

    shifted = {shift_point(s)[0] for s in plan.shifts if shift_point(s) is not None}
    on_grid = [s for s in plan.natural if shift_point(s) is not None and shift_point(s)[0] in shifted]
    shift_rows = {s: pooled[s] for s in plan.shifts + on_grid}  # the natural suite's shift is a grid point too
    return {
        "protocol": {"name": plan.protocol.name, "version": plan.protocol.version, "level": plan.level},
        "agent": {**victim.description, "spec": plan.spec.agent, "sha256": plan.sha, "method": method or plan.spec.agent},
        "env": {"id": plan.env, "preset": plan.preset},
        "budget_space": victim.budget_space, "budget_note": plan.protocol.budget_note,
        "headline_eps": plan.protocol.headline_eps, "seeds": plan.seeds, "episodes_per_seed": plan.settings.episodes,
        "clean": {"return_mean": clean["return_mean"], "return_sem": clean["return_sem"], "episodes": clean["episodes"]},
        "worst_case": worst_case,
        "natural": {"rows": natural, "impact_mean": float(np.mean(known)) if known else None,
                    "return_drop_mean": float(np.mean(drops)) if drops else None,
                    "impact": "generalized impact (Daylight §2.5) where the env has a fixed minimum score, "
                              "impact against the argmin agent otherwise"},
        "shifts": {"rows": [{"spec": s, **r} for s, r in shift_rows.items()], "curves": _shift_curves(shift_rows)},
        "learned_attackers": [{"method": t.method, "eps": t.eps, "seed": t.seed, "steps": t.steps, "folder": t.folder,
                               "setting": t.setting, "select": t.select} for t in plan.tasks],
        "skipped": plan.skipped,
    }


@lru_cache(maxsize=None)
def _threat_eps(spec: str) -> float | None:
    """The budget of a threat spec (parsed once: the summary asks for every spec at every ε)."""
    from rlgauntlet.threats import parse_threat

    return getattr(parse_threat(spec).params, "eps", None)


def _cached(path: Path, compute: Callable[[], dict]) -> dict:
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


def _cache_file(plan: GauntletPlan, what: str) -> Path:
    p = plan.protocol
    return (plan.store.parent / CACHE_FOLDER / plan.sha[:16] / _safe(plan.env) /
            f"{what}-{p.name}-v{p.version}-seed{plan.seeds[0]}-{plan.settings.episodes}ep.json")


def _certified(plan: GauntletPlan) -> dict:
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
        result = certify(plan.spec, plan.env, eps_grid=",".join(plan.protocol.eps_grid), episodes=episodes, seed=seed,
                         store=plan.store)
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

    return _cached(_cache_file(plan, "certified"), compute)


def _checks(plan: GauntletPlan) -> dict:
    from rlgauntlet.envs import make_env
    from rlgauntlet.experiments.false_robustness import check_false_robustness

    env, preset = plan.env, plan.preset
    return _cached(_cache_file(plan, "checks"), lambda: check_false_robustness(
        plan.victim, lambda: make_env(env, preset), [(e, _eps_value(e)) for e in plan.protocol.eps_grid],
        plan.seeds[0]))


def _record(plan: GauntletPlan, out: dict) -> None:
    """Store the result as a ``gauntlet`` run: what the leaderboard ranks."""
    identity = {"protocol": plan.protocol.name, "version": plan.protocol.version, "level": plan.level,
                "agent": plan.spec.agent, "sha256": plan.sha, "env": plan.env, "seeds": plan.seeds,
                "method": out["agent"]["method"],
                "load_options": {k: v for k, v in plan.spec.load_options().items() if v not in (None, False, "auto")}}
    results = ResultsStore(plan.store)
    try:
        key = run_key({**identity, "kind": "gauntlet"})
        run_id = results.latest_run(key) or results.create_run(key, identity, kind="gauntlet")
        clean = out["clean"]
        results.add_metric(run_id, "clean_return", clean["return_mean"], "return")
        for row in out["worst_case"]:
            results.add_metric(run_id, f"worst_case@{row['eps']}", row["return_mean"], f"return ({row['attack']})")
        natural = out["natural"]
        if natural["impact_mean"] is not None:
            results.add_metric(run_id, "natural_impact", natural["impact_mean"], "mean impact of the natural suite")
        else:  # no minimum score to scale by (continuous control): the share of the clean return lost
            results.add_metric(run_id, "natural_impact", natural["return_drop_mean"],
                               "mean share of the clean return the natural suite loses")
        for row in out["certified"].get("rows", []):
            if "acr" in row:
                results.add_metric(run_id, f"acr@{row['eps']}", row["acr"], "fraction of steps")
                results.add_metric(run_id, f"gwc@{row['eps']}", row["gwc"], "return")
        results.add_metric(run_id, "warnings", len(out["warnings"]), "false-robustness warnings")
        results.add_wall_seconds(run_id, out["seconds"])
    finally:
        results.close()
