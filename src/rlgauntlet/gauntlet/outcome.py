"""What running a gauntlet plan found, beside the plan (which never changes): the race's result
and the learned attackers' threats once they are trained. The runner builds one
:class:`Outcome` per plan, phase by phase (each phase a new frozen record), and the summary reads it.

Example:
    >>> outcome = Outcome(plan)                                  # doctest: +SKIP
    >>> outcome = outcome.raced(run_race(plan, store, run_round))  # doctest: +SKIP
    >>> outcome.finalists                                        # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from rlgauntlet.experiments.cells import CellSet
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.gauntlet.plan import GauntletPlan, eps_value
from rlgauntlet.gauntlet.race import NO_RACE, RaceResult
from rlgauntlet.threats.base import Threat

if TYPE_CHECKING:
    from rlgauntlet.gauntlet.transfer import TransferMember


@dataclass(frozen=True)
class Outcome:
    """One plan and what its run has found so far."""

    plan: GauntletPlan
    race: RaceResult = NO_RACE
    learned: Mapping[str, Threat] = field(default_factory=lambda: MappingProxyType({}))  # spec -> trained attacker
    #: a board's directors of other agents, received as members (:mod:`rlgauntlet.gauntlet.transfer`),
    #: their parsed threats, those that did not fit this agent (with the reason) and their race
    transfer: tuple["TransferMember", ...] = ()
    transferred: Mapping[str, Threat] = field(default_factory=lambda: MappingProxyType({}))
    transfer_skipped: tuple[dict, ...] = ()
    transfer_race: RaceResult = NO_RACE
    #: per earlier version the protocol replays (``Protocol.replays``), the members it would have
    #: given (their specs, in its order) and its race over them, replayed so that its finalists run
    #: too (gauntlet.transfer)
    earlier_transfer: Mapping[int, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    earlier_transfer_races: Mapping[int, RaceResult] = field(default_factory=lambda: MappingProxyType({}))

    def raced(self, race: RaceResult) -> "Outcome":
        """This outcome with the race's result."""
        return replace(self, race=race)

    def trained(self) -> "Outcome":
        """This outcome with the learned attackers' threats, parsed and checked once (call once
        they are trained: their specs name the trained folders)."""
        return replace(self, learned=MappingProxyType(self.plan.parse_learned()))

    def with_transfer(self, members: list["TransferMember"],
                      earlier: Mapping[int, list["TransferMember"]] | None = None) -> "Outcome":
        """This outcome with the transferred members (:class:`~rlgauntlet.gauntlet.transfer.TransferMember`)
        that fit this agent, parsed and checked once; the others kept with the reason. ``earlier``:
        per earlier version the protocol replays, those it would have given (all among ``members``)."""
        from rlgauntlet.gauntlet.plan import fitting_specs

        plan = self.plan
        kept, skipped = fitting_specs([m.spec for m in members], plan.victim, plan.env, plan.preset)
        fitting = dict(kept)
        given = {version: tuple(m.spec for m in picked if m.spec in fitting)
                 for version, picked in (earlier or {}).items()}
        return replace(self, transfer=tuple(m for m in members if m.spec in fitting),
                       transferred=MappingProxyType(fitting), transfer_skipped=tuple(skipped),
                       earlier_transfer=MappingProxyType({v: specs for v, specs in given.items() if specs}))

    def inexact_resumes(self) -> list[dict]:
        """The directors among this agent's members (its own and those transferred to it) that were
        resumed along another trajectory than their uninterrupted training (a checkpoint without its
        run state: :mod:`rlgauntlet.training.run_state`): each member's label and those resumes. Empty
        where every director trained without a stop or resumed exactly."""
        labels = self.labels
        found = []
        for spec, threat in {**self.learned, **self.transferred}.items():
            manifest = getattr(threat, "manifest", None) or {}
            resumes = [r for r in manifest.get("resumes", []) if not r.get("exact")]
            if resumes:
                found.append({"member": labels.get(spec, spec), "resumes": resumes})
        return found

    @property
    def replayed_versions(self) -> list[int]:
        """The earlier versions whose transfer race is replayed for this agent, newest first: each
        whose members differ from this version's and from every newer one's replayed (the same
        members make the same race, so one race decides both)."""
        seen = [{m.spec for m in self.transfer}]
        versions = []
        for version in sorted(self.earlier_transfer, reverse=True):
            members = set(self.earlier_transfer[version])
            if members not in seen:
                seen.append(members)
                versions.append(version)
        return versions

    def transfer_groups(self, replayed: int | None = None) -> list[tuple[str, list[str]]]:
        """The transferred members raced together: (ε, its members) per ε of the grid that has some;
        ``replayed``: that earlier version's members only, in its order."""
        specs = self.earlier_transfer[replayed] if replayed is not None else [m.spec for m in self.transfer]
        eps = {m.spec: m.eps for m in self.transfer}
        groups = ((e, [s for s in specs if eps[s] == e]) for e in self.plan.protocol.eps_grid)
        return [(e, g) for e, g in groups if g]

    def eps_of(self, spec: str) -> float | None:
        """The budget of ``spec``, from its parsed threat (a trained or transferred attacker's included)."""
        threat = self.learned.get(spec, self.transferred.get(spec))
        return getattr(threat.params, "eps", None) if threat is not None else self.plan.eps_of(spec)

    @property
    def labels(self) -> dict[str, str]:
        """spec -> how results name it: the plan's, and each transferred member's (its donor named)."""
        return {**self.plan.labels, **{m.spec: m.label for m in self.transfer}}

    @property
    def finalists(self) -> list[str]:
        """The heuristic specs that run in full on the reported seeds (all without a race)."""
        return [s for s in self.plan.heuristics if s not in self.race.dropped]

    @property
    def transfer_finalists(self) -> list[str]:
        """The transferred members that run in full on the reported seeds (all without a race): this
        version's race's finalists and those of each replayed earlier version's (so that this
        version's worst case is never above any of theirs)."""
        return [m.spec for m in self.transfer if m.spec not in self.transfer_race.dropped
                or m.spec in self.earlier_finalists]

    @property
    def earlier_finalists(self) -> list[str]:
        """The finalists of the replayed earlier versions' transfer races, each once, newest
        version first (none where no race was replayed)."""
        found: list[str] = []
        for version in self.replayed_versions:
            dropped = self.earlier_transfer_races.get(version, NO_RACE).dropped
            found += [s for s in self.earlier_transfer[version] if s not in dropped and s not in found]
        return found

    @property
    def adversarial(self) -> list[str]:
        """Every adversarial spec with reported episodes: the finalists, the learned attackers and
        the transferred members' finalists."""
        return self.finalists + self.plan.learned + self.transfer_finalists

    def strongest_groups(self) -> list[list[str]]:
        """One strongest-of group per ε of the grid: the adversarial specs of exactly that budget,
        where there are at least two to compare (a worst case over one attack is that attack)."""
        plan = self.plan
        groups = ([s for s in self.adversarial if self.eps_of(s) == eps_value(e)] for e in plan.protocol.eps_grid)
        return [g for g in groups if len(g) >= 2]

    def cells(self, store: ResultsStore, specs: list[str], episodes: int | None = None,
              impact: bool = True) -> list[CellSet]:
        """The plan's cells of ``specs``, a trained or transferred attacker's included (:meth:`GauntletPlan.cells`)."""
        return self.plan.cells(store, specs, {**self.learned, **self.transferred}, episodes, impact)
