"""The Threat interface and the threat registry.

A threat changes what the agent sees, what it does, or the world it lives in. The rollout
engine knows threats only through this interface, at three places (``Threat.place``):

* ``observation``: once per step, ``perturb(x, victim, rng)`` changes the batched network
  input ``x`` (see ``Victim.preprocess``) on the rows the schedule selects;
* ``action``: once per step, ``perturb_action(actions, victim, rng, memory)`` changes the
  batched actions between the victim and ``env.step`` (in action units);
* ``world``: at an episode's reset, ``enter_world(env)`` changes the env for the whole
  episode and returns what it set; after the episode ``exit_world`` restores it.

Threats with memory (a delay line, a frozen sensor, an attacker's recurrent state) keep one
state per episode: the engine asks ``new_state()`` when the episode starts, hands the
states of the batch's rows to :meth:`Threat.apply` in a :class:`Memory` together with each
row's step index and env, and drops them when the episode ends. Because the state belongs
to the episode, not to the env slot, results stay independent of ``--n-envs``.

A new threat is one class in one file, registered with :func:`register_threat`; its
parameters are a pydantic model, so the spec parser validates them and reports unknown
or bad values by name.

Example:
    >>> from rlgauntlet.threats import parse_threat
    >>> threat = parse_threat("uniform_noise:eps=1/255,p=0.5")
    >>> threat.name, threat.params.eps, threat.schedule.p, threat.place
    ('uniform_noise', 0.00392156862745098, 0.5, 'observation')
"""

from __future__ import annotations

from abc import ABC
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym
import torch
from pydantic import BaseModel, ConfigDict, model_validator

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import Victim

Place = Literal["observation", "action", "world"]


