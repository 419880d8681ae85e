"""Push: move a continuous victim's action along one fixed direction of its action space.

Maximise ⟨μ(x̃), d̂⟩, the victim's action (a deterministic policy's, or a Gaussian policy's
mean μ) projected on the unit direction d̂ = d/‖d‖, inside the ℓ∞ (or ℓ2) ε-ball of its input.
It is the PA-AD actor (Sun et al. 2022, "Who Is the Strongest Enemy?", the ``directional``
variant) driven by a *constant* director: at its default one FGSM step from the clean input,
the gradient of PA-AD's J = ‖μ(x̃) − μ(x)‖ + λ·cos(μ(x̃) − μ(x), d) has the sign of
∇⟨μ(x), d⟩, so both give the same x̃. A constant director is one policy of the PA-MDP, so the
return under a push bounds from above what the optimal PA-AD director achieves; a director
trained briefly is close to one, and was measured to be the strongest PA-AD director against
SA-PPO agents (docs/reproduction.md). Distance: ℓ∞ (or ℓ2) in the victim's budget space.
Continuous-action victims only.

Spec: ``push:eps=0.075,direction=1|-1|0`` (one number per action dimension; ``steps=10`` for PGD).
"""

from __future__ import annotations

import torch
from pydantic import Field, field_validator

from rlgauntlet.errors import UserError
from rlgauntlet.threats.attacks.base import AttackParams, GradientAttack
from rlgauntlet.threats.base import register_threat
from rlgauntlet.victims.base import PolicyOutput, Victim


@register_threat
class Push(GradientAttack):
    name = "push"
    family = "adversarial"
    kinds = ("gaussian", "deterministic")
    kinds_hint = "; for discrete victims use targeted (a fixed target action) or paad"

    class Params(AttackParams):
        direction: list[float] = Field(description="direction d in action space, one number per action dimension, "
                                                   "items separated by | (e.g. 1|-1|0)")
        steps: int = Field(1, ge=1, description="gradient steps (1 = FGSM, the PA-AD actor's default)")

        @field_validator("direction", mode="before")
        @classmethod
        def _one_number_is_a_list(cls, value):
            return [value] if isinstance(value, (int, float)) else value

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        dims = int(victim.action_space.shape[0])
        d = self.params.direction
        if len(d) != dims:
            raise UserError(f"push: direction has {len(d)} numbers but the agent's actions have {dims} dimensions; "
                            f"give one per dimension, e.g. direction={'|'.join(['1'] + ['0'] * (dims - 1))}")
        if not any(d):
            raise UserError("push: direction is all zeros; give a direction with a non-zero entry, e.g. 1|0|0")

    @torch.no_grad()
    def reference(self, x: torch.Tensor, victim: Victim) -> torch.Tensor:
        d = torch.tensor(self.params.direction, dtype=x.dtype, device=x.device)
        return d / d.norm()

    def loss(self, out: PolicyOutput, direction: torch.Tensor) -> torch.Tensor:
        action = out.central_action()
        return (action * direction.to(action)).sum(dim=-1)


#: up to this many action dimensions a push sweep tries every corner of the action cube
ALL_CORNERS_UP_TO = 4


def push_directions(dims: int) -> list[list[int]]:
    """The candidate directions of a push sweep in ``dims`` action dimensions: the 2·dims signed
    axes, then the corners of the action cube: every sign pattern up to
    ``ALL_CORNERS_UP_TO`` dimensions (Hopper's 3: 6 + 8 = 14 directions), else the two uniform
    ones ±(1, …, 1) (Walker2d's 6: 12 + 2), which keeps a sweep linear in ``dims``."""
    import itertools

    axes = [[sign if i == k else 0 for i in range(dims)] for k in range(dims) for sign in (1, -1)]
    if dims <= ALL_CORNERS_UP_TO:
        corners = [list(signs) for signs in itertools.product((1, -1), repeat=dims)]
    else:
        corners = [[1] * dims, [-1] * dims]
    return axes + corners


def direction_param(direction: list[int] | list[float]) -> str:
    """A direction as the spec writes it: ``1|-1|0``."""
    return "|".join(f"{v:g}" for v in direction)


def push_spec(eps: float, direction: list[int] | list[float], steps: int = 1) -> str:
    """The spec of a push (``push:eps=...,direction=1|-1|0``)."""
    return f"push:eps={eps:g},direction={direction_param(direction)}" + (f",steps={steps}" if steps != 1 else "")
