"""Sweeps: agents × envs × threats × budgets × seeds, split into episode chunks, run by an
executor, written to one results store, always resumable.

A sweep file (YAML, validated by :class:`SweepSpec`; JSON schema in docs/sweep.schema.json)
names what to evaluate. :func:`plan_sweep` loads every agent once (checking it fits its env
and that every threat fits both), expands suites and budget grids into *cells* (one cell =
one evaluation run: agent × env × threat spec × seed) and finds or creates each cell's run
in the store, by the same key ``rlgauntlet evaluate --resume`` uses. The episodes a cell's
run lacks are cut into *chunks* of episode indices; because episode k always uses env seed
``seed + k``, a chunk gives the same episodes in any process, in any order. Executors
(:mod:`rlgauntlet.common.executors`) run :func:`run_chunk` on the chunks; only the
driver writes the store, a chunk's episodes as soon as the chunk returns. Re-running a sweep
on the same store runs only the episodes still missing, so a killed driver or worker loses at
most the chunks in flight and duplicates nothing (``(run_id, episode)`` is the store's key).

Example:
    >>> spec = SweepSpec.model_validate({"agents": ["zoo:cartpole-ppo"], "threats": ["uniform_noise"],
    ...                                  "eps_grid": "0.1,0.2", "episodes": 4})
    >>> spec.agents[0].agent, spec.seeds, spec.chunk_episodes
    ('zoo:cartpole-ppo', [0], 5)
    >>> result = run_sweep(spec, "sweep.sqlite", workers=2)              # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.common.executors import EXECUTOR_NAMES
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec, FileAgentSpec, agent_entries
from rlgauntlet.experiments.cells import (Cell, CellSet, Chunk, cell_report, open_cells, run_chunk,  # noqa: F401
                                          run_chunks, write_chunk)
from rlgauntlet.experiments.store import ResultsStore, store_of

EXECUTORS = EXECUTOR_NAMES


def _grid_text(value: object) -> object:
    """``[0.1, "2/255"]`` → ``"0.1,2/255"``: a budget grid may be a YAML list or the CLI's text."""
    if isinstance(value, bool):
        return value  # refused by the str field: true is not a budget
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, (int, float)):  # an unquoted YAML number: eps: 0.05
        return repr(value)
    return value


def _group_lists(value: object) -> object:
    """A strongest-of group may be one comma-separated line, as on the CLI."""
    from rlgauntlet.threats.spec import split_spec_list

    if isinstance(value, list):
        return [split_spec_list(g) if isinstance(g, str) else g for g in value]
    return value


def _check_groups(groups: list[list[str]] | None) -> None:
    for group in groups or []:
        if len(group) < 2:
            raise ValueError(f"strongest_of group {group} compares several attacks; give at least two")


class AgentEntry(FileAgentSpec):
    """One agent of a sweep and how to load it (an :class:`AgentSpec` and the sweep's fields).

    ``envs`` defaults to the sweep's ``envs``, and for a zoo agent to the env it was trained on.
    ``eps_grid`` overrides the sweep's grid for this agent (budgets live in the agent's own
    space: pixel01, normalized or raw)."""

    command: ClassVar[str] = "rlgauntlet sweep"

    envs: list[str] | None = Field(None, description="Gymnasium ids this agent is evaluated on")
    eps_grid: str | None = Field(None, description="budgets for this agent, overriding the sweep's eps_grid")
    threats: list[str] | None = Field(None, description="threat specs for this agent, replacing the sweep's")
    strongest_of: list[list[str]] | None = Field(None, description="strongest-of groups for this agent, replacing the sweep's")

    @field_validator("eps_grid", mode="before")
    @classmethod
    def _grid(cls, value: object) -> object:
        return _grid_text(value)

    @field_validator("strongest_of", mode="before")
    @classmethod
    def _groups(cls, value: object) -> object:
        return _group_lists(value)

    @model_validator(mode="after")
    def _check(self) -> "AgentEntry":
        _check_groups(self.strongest_of)
        return self


