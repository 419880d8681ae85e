"""Unsafe target states: which observation coordinates an attack drives, and to what values.

A target is one item or a ``|``-list of items ``PART:VALUE`` where ``PART`` is

* a named part of the observation (``height``; every coordinate of a multi-valued part,
  e.g. ``orientations``, gets the value), see ``envs.presets.observation_layout``;
* one coordinate of a named part, ``position[1]`` (0-based);
* a flat index into the observation vector, ``3``.

The loss of a state s is the masked squared distance Σ_{j∈J} (s_j − target_j)² (Weng et
al. 2020, Eq. 3–4 with d on the task's coordinates only); an episode's total loss sums it
over the states after every step, a terminated episode's last state standing in for the
steps it did not live (:meth:`Target.episode_loss`).

Example:
    >>> t = parse_target(["position[1]:-1", "position[2]:0"], {"position": [0, 1, 2], "velocity": [3, 4]}, 5)
    >>> t.indices, t.values
    ([1, 2], [-1.0, 0.0])
    >>> float(t.distance(torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0]]))[0])
    4.0
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from rlgauntlet.errors import UserError

_ITEM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*|\d+)\s*(?:\[\s*(\d+)\s*\])?\s*:\s*(.+?)\s*$")


@dataclass(frozen=True)
class Target:
    """Target values of some coordinates of the flat observation."""

    indices: list[int]
    values: list[float]
    spec: str = ""

    def episode_loss(self, step_losses: list[float], max_steps: int | None) -> float:
        """Total loss of an episode from its per-step losses d(s_1) … d(s_L).

        An episode that ends before ``max_steps`` (the env's time limit) because the env
        terminated it (a fallen hopper) stays in its last state for the steps it did not
        live: d(s_L) is counted ``max_steps − L`` more times. Without that, ending early
        would lower the total loss, and a search for the lowest loss would look for short
        episodes rather than unsafe states.
        """
        total = float(sum(step_losses))
        if max_steps is not None and step_losses and len(step_losses) < max_steps:
            total += (max_steps - len(step_losses)) * step_losses[-1]
        return total

    def distance(self, states: torch.Tensor) -> torch.Tensor:
        """Σ_j (s_j − target_j)² over the target coordinates: (B, obs_dim) → (B,)."""
        values = torch.as_tensor(self.values, dtype=states.dtype, device=states.device)
        return ((states[:, self.indices] - values) ** 2).sum(dim=-1)


def parse_target(target: str | float | list, layout: dict[str, list[int]], obs_dim: int) -> Target:
    """Resolve a ``target=`` value against an env's observation layout (see module docstring)."""
    items = target if isinstance(target, list) else [target]
    indices: list[int] = []
    values: list[float] = []
    names = ", ".join(layout) if layout else "none known for this env: use flat indices"
    for item in items:
        match = _ITEM.match(str(item))
        if match is None:
            raise UserError(f"target item {item!r} is not PART:VALUE; write e.g. target=height:0 or "
                            f"target=position[1]:-1|position[2]:0 (parts: {names})")
        part, sub, value_text = match.groups()
        try:
            value = float(value_text)
        except ValueError:
            raise UserError(f"target item {item!r}: {value_text!r} is not a number") from None
        if part.isdigit():
            coords = [int(part)]
            if coords[0] >= obs_dim:
                raise UserError(f"target item {item!r}: index {part} is outside the observation (size {obs_dim})")
        elif part in layout:
            coords = layout[part]
            if sub is not None:
                if int(sub) >= len(coords):
                    raise UserError(f"target item {item!r}: {part} has {len(coords)} coordinates (0 to {len(coords) - 1})")
                coords = [coords[int(sub)]]
        else:
            raise UserError(f"target item {item!r}: the observation has no part {part!r} (parts: {names})")
        for c in coords:
            if c in indices:
                raise UserError(f"target: coordinate {c} is given twice")
            indices.append(c)
            values.append(value)
    spec = "|".join(str(i) for i in items)
    return Target(indices, values, spec)
