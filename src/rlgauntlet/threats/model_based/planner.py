"""Unrolled optimisation of T perturbations through the victim and a dynamics model.

Weng et al. (ICLR 2020), Eq. 3 (observations) and Eq. 4 (actions): from the true state s₀,

    min_δ Σ_{i=1..T} d(s_i, s_target),   obs:    a_i = π(x(s_i) + δ_i),  s_{i+1} = f(s_i, a_i)
                                          action: a_i = π(x(s_i)),        s_{i+1} = f(s_i, clip(a_i + δ_i))

with ‖δ_i‖∞ ≤ ε, solved by Adam (``steps`` iterations, learning rate ``lr``) on δ, projected
onto the ε-box after every step; x(s) is the victim's preprocessing (its observation
normalisation), so an observation ε lives in the victim's budget space as for every other
observation threat. δ starts at 0. Inside the unroll an observation δ is clipped to the
victim's input bounds and a perturbed action to the action bounds, as the env would.
Of the iterates evaluated (δ = 0 first), the one with the lowest predicted loss is kept
per row, so a plan never predicts worse than no attack. Rows are planned together (one
batch) and independently: Adam is elementwise and the loss is a sum over rows.
"""

from __future__ import annotations

from typing import Literal

import torch

from rlgauntlet.threats.actions import clip_to_action_space
from rlgauntlet.threats.model_based.model import DynamicsModel
from rlgauntlet.threats.model_based.target import Target
from rlgauntlet.victims.base import Victim

Mode = Literal["observation", "action"]


def _policy_action(victim: Victim, x: torch.Tensor) -> torch.Tensor:
    """The victim's deterministic action on network input ``x``, differentiable (B, act_dim)."""
    return victim.actions(victim.forward(x), deterministic=True).reshape(x.shape[0], -1)


def unroll_loss(victim: Victim, model: DynamicsModel, s0: torch.Tensor, delta: torch.Tensor, target: Target,
                mode: Mode) -> torch.Tensor:
    """Predicted Σ_{i=1..T} d(s_i, target) per row for perturbations ``delta`` (B, T, dim): (B,)."""
    s, loss = s0, torch.zeros(s0.shape[0], dtype=s0.dtype, device=s0.device)
    bounds = victim.input_bounds
    for k in range(delta.shape[1]):
        x = victim.preprocess(s)
        if mode == "observation":
            x_in = x + delta[:, k].reshape(x.shape).to(x.dtype)
            if bounds is not None:
                x_in = x_in.clamp(bounds[0], bounds[1])
            a = _policy_action(victim, x_in)
        else:
            a = _policy_action(victim, x)
            a = clip_to_action_space(a + delta[:, k].to(a.dtype), victim.action_space)
        s = model(s, a.to(s.dtype))
        loss = loss + target.distance(s)
    return loss


def plan(victim: Victim, model: DynamicsModel, s0: torch.Tensor, target: Target, mode: Mode, eps: float,
         horizon: int, lr: float, steps: int, dim: int, init: str = "zero") -> tuple[torch.Tensor, torch.Tensor]:
    """Optimise ``horizon`` perturbations of size ``dim`` for each row of ``s0`` (B, obs_dim).

    ``init``: where δ starts, ``zero`` or ``flip`` (−ε·sign of the current input, or of the
    agent's current action, for every planned step: the flip baseline's perturbation, so the
    kept plan never predicts worse than flip). Returns the plan (B, horizon, dim), each entry
    in [−ε, ε], and its predicted loss (B,).
    """
    s0 = s0.to(victim.dtype)
    start = torch.zeros(s0.shape[0], horizon, dim, dtype=victim.dtype, device=s0.device)
    if init == "flip":
        with torch.no_grad():
            x0 = victim.preprocess(s0)
            now = x0 if mode == "observation" else _policy_action(victim, x0)
            start = start - eps * torch.sign(now.reshape(s0.shape[0], 1, dim).to(start.dtype))
    delta = start.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([delta], lr=lr)
    best = delta.detach().clone()
    best_loss = torch.full((s0.shape[0],), float("inf"), dtype=victim.dtype, device=s0.device)
    with torch.enable_grad():
        for step in range(steps + 1):
            loss = unroll_loss(victim, model, s0, delta, target, mode)
            better = loss.detach() < best_loss
            best[better] = delta.detach()[better]
            best_loss = torch.where(better, loss.detach(), best_loss)
            if step == steps:
                break
            optimizer.zero_grad()
            loss.sum().backward()
            optimizer.step()
            with torch.no_grad():
                delta.clamp_(-eps, eps)
    return best, best_loss
