"""The certification arithmetic on interval bounds of action scores (RADIAL-RL §4): which
actions an ε-ball can make the argmax (the feasible set Γ), whether the nominal action is
certified, and by what margin. Scores are Q-values or logits, shape (B, A); bounds from
:func:`rlgauntlet.bounds.ibp`.

Example:
    >>> import torch
    >>> nominal = torch.tensor([[0.7, 0.2, 0.0]])
    >>> lower, upper = nominal - 0.1, nominal + 0.1
    >>> certified(nominal, lower, upper).tolist(), round(float(certified_margin(nominal, lower, upper)), 6)
    ([True], 0.3)
"""

from __future__ import annotations

import torch

from rlgauntlet.bounds.ibp import ibp
from rlgauntlet.victims.base import Victim


def score_bounds(victim: Victim, x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Nominal action scores (Q-values or logits) and their IBP bounds, each (B, A)."""
    with torch.no_grad():
        nominal = victim.forward(x).scores()
        lower, upper = ibp(victim, x, eps)
    return nominal, lower, upper


def feasible_actions(lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """(B, A) bool: actions some input of the ball could make the argmax (Γ of the paper)."""
    return upper >= lower.max(dim=-1, keepdim=True).values


def certified_margin(nominal: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """(B,) the nominal argmax's lower bound minus the largest upper bound of the other actions:
    > 0 where the action is certified, and how far from it (in score units) where not."""
    chosen = nominal.argmax(dim=-1)
    others = upper.scatter(-1, chosen[:, None], float("-inf")).max(dim=-1).values
    return lower.gather(-1, chosen[:, None]).squeeze(-1) - others


def certified(nominal: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the nominal argmax keeps its place for every input of the ball."""
    return certified_margin(nominal, lower, upper) > 0


def score_gap(nominal: torch.Tensor) -> torch.Tensor:
    """(B,) the nominal best score minus the second best: the margin bounds must stay within."""
    top = nominal.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]
