"""The actors of learned attackers: from an attacker's action to a perturbed input.

A learned attacker has two halves. A *director* (an RL policy, trained with SB3) looks at
the victim's clean network input ``x`` and picks an action; an *actor* turns that action
into the perturbed input ``x̃`` inside the ε-ball. The director's action space depends on
the method (Sun et al. 2022, "Who Is the Strongest Enemy?", PA-AD; Zhang et al. 2021, SA-RL):

=================  ======================  ===============================================
variant            director action         actor
=================  ======================  ===============================================
``stochastic``     d ∈ [−1,1]^{|A|−1}      max ‖π(x̃)−π(x)‖ + λ·cos(π(x̃)−π(x), d̂), where
                                           d̂ = [d, −Σd] sums to 0 (PA-AD Def. 6, App. C.2)
``deterministic``  a target action â ∈ A    targeted attack: make â the victim's choice
                                           (hinge or cross-entropy; PA-AD Def. 17)
``continuous``     a target action â ∈ A    min ‖μ(x̃) − â‖² (PA-AD App. C.3, G_CD)
``directional``    d ∈ [−1,1]^D             the stochastic J on the action mean μ:
                                           max ‖μ(x̃)−μ(x)‖ + λ·cos(μ(x̃)−μ(x), d)
                                           (the relaxed form of the official MuJoCo code)
``sarl``           δ ∈ [−1,1]^{dim x}       x̃ = x + ε·δ (ℓ∞), clipped to the input range
=================  ======================  ===============================================

π(·|x) is the softmax of the logits, or of the Q-values for DQN victims (Huang et al. 2017).
The PA-AD actors are projected gradient ascent (FGSM, one step of size ε, by default; PGD
with ``steps``), so ``‖x̃ − x‖∞ ≤ ε`` and ``x̃`` stays in the victim's input range.

Example:
    >>> import torch
    >>> zero_sum_direction(torch.tensor([[0.5, -0.2]]))
    tensor([[ 0.5000, -0.2000, -0.3000]])
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.attacks.base import AttackParams, EpsBall, GradientAttack
from rlgauntlet.threats.attacks.targeted import Targeted
from rlgauntlet.threats.base import clip_to_input
from rlgauntlet.victims.base import PolicyOutput, Victim

Variant = Literal["stochastic", "deterministic", "continuous", "directional", "sarl"]
PAAD_VARIANTS = ("stochastic", "deterministic", "continuous", "directional")


def zero_sum_direction(free: torch.Tensor) -> torch.Tensor:
    """The PA-AD direction [d, −Σd] from its |A|−1 free coordinates, shape (B, |A|)."""
    return torch.cat([free, -free.sum(dim=-1, keepdim=True)], dim=-1)


def default_variant(victim: Victim) -> str:
    """``stochastic`` for discrete victims (DQN through softmax(Q), as the paper's Table 1),
    ``directional`` for continuous ones (the form that reproduces the paper's MuJoCo tables)."""
    return "stochastic" if victim.is_discrete else "directional"


def check_variant(variant: str, victim: Victim) -> None:
    """Raise a :class:`UserError` when ``variant`` does not fit the victim's action space."""
    discrete_only, continuous_only = ("stochastic", "deterministic"), ("continuous", "directional")
    if victim.is_discrete and variant in continuous_only:
        raise UserError(f"variant {variant} is for continuous-action agents; this agent has "
                        f"{victim.action_space.n} discrete actions: use stochastic or deterministic")
    if not victim.is_discrete and variant in discrete_only:
        raise UserError(f"variant {variant} is for discrete-action agents; this agent's actions are continuous: "
                        "use continuous or directional")
    if variant == "stochastic" and victim.action_space.n < 2:
        raise UserError("variant stochastic needs at least 2 actions")


def director_action_space(variant: str, victim: Victim, input_shape: tuple[int, ...]) -> gym.Space:
    """The director's action space for ``variant`` (see the module table)."""
    check_variant(variant, victim)
    if variant == "stochastic":
        return gym.spaces.Box(-1.0, 1.0, (victim.action_space.n - 1,), np.float32)
    if variant == "deterministic":
        return gym.spaces.Discrete(victim.action_space.n)
    if variant == "continuous":
        space = victim.action_space
        return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32)
    if variant == "directional":
        return gym.spaces.Box(-1.0, 1.0, victim.action_space.shape, np.float32)
    return gym.spaces.Box(-1.0, 1.0, (int(np.prod(input_shape)),), np.float32)


def policy_vector(out: PolicyOutput) -> torch.Tensor:
    """What PA-AD's directional objective moves: π(·|x) for discrete victims (softmax of the
    logits or Q-values), the action mean for continuous ones; shape (B, |A|) or (B, D)."""
    if out.kind in ("q", "categorical"):
        return torch.softmax(out.scores(), dim=-1)
    return out.central_action()


class DirectionalObjective(GradientAttack):
    """PA-AD's relaxed actor objective J(x̃) = ‖v(x̃) − v(x)‖₂ + λ·cos(v(x̃) − v(x), d), with
    v = :func:`policy_vector` and one direction d per row (not registered as a threat: the
    direction comes from the director)."""

    name = "paad-actor"

    class Params(AttackParams):
        steps: int = Field(1, ge=1, description="gradient steps (1 = FGSM, the paper's default)")
        lam: float = Field(1.0, ge=0.0, description="weight λ of the cosine term (paper default 1)")

    def loss(self, out: PolicyOutput, ref: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        clean, direction = ref
        change = policy_vector(out) - clean
        return change.norm(dim=-1) + self.params.lam * F.cosine_similarity(change, direction.to(change), dim=-1)


class AttackActor:
    """Turns director actions into perturbed inputs, batched over rows.

    Args:
        variant: one of ``stochastic``, ``deterministic``, ``continuous``, ``directional``, ``sarl``.
        eps: ℓ∞ budget in the victim's budget space.
        steps: gradient steps of the PA-AD actor (1 = FGSM); the step size is ε for one
            step and ε/10 for PGD (the paper's robust-Atari setting), unless ``step`` is given.
        lam: λ of the directional objective.
        loss: ``hinge`` or ``ce`` for the deterministic (targeted) actor.
    """

    def __init__(self, variant: str, eps: float, steps: int = 1, step: float | None = None, lam: float = 1.0,
                 loss: str = "hinge") -> None:
        if variant not in (*PAAD_VARIANTS, "sarl"):
            raise UserError(f"unknown attacker variant {variant!r}; choose one of {', '.join((*PAAD_VARIANTS, 'sarl'))}")
        self.variant, self.eps = variant, float(eps)
        step = step if step is not None else (self.eps if steps == 1 else self.eps / 10)
        common: dict[str, Any] = dict(eps=self.eps, steps=steps, step=step if self.eps > 0 else None)
        if variant in ("deterministic", "continuous"):
            self.solver: GradientAttack | None = Targeted(Targeted.Params(**common, loss=loss))
        elif variant in ("stochastic", "directional"):
            self.solver = DirectionalObjective(DirectionalObjective.Params(**common, lam=lam))
        else:
            self.solver = None

    def perturb(self, x: torch.Tensor, victim: Victim, director_actions: torch.Tensor, rng: BatchRNG,
                clean_out: PolicyOutput | None = None) -> torch.Tensor:
        """Perturbed inputs (B, *input_shape) for clean inputs ``x`` and director actions
        (B, k) float or (B,) long for ``deterministic``. ``clean_out``: the victim's output on
        ``x`` where the caller has it already (it is computed otherwise)."""
        x = x.detach()
        if self.eps == 0:
            return x.clone()
        if self.variant == "sarl":
            delta = director_actions.to(x).clamp(-1.0, 1.0).reshape(x.shape) * self.eps
            return clip_to_input(x + delta, victim)
        if self.variant == "deterministic":
            return self._solve(x, victim, director_actions.reshape(-1).long().to(x.device), rng)
        if self.variant == "continuous":
            return self._solve(x, victim, director_actions.to(x), rng)
        if self.solver.params.steps == 1 and self.solver.params.lam > 0:
            x_adv = self._fgsm_at_clean(x, victim, director_actions)
            if x_adv is not None:
                return x_adv
        with torch.no_grad():
            clean = policy_vector(clean_out if clean_out is not None else victim.forward(x))
        direction = director_actions.to(clean)
        if self.variant == "stochastic":
            direction = zero_sum_direction(direction)
        return self._solve(x, victim, (clean, direction), rng)

    def _fgsm_at_clean(self, x: torch.Tensor, victim: Victim, director_actions: torch.Tensor) -> torch.Tensor | None:
        """The directional FGSM in one forward pass and one hand-walked VJP, where the victim
        offers them (:meth:`Victim.output_and_vjp`; None otherwise).

        FGSM starts at x, where the change v(x̃) − v(x) is 0: there the norm term's gradient is
        0 and the cosine term's is d/(c·‖d‖) per row (c > 0, cosine_similarity's clamp), so
        sign(∇J) = sign(∇ₓ⟨v(x), d⟩), the gradient of a linear function of v. For a Gaussian
        victim v is its mean (the cotangent is d); for a discrete one v = softmax(s) of its
        scores, whose VJP is p ⊙ (d − ⟨p, d⟩)."""
        direction = director_actions.to(device=x.device, dtype=victim.dtype)
        if self.variant == "stochastic":
            direction = zero_sum_direction(direction)

        def cotangent(out: torch.Tensor) -> torch.Tensor:
            if not victim.is_discrete:
                return direction
            p = torch.softmax(out, dim=-1)
            return p * (direction - (p * direction).sum(dim=-1, keepdim=True))

        found = victim.output_and_vjp(x, cotangent)
        return None if found is None else self._fgsm_step(x, victim, found[1])

    def _solve(self, x: torch.Tensor, victim: Victim, ref: Any, rng: BatchRNG) -> torch.Tensor:
        """FGSM exactly as the paper's Algorithm 1 (x + ε·sign(∇J), always on the boundary
        where the gradient is non-zero); PGD keeps each row's best iterate."""
        with torch.enable_grad():
            if self.solver.params.steps > 1:
                return self.solver.ascend(x, victim, ref, rng)
            _, grad = self.solver.loss_and_gradient(x, victim, ref)
        return self._fgsm_step(x, victim, grad)

    def _fgsm_step(self, x: torch.Tensor, victim: Victim, grad: torch.Tensor) -> torch.Tensor:
        """x + ε·sign(grad), projected onto the ball and the input range."""
        if not torch.isfinite(grad).all():
            raise UserError("the attacker's actor gradient became non-finite; use a smaller eps")
        ball = EpsBall(x, self.eps, "linf", victim)
        return ball.project(x + self.solver.ascent_step(grad)).detach()