class ThreatParams(BaseModel):
    """Base of every threat's parameter model: unknown keys are errors, numbers must be finite,
    and ``true``/``false`` are not numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, values):
        if isinstance(values, dict):
            for key, value in values.items():
                field = cls.model_fields.get(key)
                if isinstance(value, bool) and field is not None and "bool" not in str(field.annotation):
                    raise ValueError(f"{key}={str(value).lower()} is a boolean, not a number")
        return values


@dataclass(frozen=True)
class Schedule:
    """When a threat acts: on each step independently with probability ``p`` (1 = every step).

    World threats act on whole episodes: ``p`` is the probability that an episode's world is
    changed (drawn once, at its reset).
    """

    p: float = 1.0

    def mask(self, rng: BatchRNG) -> torch.Tensor:
        """Boolean (B,): which rows are perturbed this step."""
        if self.p >= 1.0:
            return torch.ones(len(rng), dtype=torch.bool, device=rng.device)
        return rng.bernoulli(self.p)


@dataclass
class Memory:
    """What a threat may know about the rows of one batched step besides their input.

    Attributes:
        states: one per row, the object the threat's ``new_state()`` made when the row's
            episode started (mutate it in place to remember things).
        steps: (B,) long, each row's step index within its episode (0 at the first step).
        envs: each row's env (read it, snapshot it; step it only between a snapshot and its
            restore, as best-of-m searches do).
        observations: each row's env observation of this step, before preprocessing (the true
            state a model-based planner starts from).
        episodes: each row's episode index (the engine's ``k``, whose env seed is ``seed + k``;
            a training env's episode count), where the caller knows it.
    """

    states: list[Any]
    steps: torch.Tensor
    envs: list[gym.Env] = field(default_factory=list)
    observations: list[Any] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)

    def rows(self, mask: torch.Tensor) -> "Memory":
        """The memory of the rows where ``mask`` is true."""
        idx = mask.nonzero().flatten().tolist()
        pick = lambda values: [values[i] for i in idx] if values else []  # noqa: E731
        return Memory(pick(self.states), self.steps[mask], pick(self.envs), pick(self.observations),
                      pick(self.episodes))


class Threat(ABC):
    """Base class of every threat.

    Subclasses set ``name``, ``Params`` (a :class:`ThreatParams` model), ``place`` and, when
    one of their parameters is a budget in the victim's input space, ``budget_params``; then
    implement the method of their place: :meth:`perturb` (observation), :meth:`perturb_action`
    (action) or :meth:`enter_world` (world). Threats with memory override :meth:`new_state`
    and, when they must see every step (not only the scheduled ones), :meth:`apply`.
    """

    name: ClassVar[str]
    #: which section of the report shows it: one of :data:`FAMILIES`
    family: ClassVar[str]
    #: a gradient objective: ``fgsm:objective=NAME`` and ``pgd:objective=NAME`` run it
    objective: ClassVar[bool] = False
    Params: ClassVar[type[ThreatParams]]
    place: ClassVar[Place] = "observation"
    #: parameters that are sizes in the victim's input space (need a known budget space)
    budget_params: ClassVar[tuple[str, ...]] = ()
    #: True when ``perturb`` differentiates the victim
    white_box: ClassVar[bool] = False
    #: why this threat cannot attack a recurrent victim (it runs the victim on inputs of other
    #: steps than the current one, whose states the engine does not hold); None: it can
    not_recurrent: ClassVar[str | None] = None
    #: parameters that name a file or folder the threat loads: a results store keys a run by
    #: their last path component and by the files' content (:meth:`fingerprint`), never by where
    #: they lie (:func:`rlgauntlet.threats.spec.key_spec`)
    file_params: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: ThreatParams, schedule: Schedule | None = None, spec: str | None = None) -> None:
        self.params = params
        self.schedule = schedule or Schedule()
        self.spec = spec or self.canonical_spec()

    @property
    def label(self) -> str:
        """The threat's name as the user wrote it (``pgd`` for ``pgd:objective=minbest``)."""
        return self.spec.split(":", 1)[0]

    def canonical_spec(self) -> str:
        items = [f"{k}={v}" for k, v in self.params.model_dump().items() if v is not None]
        if self.schedule.p != 1.0:
            items.append(f"p={self.schedule.p}")
        return f"{self.name}:{','.join(items)}" if items else self.name

    def measure_space(self, victim: Victim) -> str:
        """The unit of the recorded ℓ∞/ℓ2 sizes: the victim's budget space for observation
        threats, ``action`` (env action units) for action threats, ``world`` (none) for world threats."""
        if self.place == "action":
            return "action"
        if self.place == "world":
            return "world"
        return str(victim.budget_space)

    def fingerprint(self) -> dict:
        """What, beyond the spec, decides this threat's perturbations: the sha256 of the files it
        loads (a learned attacker's director, a Q function, a dynamics model), so a results store
        never takes a run made with an earlier file in the same folder for this one. Empty for
        threats that load nothing."""
        return {}

    # -- checks before anything runs ------------------------------------------------------
    def check_victim(self, victim: Victim) -> None:
        """Raise a :class:`UserError` when this threat cannot be applied to ``victim``."""
        if getattr(victim, "recurrent", False) and self.not_recurrent is not None:
            raise UserError(f"{self.name} cannot attack a recurrent (LSTM) agent: {self.not_recurrent}; choose a "
                            "threat that acts one step at a time (e.g. pgd, fgsm, random, paad, sarl)")
        if self.budget_params and getattr(victim, "budget_space", None) is None:
            names = ", ".join(self.budget_params)
            raise UserError(
                f"{self.name}: {names} has no unit because the agent's input space is unknown; "
                "pass --input-space pixel01|normalized|raw to say what the network input is"
            )

    def check_env(self, env: gym.Env, env_id: str) -> None:
        """Raise a :class:`UserError` when this threat cannot act on ``env`` (e.g. an unknown
        physics parameter). Called with one env of the evaluation before it runs."""

    # -- memory -----------------------------------------------------------------------------
    def new_state(self) -> Any:
        """The per-episode state of a threat with memory (None for memoryless threats)."""
        return None

    # -- observation threats ------------------------------------------------------------------
    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        """Return the perturbed input, same shape as ``x`` (B, *input_shape). ``x`` itself must
        not be changed: the engine measures the perturbation and the action change against it."""
        raise NotImplementedError(f"{self.name} is a {self.place} threat")

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One batched step of an observation threat over every active row.

        ``scheduled`` (B,) says which rows the schedule selected; ``rng`` holds every row's
        threat stream. Returns the input the victim acts on and the rows that were changed
        (``acted``, recorded as perturbed). The default perturbs the scheduled rows with
        :meth:`perturb`; threats with memory override it to see every step.
        """
        if not scheduled.any():
            return x, scheduled
        with torch.enable_grad():
            if scheduled.all():  # the usual case: no boolean-index copies of the batch
                return self.perturb(x, victim, rng).detach(), scheduled
            out = x.clone()
            out[scheduled] = self.perturb(x[scheduled], victim, rng.subset(scheduled)).detach()
        return out, scheduled

    # -- action threats ---------------------------------------------------------------------
    def perturb_action(self, actions: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory) -> torch.Tensor:
        """Return the executed actions for the scheduled rows: (B,) long for discrete action
        spaces, (B, D) float in env units for boxes (inside the action space)."""
        raise NotImplementedError(f"{self.name} is a {self.place} threat")

    # -- world threats ------------------------------------------------------------------------
    def enter_world(self, env: gym.Env) -> dict:
        """Change ``env`` for the coming episode (called before its seeded reset); return what
        was set, e.g. ``{"param": "length", "default": 0.5, "value": 2.0}``."""
        raise NotImplementedError(f"{self.name} is a {self.place} threat")

    def exit_world(self, env: gym.Env) -> None:
        """Undo :meth:`enter_world` exactly (called when the episode ends)."""
        raise NotImplementedError(f"{self.name} is a {self.place} threat")


THREATS: dict[str, type[Threat]] = {}


#: threat families, each a section of the report: natural changes of the world (perturbations,
#: corruptions, noise, memory, actions, physics), gradient attacks, learned attackers, model-based attacks
FAMILIES = ("natural", "adversarial", "learned", "model_based")


def register_threat(cls: type[Threat]) -> type[Threat]:
    """Class decorator: make ``cls`` constructible from spec strings by its ``name``."""
    if cls.name in THREATS:
        raise ValueError(f"threat {cls.name!r} registered twice")
    if getattr(cls, "family", None) not in FAMILIES:
        raise ValueError(f"threat {cls.name!r} declares no family; set family to one of {', '.join(FAMILIES)}")
    THREATS[cls.name] = cls
    return cls


def perturb_once(threat: Threat, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
    """Every row of ``x`` perturbed as on the first step of a fresh episode, through the same
    applier the engine and training under a threat use (:meth:`Threat.apply`): what a spectrum
    or an example frame shows."""
    rows = x.shape[0]
    memory = Memory([threat.new_state() for _ in range(rows)], torch.zeros(rows, dtype=torch.long, device=x.device))
    out, _ = threat.apply(x, victim, rng, memory, torch.ones(rows, dtype=torch.bool, device=x.device))
    return out


def objectives() -> tuple[str, ...]:
    """The registered gradient objectives (threats with ``objective = True``), in registration order."""
    return tuple(name for name, cls in THREATS.items() if cls.objective)


def clip_to_input(x: torch.Tensor, victim: Victim) -> torch.Tensor:
    """Clamp ``x`` to the victim's valid input range (e.g. [0, 1] for pixel01), if it has one."""
    bounds = victim.input_bounds
    return x if bounds is None else x.clamp(bounds[0], bounds[1])
