"""Action threats: change the action between the victim and ``env.step``.

Sizes are in env action units. The engine records, per perturbed step, the ℓ∞/ℓ2 size of
(executed − chosen action) and whether the executed action differs from the chosen one.

Example:
    >>> from rlgauntlet.threats import parse_threat
    >>> parse_threat("action_noise:std=0.1").place
    'action'
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Memory, Threat, ThreatParams, register_threat
from rlgauntlet.victims.base import Victim


def _box_bounds(space: gym.spaces.Box, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.as_tensor(space.low, dtype=like.dtype, device=like.device),
            torch.as_tensor(space.high, dtype=like.dtype, device=like.device))


def clip_to_action_space(actions: torch.Tensor, space: gym.spaces.Box) -> torch.Tensor:
    """Clamp continuous actions (B, D) to the box's bounds, per dimension (differentiable inside)."""
    low, high = _box_bounds(space, actions)
    return torch.maximum(torch.minimum(actions, high), low)


@register_threat
class ActionNoise(Threat):
    """Gaussian actuator noise a' = clip(a + std·N(0, I), low, high), continuous actions.

    Distance: unbounded; ``std`` is the per-dimension standard deviation in env action units
    (Pendulum torque in N·m, MuJoCo actuator controls). Drawn from the episode's threat stream.

    Example spec: ``action_noise:std=0.3`` (with ``p=0.5``: noisy on half the steps).
    """

    name = "action_noise"
    family = "natural"
    place = "action"

    class Params(ThreatParams):
        std: float = Field(ge=0.0, description="standard deviation in env action units")

    def check_victim(self, victim: Victim) -> None:
        if not isinstance(victim.action_space, gym.spaces.Box):
            raise UserError("action_noise adds Gaussian noise to continuous actions; for discrete actions use random_action:p=")

    def perturb_action(self, actions: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory) -> torch.Tensor:
        noisy = actions + self.params.std * rng.normal(actions.shape[1:]).to(actions)
        return clip_to_action_space(noisy, victim.action_space)


class _NoParams(ThreatParams):
    pass


@register_threat
class RandomAction(Threat):
    """Replace the agent's action by one drawn uniformly from the action space, on each step
    with probability ``p`` (the threat's schedule): a slipping actuator, ε-greedy noise.

    Discrete: uniform over the n actions (the draw may equal the chosen action, so the
    action-change rate is about (n−1)/n of ``p``). Box: uniform in [low, high] per dimension
    (the action space must be bounded).

    Example spec: ``random_action:p=0.1``.
    """

    name = "random_action"
    family = "natural"
    place = "action"
    Params = _NoParams

    def check_victim(self, victim: Victim) -> None:
        space = victim.action_space
        if isinstance(space, gym.spaces.Box) and not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise UserError("random_action needs a bounded action space; this agent's Box has infinite bounds")

    def perturb_action(self, actions: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory) -> torch.Tensor:
        space = victim.action_space
        if isinstance(space, gym.spaces.Discrete):
            u = rng.uniform(())
            return (space.start + (u * space.n).floor().clamp(max=space.n - 1)).to(actions.device, actions.dtype)
        low, high = _box_bounds(space, actions)
        return low + rng.uniform(actions.shape[1:]).to(actions) * (high - low)