class SweepSpec(BaseModel):
    """A sweep file: every (agent, env) pair runs clean, every threat at every budget of
    ``eps_grid`` (threats without ``eps``), every suite, and every ``strongest_of`` group, once
    per seed, ``episodes`` episodes each."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("sweep", description="a label for the sweep")
    agents: list[AgentEntry] = Field(min_length=1, description="agent specs, or entries with load options and envs")
    envs: list[str] = Field([], description="envs of the agents that name none (zoo agents default to their own)")
    threats: list[str] = Field([], description="threat specs, e.g. pgd:steps=10 or gaussian_noise:std=0.1")
    suites: list[str] = Field([], description="named suites: natural, adversarial, ood-cartpole, ...")
    eps: str | None = Field(None, description="budget of the suites (without eps_grid)")
    eps_grid: str | None = Field(None, description="budgets for every threat and suite without eps, e.g. 0.05,0.1,0.2")
    strongest_of: list[list[str]] = Field(
        [], description="groups of attacks whose lowest mean return per budget is reported with the winner")
    seeds: list[int] = Field([0], min_length=1, description="evaluation seeds; episode k of seed s uses env seed s + k")
    episodes: int = Field(20, ge=1, description="episodes per cell")
    chunk_episodes: int = Field(5, ge=1, description="episodes per chunk (the unit of work handed to a worker)")
    n_envs: int = Field(1, ge=1, description="envs stepped side by side inside a chunk (the same episodes to the last bits of a batched forward pass; reproduce a number with the n_envs that made it)")
    deterministic: bool = Field(True, description="act greedily (false: sample actions)")
    impact: bool = Field(True, description="add impact (argmin agent for discrete agents) to every evaluation")

    @field_validator("agents", mode="before")
    @classmethod
    def _agent_strings(cls, value: object) -> object:
        return agent_entries(value)

    @field_validator("eps_grid", "eps", mode="before")
    @classmethod
    def _grids(cls, value: object) -> object:
        return _grid_text(value)

    @field_validator("episodes", "chunk_episodes", "n_envs", mode="before")
    @classmethod
    def _counts(cls, value: object) -> object:
        if isinstance(value, bool):  # YAML's true would pass as 1
            raise ValueError("a count, not true/false")
        return value

    @field_validator("seeds", mode="before")
    @classmethod
    def _seed_values(cls, value: object) -> object:
        if isinstance(value, list) and any(isinstance(v, bool) for v in value):
            raise ValueError("seeds are integers, not true/false")
        return value

    @field_validator("strongest_of", mode="before")
    @classmethod
    def _groups(cls, value: object) -> object:
        return _group_lists(value)

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value) or min(value) < 0:
            raise ValueError("seeds must be distinct and non-negative")
        return value

    @model_validator(mode="after")
    def _something_to_run(self) -> "SweepSpec":
        _check_groups(self.strongest_of)
        if self.eps is not None and self.eps_grid is not None:
            raise ValueError("give either eps or eps_grid, not both")
        _no_duplicates("threats", [t.replace(" ", "") for t in self.threats])
        _no_duplicates("suites", self.suites)
        _no_duplicates("agents", [a.model_dump_json() for a in self.agents], [a.agent for a in self.agents])
        for a in self.agents:
            _no_duplicates(f"threats of {a.agent}", [t.replace(" ", "") for t in a.threats or []])
        return self


def _no_duplicates(what: str, keys: list[str], names: list[str] | None = None) -> None:
    """A sweep lists each agent, threat and suite once (a repeat would be counted twice)."""
    seen: set[str] = set()
    for key, name in zip(keys, names or keys):
        if key in seen:
            raise ValueError(f"{what} lists {name} twice; list it once")
        seen.add(key)


def load_sweep_file(path: str | Path) -> SweepSpec:
    """Read and validate a YAML sweep file; every problem is a :class:`UserError` naming it."""
    from rlgauntlet.common.specfiles import load_yaml_model

    return load_yaml_model(path, SweepSpec, "sweep file", "sweeps/zoo.yaml")


@dataclass
class PairPlan:
    """One (agent, env, seed) of a sweep: its entry, its cells and the specs of its groups."""

    entry: AgentEntry
    cells: CellSet
    groups: list[list[str]] = field(default_factory=list)

    @property
    def env(self) -> str:
        return self.cells.env

    @property
    def seed(self) -> int:
        return self.cells.seed

    @property
    def victim(self):
        return self.cells.victim


@dataclass
class SweepPlan:
    spec: SweepSpec
    pairs: list[PairPlan]
    chunks: list[Chunk]
    total_episodes: int  # episodes of the whole sweep
    missing_episodes: int  # episodes still to run

    def pair_counts(self) -> list[dict]:
        """Per (agent, env, seed): its runs, episodes, and how many are stored and missing."""
        missing: dict = {}
        for chunk in self.chunks:
            key = (chunk.cell.agent, chunk.cell.env, chunk.cell.seed)
            missing[key] = missing.get(key, 0) + len(chunk.episodes)
        rows = []
        for pair in self.pairs:
            total = len(pair.cells.cells) * self.spec.episodes
            todo = missing.get((pair.entry.load_spec(), pair.env, pair.seed), 0)
            rows.append({"agent": pair.entry.agent, "env": pair.env, "seed": pair.seed, "runs": len(pair.cells.cells),
                         "episodes": total, "stored": total - todo, "missing": todo,
                         "certified": self.certified_budgets(pair)})
        return rows

    def certified_budgets(self, pair: PairPlan) -> list[str]:
        """The budgets ``suites: [certified]`` certifies for ``pair`` (GWC episodes and ACR at
        each; run in the driver after the episodes), none without that suite."""
        if "certified" not in self.spec.suites:
            return []
        grid = pair.entry.eps_grid or self.spec.eps_grid
        return [e.strip() for e in grid.split(",")] if grid else [self.spec.eps] if self.spec.eps else []


def _envs_of(entry: AgentEntry, spec: SweepSpec) -> list[str]:
    if entry.envs:
        return entry.envs
    if spec.envs:
        return spec.envs
    home = entry.catalogue_env()
    if home is not None:
        return [home]
    raise UserError(f"agent {entry.agent} names no env; give envs: [ENV_ID] for it or for the whole sweep")


@dataclass
class ResolvedPair:
    """One (agent, env) of a sweep, loaded and checked: its victim and its checked threats."""

    entry: AgentEntry
    env: str
    preset: str
    victim: object
    threats: list
    groups: list[list[str]]


def resolve_sweep(spec: SweepSpec) -> list[ResolvedPair]:
    """Load every agent once and check every env, threat and seed of the sweep, writing nothing:
    bad input fails here, before a store is created or a run row written."""
    from rlgauntlet.experiments.evaluations import checked_threats, threat_specs
    from rlgauntlet.experiments.runs import check_seed
    from rlgauntlet.threats.suites import expand_eps_grid

    for seed in spec.seeds:
        check_seed(seed, spec.episodes)
    resolved = []
    for entry in spec.agents:
        grid = entry.eps_grid or spec.eps_grid
        chosen = entry.threats if entry.threats is not None else spec.threats
        groups = [expand_eps_grid(list(g), grid) if grid else list(g)
                  for g in (entry.strongest_of if entry.strongest_of is not None else spec.strongest_of)]
        for env in _envs_of(entry, spec):
            victim, preset = entry.load(env)
            specs = threat_specs(victim, chosen, spec.suites, spec.eps, grid, env)
            specs += [s for g in groups for s in g if s not in specs]
            _check_budgets_given(specs, spec, entry)
            resolved.append(ResolvedPair(entry, env, preset, victim, checked_threats(specs, victim, env, preset),
                                         groups))
    return resolved


def _check_budgets_given(specs: list[str], spec: SweepSpec, entry: AgentEntry) -> None:
    """A threat that needs a budget and names none, in a sweep without ``eps_grid``: say how a
    sweep file gives one (``eps:`` is the suites' budget only, as ``evaluate --eps``)."""
    from rlgauntlet.threats import parse_threat

    if entry.eps_grid or spec.eps_grid:
        return
    for text in specs:
        try:
            parse_threat(text)
        except UserError as exc:
            if "eps: Field required" in str(exc):
                raise UserError(f"threat {text!r} of the sweep names no eps; write it into the spec ({text}"
                                f"{',' if ':' in text else ':'}eps=0.05) or give the sweep `eps_grid: [0.05]`, "
                                "the budgets of every threat without one (`eps:` is the suites' budget only)") from None


def plan_sweep(spec: SweepSpec, store: ResultsStore, resolved: list[ResolvedPair] | None = None) -> SweepPlan:
    """Expand the sweep into cells, find or create each cell's run and cut the episodes it lacks
    into chunks (``resolved``: the :func:`resolve_sweep` of ``spec``, when the caller has it)."""
    pairs, chunks, total, missing = [], [], 0, 0
    for item in resolved if resolved is not None else resolve_sweep(spec):
        for seed in spec.seeds:
            cells = open_cells(store, item.entry, item.env, item.preset, item.victim, item.threats, seed,
                               spec.episodes, spec.deterministic, spec.impact)
            pairs.append(PairPlan(item.entry, cells, item.groups))
            chunks += cells.chunks(spec.chunk_episodes, spec.n_envs)
            total += len(cells.cells) * spec.episodes
            missing += cells.missing_episodes
    return SweepPlan(spec, pairs, chunks, total, missing)


def preview_sweep(spec: SweepSpec, store: str | Path) -> SweepPlan:
    """The plan a sweep would run against ``store``, computed on an in-memory copy: nothing is
    written (the file is not even created). For ``rlgauntlet sweep --dry-run``."""
    import sqlite3

    from rlgauntlet.experiments.store import check_is_our_store

    copy = ResultsStore(":memory:")
    path = Path(store)
    if path.is_file() and path.stat().st_size > 0:
        check_is_our_store(path)
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            source.backup(copy.conn)
        finally:
            source.close()
    try:
        return plan_sweep(spec, copy)
    finally:
        copy.close()


def summarize_sweep(plan: SweepPlan, store: ResultsStore) -> list[dict]:
    """One report (as ``rlgauntlet evaluate --out`` writes it) per (agent, env, seed), from the
    store: evaluations, strongest-of rows and impact."""
    return [cell_report(pair.cells, store, pair.groups, plan.spec.impact) | {"sweep": plan.spec.name, "seed": pair.seed}
            for pair in plan.pairs]


def run_sweep(spec: SweepSpec | str | Path, store: str | Path | ResultsStore, executor: str = "local",
              workers: int = 1, address: str | None = None,
              on_plan: Callable[[SweepPlan], None] | None = None,
              on_chunk: Callable[[Chunk, list[EpisodeRecord]], None] | None = None,
              resolved: list[ResolvedPair] | None = None) -> dict:
    """Run (or complete) a sweep: the library form of ``rlgauntlet sweep``.

    Args:
        spec: a :class:`SweepSpec` or the path of a YAML sweep file.
        store: the SQLite store (a path or an open store); re-running on it runs only missing episodes.
        executor: ``local`` (worker processes on this machine) or ``ray`` (Ray tasks; ``address``
            of a running cluster, or a local head started with ``workers`` CPUs).
        workers: worker processes (local) or CPUs of the local Ray head.
        on_plan, on_chunk: progress callbacks (the plan before work starts; each finished chunk).
        resolved: the :func:`resolve_sweep` of ``spec`` when the caller checked it already.

    Returns:
        ``{"sweep", "episodes", "ran", "seconds", "reports"}``: ``ran`` is how many episodes this
        call ran (0 when the store already held the whole sweep).
    """
    from rlgauntlet.common.executors import check_executor

    if not isinstance(spec, SweepSpec):
        spec = load_sweep_file(spec)
    check_executor(executor, workers, address)  # before the store is made or a run row is written
    if resolved is None:  # likewise: every agent, env, threat and seed checked first
        resolved = resolve_sweep(spec)
    start = time.perf_counter()
    with store_of(store) as results:
        plan = plan_sweep(spec, results, resolved)
        if on_plan is not None:
            on_plan(plan)
        ran = run_chunks(plan.chunks, results, executor, workers, address, on_chunk)
        reports = summarize_sweep(plan, results)
        certified = _certify_pairs(plan, results) if "certified" in spec.suites else []
    for report, row in zip(reports, certified):  # both in the plan's pair order
        report["evaluations"] = report["evaluations"] + row["evaluations"]  # in its table, as evaluate shows them
    out = {"sweep": spec.name, "episodes": plan.total_episodes, "ran": ran,
           "seconds": time.perf_counter() - start, "reports": reports}
    if certified:
        out["certified"] = certified
    return out


def _certify_pairs(plan: SweepPlan, results: ResultsStore) -> list[dict]:
    """``suites: [certified]``: GWC and ACR per budget for every (agent, env, seed), run in the
    driver with the store (bound computations are cheap next to episodes; finished budgets are
    reused on a re-run), exactly as ``evaluate --suite certified`` stores them."""
    from rlgauntlet.experiments.evaluations import certified_evaluations

    rows = []
    for pair in plan.pairs:
        grid = pair.entry.eps_grid or plan.spec.eps_grid
        evaluations = certified_evaluations(pair.victim, pair.env, None if grid else plan.spec.eps, grid,
                                            plan.spec.episodes, pair.seed, plan.spec.n_envs, results)
        rows.append({"agent": pair.entry.agent, "env": pair.env, "seed": pair.seed, "evaluations": evaluations})
    return rows


if __name__ == "__main__":  # regenerate the committed JSON schema of sweep files
    import json
    import sys

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/sweep.schema.json")
    out.write_text(json.dumps(SweepSpec.model_json_schema(), indent=2) + "\n")
    print(f"wrote {out}")
