"""Transfer within a board: each agent's strongest trained directors become members of every
other agent's gauntlet on the same env, at no training cost, so that a board learns from itself.

A director is trained against one agent (its *donor*); on another agent of the same env it is a
fixed attack like any heuristic one: the PA-AD director still names a direction in action space
(the actor's gradient step is taken on the receiving agent), SA-RL's still outputs the
perturbation. Per donor and per ε at which it trained directors, its strongest are transferred:
the protocol's ``transfer_directors`` (one in ``mujoco`` v5, two in v6) whose reported episodes
left the donor lowest (only directors: a Robust Sarsa Q function is the donor's
policy's value). A donor never transfers to itself, nor to another entry with its file's sha256
(the same agent: that would run an existing member again under a new name). The receiving agent's
transferred members are raced on selection episodes as the heuristic ones are
(:mod:`rlgauntlet.gauntlet.race`); the finalists run the level's episodes and join the strongest-of.

A version that keeps an earlier one's directors (``mujoco`` v6 keeps v5's) gives more members, and
the race keeps at most ``finalists`` of them: a member the earlier version would have reported could
lose its place to a new one that only looked stronger on the selection episodes, and the newer
version would then be weaker on that agent (it happened: SA-PPO on the v6 Walker2d field). So the
board also replays the transfer race of each earlier version it builds on (``Protocol.replays``:
v6 replays v5's, v8 both v6's and v5's; the members: :func:`transfer_members` with ``replayed``, from
the same stored episodes), and those races' finalists run in full too. The newer version's worst
case is then a minimum over everything each of those versions reported.

A single agent's gauntlet has no donors: its result means what it always meant. A board's result
names every transferred member it used (``transfer`` in ``gauntlet.json``).

Example:
    >>> member = TransferMember(spec="paad:attacker=cache/paad,eps=0.075,transfer=true", eps="0.075",
    ...                         donor="zoo:hopper-ppo", donor_sha="ab" * 32, attack="paad:eps=0.075")
    >>> member.label
    'paad:eps=0.075 (from zoo:hopper-ppo)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rlgauntlet.gauntlet.plan import CURRICULUM, THREAT_OF_METHOD, AttackerTask, GauntletPlan, eps_value, with_eps
from rlgauntlet.gauntlet.protocols import EARLIER, Protocol


@dataclass(frozen=True)
class TransferMember:
    """One donor's director as a member of another agent's gauntlet."""

    spec: str  # the threat spec applied to the receiving agent
    eps: str  # as the protocol writes it
    donor: str  # the donor's agent spec
    donor_sha: str
    attack: str  # the director's label on its donor's result (e.g. paad@official:eps=0.075)

    @property
    def label(self) -> str:
        """How the receiving agent's result names it."""
        return f"{self.attack} (from {self.donor})"

    def describe(self) -> dict:
        return {"attack": self.label, "eps": self.eps, "donor": self.donor, "donor_sha256": self.donor_sha,
                "director": self.spec}


def plans_director(protocol: Protocol, plan: GauntletPlan, task: AttackerTask) -> bool:
    """Whether ``protocol`` (``plan``'s version, or the earlier one whose directors it keeps) plans
    ``task``'s director for ``plan``'s agent: its method, its setting (a director setting of that
    version, or one of its extra directors for that method at the plan's level) and, for an LSTM director, that
    version's LSTM directors (or the agent's ``lstm_directors``)."""
    methods = protocol.learned + protocol.learned_continuous
    settings = set(protocol.director_settings) | {s for s, _ in protocol.extra_directors_of(plan.level, task.method)} \
        | ({CURRICULUM} if protocol.curriculum_of(plan.level, plan.env, task.method) else set())
    lstm = plan.lstm_directors or task.method in protocol.recurrent_directors
    return task.method in methods and task.setting in settings and (lstm or not task.recurrent)


def strongest_directors(plan: GauntletPlan, means: dict[str, float], protocol: Protocol | None = None) -> list[AttackerTask]:
    """``plan``'s strongest directors at each ε it trained directors at: the
    ``protocol.transfer_directors`` lowest reported mean returns in ``means`` (label -> mean
    over every seed's episodes), strongest first, ε by ε in the plan's order; ties to the plan's
    order. A plan of several seeds trains one director per seed under one label (their episodes
    pooled): the first seed's is the one given. ``protocol``: the version whose pick this is,
    default the plan's; an earlier version (one of :attr:`Protocol.replays`) picks among the
    directors it plans itself only (:func:`plans_director`: those the plan's version added are left out)."""
    protocol = protocol or plan.protocol
    by_eps: dict[str, list[tuple[float, int, AttackerTask]]] = {}
    given: set[str] = set()
    for order, task in enumerate(plan.tasks):
        if task.method == "robust-sarsa" or task.label not in means or task.label in given \
                or not plans_director(protocol, plan, task):
            continue
        given.add(task.label)
        by_eps.setdefault(task.eps, []).append((means[task.label], order, task))
    count = protocol.transfer_directors
    return [task for ranked in by_eps.values() for _, _, task in sorted(ranked, key=lambda r: r[:2])[:count]]


def transfer_members(plans: Sequence[GauntletPlan], means: Sequence[dict[str, float]],
                     replayed: int | None = None) -> list[list[TransferMember]]:
    """For each plan, the transferred members it receives: every other plan's strongest
    directors (:func:`strongest_directors`, from its ``means``) on the same env, protocol and
    level, from a donor with another sha256, at an ε of the receiver's grid. ``replayed``: the
    members that earlier version of the plans' protocol would give, in its order (none for a plan
    whose protocol does not replay that version: :attr:`Protocol.replays`)."""
    from rlgauntlet.threats.spec import quote_value

    def picking(plan: GauntletPlan) -> Protocol | None:
        if replayed is None:
            chosen = plan.protocol
        elif replayed in plan.protocol.replays:
            chosen = EARLIER[f"{plan.protocol.name}@v{replayed}"]
        else:
            return None
        return chosen if plan.protocol.transfer and chosen.transfer else None

    pickers = [picking(plan) for plan in plans]
    donors = [strongest_directors(plan, m, p) if p else [] for plan, m, p in zip(plans, means, pickers)]
    out = []
    for receiver, picker in zip(plans, pickers):
        members = []
        if picker:
            grid = {eps_value(e): e for e in receiver.protocol.eps_grid}
            for donor, directors in zip(plans, donors):
                if donor is receiver or donor.sha == receiver.sha or donor.env != receiver.env \
                        or donor.protocol.tag != receiver.protocol.tag or donor.level != receiver.level:
                    continue
                for task in directors:
                    eps = grid.get(task.eps_value)
                    if eps is None:
                        continue
                    spec = with_eps(f"{THREAT_OF_METHOD[task.method]}:attacker={quote_value(task.folder)}", eps)
                    members.append(TransferMember(spec + ",transfer=true", eps, donor.spec.agent, donor.sha, task.label))
        out.append(members)
    return out
