"""Observation threats with memory: what the agent sees depends on earlier steps.

Each keeps one state per episode (``new_state``), which the engine creates when the
episode starts and drops when it ends, so results stay independent of ``--n-envs``. Both
see every step (to remember it), and act on the steps the schedule or their own rule picks.

Example:
    >>> from rlgauntlet.threats import parse_threat
    >>> parse_threat("obs_delay:steps=2").params.steps
    2
"""

from __future__ import annotations

from collections import deque

import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.threats.base import Memory, Threat, ThreatParams, register_threat
from rlgauntlet.victims.base import Victim


@register_threat
class ObsDelay(Threat):
    """The agent sees the observation of ``steps`` steps ago (a slow sensor or link).

    At step t the input is x[t − k]; the first k steps of an episode see its first
    observation. With ``p`` < 1 each step independently sees the delayed or the current
    observation. The delay line holds network inputs, so the frame stack of an Atari agent
    is delayed as a whole.

    Example spec: ``obs_delay:steps=2``.
    """

    name = "obs_delay"
    family = "natural"

    class Params(ThreatParams):
        steps: int = Field(ge=1, le=1000, description="delay k in agent steps")

    def new_state(self) -> deque:
        return deque(maxlen=self.params.steps + 1)

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for line, row in zip(memory.states, x):
            if not line:  # first step: the line is filled with the first observation
                line.extend([row] * line.maxlen)
            else:
                line.append(row)
        delayed = torch.stack([line[0] for line in memory.states])
        return torch.where(scheduled.reshape(-1, *([1] * (x.ndim - 1))), delayed, x), scheduled


@register_threat
class FrameFreeze(Threat):
    """A frozen sensor: on each step, with probability ``p`` (the schedule), the sensor starts
    repeating its last reading for ``duration`` steps.

    A freeze that starts at step t shows the reading of step t − 1 at steps t … t + duration − 1
    (at t = 0, the first reading); a start while frozen is ignored. Perturbed steps are the
    frozen ones.

    Example spec: ``frame_freeze:p=0.05,duration=10``.
    """

    name = "frame_freeze"
    family = "natural"

    class Params(ThreatParams):
        duration: int = Field(ge=1, le=100_000, description="steps a freeze lasts")

    def new_state(self) -> dict:
        return {"last": None, "held": None, "left": 0}

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows, frozen = [], []
        for state, row, start in zip(memory.states, x, scheduled.tolist()):
            if state["left"] == 0 and start:
                state["held"] = row if state["last"] is None else state["last"]
                state["left"] = self.params.duration
            is_frozen = state["left"] > 0
            if is_frozen:
                state["left"] -= 1
                row = state["held"]
            frozen.append(is_frozen)
            state["last"] = row
            rows.append(row)
        return torch.stack(rows), torch.tensor(frozen, dtype=torch.bool, device=x.device)
