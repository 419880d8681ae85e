"""The Threat interface and the threat registry.

A threat changes what the agent sees. The rollout engine knows threats only through this
interface: once per step it calls ``perturb(x, victim, rng)`` on the rows its schedule
selects, where ``x`` is the batched network input (see ``Victim.preprocess``).

A new threat is one class in one file, registered with :func:`register_threat`; its
parameters are a pydantic model, so the spec parser validates them and reports unknown
or bad values by name.

Example:
    >>> from rlgauntlet.threats import parse_threat
    >>> threat = parse_threat("uniform_noise:eps=1/255,p=0.5")
    >>> threat.name, threat.params.eps, threat.schedule.p
    ('uniform_noise', 0.00392156862745098, 0.5)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch
from pydantic import BaseModel, ConfigDict

from rlgauntlet.engine.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import Victim


class ThreatParams(BaseModel):
    """Base of every threat's parameter model (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Schedule:
    """When a threat acts: on each step independently with probability ``p`` (1 = every step)."""

    p: float = 1.0

    def mask(self, rng: BatchRNG) -> torch.Tensor:
        """Boolean (B,): which rows are perturbed this step."""
        if self.p >= 1.0:
            return torch.ones(len(rng), dtype=torch.bool, device=rng.device)
        return rng.bernoulli(self.p)


class Threat(ABC):
    """Base class of observation threats.

    Subclasses set ``name``, ``Params`` (a :class:`ThreatParams` model) and, when one of
    their parameters is a budget in the victim's input space, ``budget_params``.
    """

    name: ClassVar[str]
    Params: ClassVar[type[ThreatParams]]
    #: parameters that are sizes in the victim's input space (need a known budget space)
    budget_params: ClassVar[tuple[str, ...]] = ()
    #: True when ``perturb`` differentiates the victim
    white_box: ClassVar[bool] = False

    def __init__(self, params: ThreatParams, schedule: Schedule | None = None, spec: str | None = None) -> None:
        self.params = params
        self.schedule = schedule or Schedule()
        self.spec = spec or self.canonical_spec()

    @property
    def label(self) -> str:
        """The threat's name as the user wrote it (``pgd`` for ``pgd:objective=minbest``)."""
        return self.spec.split(":", 1)[0]

    def canonical_spec(self) -> str:
        items = [f"{k}={v}" for k, v in self.params.model_dump().items()]
        if self.schedule.p != 1.0:
            items.append(f"p={self.schedule.p}")
        return f"{self.name}:{','.join(items)}" if items else self.name

    def check_victim(self, victim: Victim) -> None:
        """Raise a :class:`UserError` when this threat cannot be applied to ``victim``."""
        if self.budget_params and getattr(victim, "budget_space", None) is None:
            names = ", ".join(self.budget_params)
            raise UserError(
                f"{self.name}: {names} has no unit because the agent's input space is unknown; "
                "pass --input-space pixel01|normalized|raw to say what the network input is"
            )

    @abstractmethod
    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        """Return the perturbed input, same shape as ``x`` (B, *input_shape)."""


THREATS: dict[str, type[Threat]] = {}


def register_threat(cls: type[Threat]) -> type[Threat]:
    """Class decorator: make ``cls`` constructible from spec strings by its ``name``."""
    if cls.name in THREATS:
        raise ValueError(f"threat {cls.name!r} registered twice")
    THREATS[cls.name] = cls
    return cls


def clip_to_input(x: torch.Tensor, victim: Victim) -> torch.Tensor:
    """Clamp ``x`` to the victim's valid input range (e.g. [0, 1] for pixel01), if it has one."""
    bounds = victim.input_bounds
    return x if bounds is None else x.clamp(bounds[0], bounds[1])
