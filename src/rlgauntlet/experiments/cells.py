"""Cells and chunks: the unit of evaluation work that sweeps and the gauntlet plan and executors run.

A *cell* is one evaluation run (agent × env × threat spec × seed, or the clean agent, or the
argmin agent); its run in the results store is found or created by the same key ``rlgauntlet
evaluate --resume`` uses. The episodes a cell's run lacks are cut into *chunks* of episode
indices; because episode k always uses env seed ``seed + k``, a chunk gives the same episodes in
any process and any order. :func:`run_chunk` runs in a worker and writes nothing; the driver
writes each finished chunk (:func:`write_chunk`), so a killed run loses at most the chunks in
flight and a re-run runs only what is missing.

This module knows the store, the engine's episode runner and executors; it knows no sweep file
and no protocol: a sweep and the gauntlet each say which cells they want.

Example:
    >>> from rlgauntlet.experiments.agents import AgentSpec
    >>> from rlgauntlet.experiments.evaluations import checked_threats
    >>> from rlgauntlet.experiments.store import store_of
    >>> spec = AgentSpec(agent="zoo:cartpole-dqn")
    >>> victim, preset = spec.load("CartPole-v1")
    >>> threats = checked_threats(["uniform_noise:eps=0.1"], victim, "CartPole-v1", preset)
    >>> with store_of(None) as store:  # in memory
    ...     cells = open_cells(store, spec, "CartPole-v1", preset, victim, threats, seed=0, episodes=2)
    ...     [c.label for c in cells.cells], len(cells.chunks(chunk_episodes=5))
    (['clean', 'uniform_noise:eps=0.1', 'argmin_agent'], 3)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.threats.base import Threat
from rlgauntlet.victims.base import Victim


@dataclass(frozen=True)
class Cell:
    """One evaluation run: what a worker needs to rebuild the victim (its spec carries every load
    option and the device), env and threat."""

    agent: AgentSpec
    env: str
    preset: str
    spec: str | None  # None: clean (or the argmin agent)
    seed: int
    deterministic: bool = True
    argmin: bool = False
    sha256: str | None = None  # of the agent file the driver planned with (workers check it)

    @property
    def label(self) -> str:
        from rlgauntlet.metrics.impact import ARGMIN_LABEL

        return ARGMIN_LABEL if self.argmin else (self.spec or "clean")


@dataclass(frozen=True)
class Chunk:
    """Episode indices of one cell's run, the unit of work of an executor."""

    cell: Cell
    run_id: int
    episodes: tuple[int, ...]
    n_envs: int = 1


@dataclass
class CellSet:
    """One agent on one env at one seed: its cells (clean first, then each threat, then the
    argmin agent when impact is wanted), each cell's run in the store and the episodes it lacks."""

    agent: AgentSpec
    env: str
    preset: str
    seed: int
    victim: Victim
    episodes: int
    deterministic: bool = True
    threats: dict[str, Threat] = field(default_factory=dict)  # spec -> its threat, parsed once by the planner
    cells: list[Cell] = field(default_factory=list)
    run_ids: dict[Cell, int] = field(default_factory=dict)
    missing: dict[Cell, list[int]] = field(default_factory=dict)

    def chunks(self, chunk_episodes: int = 5, n_envs: int = 1) -> list[Chunk]:
        """The missing episodes of every cell, ``chunk_episodes`` at a time."""
        return [Chunk(cell, self.run_ids[cell], tuple(todo[start:start + chunk_episodes]), n_envs)
                for cell in self.cells for todo in [self.missing[cell]]
                for start in range(0, len(todo), chunk_episodes)]

    @property
    def missing_episodes(self) -> int:
        return sum(len(todo) for todo in self.missing.values())


def open_cells(store: ResultsStore, agent: AgentSpec, env: str, preset: str, victim: Victim,
               threats: Sequence[Threat], seed: int, episodes: int, deterministic: bool = True,
               impact: bool = True, clean: bool = True, kind: str = "evaluation") -> CellSet:
    """Find or create the store run of each cell of ``agent`` (loaded as ``victim``) on ``env`` at
    ``seed``: clean (unless ``clean`` is false), every threat, and the argmin agent of a discrete
    agent when ``impact``; and note which of episodes ``0..episodes-1`` each run lacks. ``kind``
    is the runs' kind in the store (``selection``: episodes that choose what runs, which reports
    never show as evaluations)."""
    from rlgauntlet.experiments.runs import open_run
    from rlgauntlet.metrics.impact import ArgminVictim

    spec = agent.load_spec()  # a sweep's or board's entry as the plain, hashable spec a worker receives
    sha = victim.description.get("sha256")
    out = CellSet(agent, env, preset, seed, victim, episodes, deterministic, {t.spec: t for t in threats})

    def cell(threat_spec: str | None, argmin: bool = False) -> Cell:
        return Cell(spec, env, preset, threat_spec, seed, deterministic, argmin=argmin, sha256=sha)

    planned = [(cell(None), None, victim)] if clean else []
    planned += [(cell(t.spec), t, victim) for t in threats]
    if impact and victim.is_discrete:
        planned.append((cell(None, argmin=True), None, ArgminVictim(victim)))
    env_info = {"id": env, "preset": preset}
    for c, threat, cell_victim in planned:
        run_id, _ = open_run(store, env_info, cell_victim, threat, seed, deterministic, resume=True, kind=kind,
                             label=None if threat is not None else c.label)
        done = store.done_episodes(run_id)
        out.cells.append(c)
        out.run_ids[c] = run_id
        out.missing[c] = [k for k in range(episodes) if k not in done]
    return out


