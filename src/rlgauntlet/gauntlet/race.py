"""Racing the heuristic members of one ε (successive halving), so that the gauntlet runs the
protocol's full episode count only on the attacks that may be the strongest.

Every member of an ε runs ``first`` episodes on selection episodes of its own (env seeds
``SELECTION_SEED + k``, disjoint from every reported episode); after each round a member whose
mean return is more than ``z`` standard errors of the difference above the current best's is
dropped, and the others run twice as many selection episodes, while that is at most half the
protocol's episode count (beyond it a race would cost more than the full runs it saves). After
the last round at most ``finalists`` members go on (the lowest selection means; ties to the
protocol's order): the finalists, which run the full count on the reported seeds. The reported worst case is computed only from the finalists' reported episodes,
so the selection adds no optimistic bias to the number; what it can do is miss the strongest
member: one far above the best with a probability bounded in docs/protocols.md, or one within
``z`` standard errors of the finalists at the last round, which costs at most that.

The standard error of a member is its own, floored by the pooled within-member spread of the
round (a member whose few episodes happened to agree is not taken as certain), and equal means
are never separated before the last round: with every mean equal, nobody is dropped until then
(and then only to keep ``finalists``).

Example:
    >>> rule = RaceRule(first=2, z=2.0, finalists=3)
    >>> rule.rounds(10), rule.rounds(20), rule.rounds(5)
    ([2, 4], [2, 4, 8], [2])
    >>> drops = rule.decide({"a": [10.0, 12.0], "b": [500.0, 498.0], "c": [11.0, 13.0]})
    >>> sorted(drops)
    ['b']
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: env seed of selection episode 0 (selection episode k uses SELECTION_SEED + k): far above any
#: reported seed's episodes, and checked against them (:func:`check_disjoint`)
SELECTION_SEED = 1_000_000


@dataclass(frozen=True)
class RaceRule:
    """The racing rule of a protocol: episodes of the first round and the drop threshold (in
    standard errors of the difference to the best member)."""

    first: int = 2
    z: float = 2.0
    finalists: int = 3

    def rounds(self, episodes: int) -> list[int]:
        """Selection episodes per member after each round: ``first``, doubled while at most half
        of ``episodes`` (the protocol's count per evaluation); empty when even the first round
        would cost more than half a full evaluation (no race)."""
        out, n = [], self.first
        while 2 * n <= episodes:
            out.append(n)
            n *= 2
        return out

    def decide(self, returns: dict[str, list[float]], last: bool = False) -> dict[str, str]:
        """The members to drop after a round, each with the reason, from every member's
        selection returns so far (members in the protocol's order; a tie for the best goes to the
        first listed). After the ``last`` round, at most :attr:`finalists` members stay."""
        if len(returns) < 2:
            return {}
        stats = {m: (float(np.mean(r)), len(r), float(np.var(r, ddof=1)) if len(r) > 1 else 0.0)
                 for m, r in returns.items()}
        pooled_var = float(np.mean([v for _, _, v in stats.values()]))
        se = {m: math.sqrt(max(v, pooled_var) / n) for m, (_, n, v) in stats.items()}
        best = min(stats, key=lambda m: stats[m][0])
        best_mean = stats[best][0]
        drops = {}
        for m, (mean, n, _) in stats.items():
            gap = mean - best_mean
            threshold = self.z * math.sqrt(se[m] ** 2 + se[best] ** 2)
            if m != best and gap > threshold:
                drops[m] = (f"mean {mean:.4g} over {n} selection episodes, {gap:.4g} above the best ({best}, "
                            f"{best_mean:.4g}): more than {self.z:g} standard errors of the difference ({threshold:.4g})")
        if last:
            kept = sorted((m for m in stats if m not in drops), key=lambda m: stats[m][0])  # stable: protocol order
            for m in kept[self.finalists:]:
                drops[m] = (f"mean {stats[m][0]:.4g} over {stats[m][1]} selection episodes: not among the "
                            f"{self.finalists} lowest after the last round (best {best}, {best_mean:.4g})")
        return drops


@dataclass(frozen=True)
class RaceResult:
    """What a race decided: each dropped member with the reason, and per member its ε, selection
    episodes, selection mean, drop round and reason (in the protocol's order)."""

    dropped: dict[str, str]
    members: tuple[dict, ...]


#: the result of a gauntlet that ran no race (every heuristic member in full)
NO_RACE = RaceResult({}, ())


def check_disjoint(seeds: list[int], episodes: int, selection_episodes: int, option: str = "--seeds") -> None:
    """Refuse a plan whose reported episodes (env seeds ``s + k``) would reach a selection
    episode's env seed: the selection would then see episodes it is judged on."""
    from rlgauntlet.errors import UserError

    reported = {s + k for s in seeds for k in range(episodes)}
    selection = set(range(SELECTION_SEED, SELECTION_SEED + selection_episodes))
    if reported & selection:
        raise UserError(f"{option} reach env seed {min(reported & selection)}, which the gauntlet's race uses for "
                        f"selection episodes (from {SELECTION_SEED}); use seeds below {SELECTION_SEED - episodes}")