#: per worker process: victims loaded once per (agent, env, options, argmin)
_VICTIMS: dict = {}


def _victim(cell: Cell) -> Victim:
    from rlgauntlet.metrics.impact import ArgminVictim

    victim, _ = cell.agent.load(cell.env)
    return ArgminVictim(victim) if cell.argmin else victim


def run_chunk(chunk: Chunk) -> list[EpisodeRecord]:
    """Run one chunk's episodes (in any process) and return their records; writes nothing.

    The agent is loaded once per process and checked against its file's hash as any load is;
    torch uses one thread (see :mod:`rlgauntlet.common.threads`), so W workers use W cores."""
    from rlgauntlet.common.threads import thread_policy
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env
    from rlgauntlet.threats import parse_threat

    cell = chunk.cell
    with thread_policy(None):
        key = (cell.agent, cell.env, cell.argmin)
        if key not in _VICTIMS:
            _VICTIMS[key] = _victim(cell)
        found = _VICTIMS[key].description.get("sha256")
        if found != cell.sha256:  # the file was replaced after planning: its episodes would join the wrong run
            raise UserError(f"agent {cell.agent.agent} changed while the sweep ran (sha256 {str(found)[:12]}…, planned "
                            f"{str(cell.sha256)[:12]}…); re-run the sweep to plan with the new file")
        threat = parse_threat(cell.spec) if cell.spec is not None else None
        env, preset = cell.env, cell.preset
        return evaluate_episodes(lambda: make_env(env, preset), _VICTIMS[key], threat, list(chunk.episodes), cell.seed,
                                 chunk.n_envs, cell.deterministic)


def write_chunk(store: ResultsStore, chunk: Chunk, records: list[EpisodeRecord]) -> None:
    """The driver's half: store a finished chunk's episodes and the time they took. A chunk that
    came back without exactly its episodes is an error, not a silently shorter run."""
    if sorted(r.episode for r in records) != sorted(chunk.episodes):
        raise RuntimeError(f"chunk of run {chunk.run_id} returned episodes {sorted(r.episode for r in records)}, "
                           f"expected {sorted(chunk.episodes)}")
    for record in records:
        store.add_episode(chunk.run_id, record)
    store.add_wall_seconds(chunk.run_id, chunk_seconds(records, chunk.n_envs))


def chunk_seconds(records: Sequence[EpisodeRecord], n_envs: int) -> float:
    """The seconds a chunk took, from its episodes' own times (each from its reset to its end).
    The engine steps ``n_envs`` episodes side by side and gives a freed env the next episode, so
    replaying that schedule gives the chunk's span: one env, the sum; all side by side, the
    longest. (A sum over side-by-side episodes would count the same seconds up to n_envs times.)

    Example:
        >>> from rlgauntlet.engine.rollout import EpisodeRecord
        >>> times = [3.0, 1.0, 1.0, 1.0]  # episode 0 holds one env while 1, 2, 3 take turns on the other
        >>> chunk_seconds([EpisodeRecord(k, 0, 0.0, 1, wall_seconds=w) for k, w in enumerate(times)], 2)
        3.0
    """
    slots = [0.0] * max(1, min(n_envs, len(records)))
    for record in sorted(records, key=lambda r: r.episode):
        slots[slots.index(min(slots))] += record.wall_seconds
    return max(slots)


def run_chunks(chunks: Sequence[Chunk], store: ResultsStore, executor: str = "local", workers: int = 1,
               address: str | None = None,
               on_chunk: Callable[[Chunk, list[EpisodeRecord]], None] | None = None, pool=None) -> int:
    """Run ``chunks`` on an executor (``pool``: one the caller holds open across calls, whose
    workers keep what they loaded), storing each as soon as it returns; the episodes run."""
    from contextlib import nullcontext

    from rlgauntlet.common.executors import make_executor

    ran = [0]

    def done(chunk: Chunk, records: list[EpisodeRecord]) -> None:
        write_chunk(store, chunk, records)
        ran[0] += len(records)
        if on_chunk is not None:
            on_chunk(chunk, records)

    if chunks:
        with nullcontext(pool) if pool is not None else make_executor(executor, workers, address) as running:
            running.run(run_chunk, list(chunks), done)
    return ran[0]


def cell_report(cells: CellSet, store: ResultsStore, groups: Sequence[Sequence[str]] = (),
                impact: bool = True) -> dict:
    """The report of a complete :class:`CellSet` (as ``rlgauntlet evaluate --out`` writes it),
    from the store: every evaluation, a strongest-of row per budget of each group, and impact
    (the argmin agent's run is one of the cells, so nothing runs here)."""
    from rlgauntlet.envs import make_env
    from rlgauntlet.experiments.evaluations import Report, add_impact, strongest_rows
    from rlgauntlet.experiments.runs import run_summary
    from rlgauntlet.threats import parse_threat

    victim, env, preset = cells.victim, cells.env, cells.preset
    report = Report(victim.description, {"id": env, "preset": preset}, [])
    for cell in cells.cells:
        if not cell.argmin:
            threat = None if cell.spec is None else cells.threats.get(cell.spec) or parse_threat(cell.spec)
            report.evaluations.append(run_summary(store, cells.run_ids[cell], victim, threat, cells.seed,
                                                  cells.episodes, cells.deterministic, label=cell.label))
    for group in groups:
        report.strongest_of += strongest_rows(report.evaluations, list(group), store, cells.seed, cells.threats)
    if impact:
        add_impact(report, store, victim, lambda: make_env(env, preset), cells.episodes, cells.seed, 1,
                   cells.deterministic, None)
    return report.to_dict()
