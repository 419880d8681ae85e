"""Shared machinery of white-box gradient attacks (FGSM / PGD family).

Every attack maximises a per-sample loss of the victim's output over the ε-ball around the
clean input ``x`` (ℓ∞ or ℓ2, in the victim's budget space), batched over envs: the loss of
each row only depends on that row, so one backward pass gives every row's gradient.
After each step the iterate is projected onto the ball and clipped to the victim's valid
input range (pixels stay in [0, 1]).

Uniform constructor (spec keys): ``eps``, ``norm`` (linf | l2), ``steps`` (1 = FGSM),
``step`` (step size; default ε for one step, 2.5·ε/steps otherwise, Madry et al.),
``random_start``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Threat, ThreatParams, clip_to_input
from rlgauntlet.victims.base import PolicyOutput, Victim


class AttackParams(ThreatParams):
    eps: float = Field(ge=0.0, description="budget (radius of the ε-ball) in the victim's budget space")
    norm: Literal["linf", "l2"] = "linf"
    steps: int = Field(10, ge=1, description="gradient steps (1 = FGSM)")
    step: float | None = Field(None, gt=0.0, description="step size; default ε/steps·2.5 (ε for one step)")
    random_start: bool = False
    restarts: int = Field(1, ge=1, description="runs from fresh random starts (the first as random_start says); best kept")


def flat_norm(t: torch.Tensor, p: float) -> torch.Tensor:
    """Per-row norm, shaped to broadcast against ``t``."""
    n = t.reshape(t.shape[0], -1).norm(p=p, dim=1)
    return n.reshape(-1, *([1] * (t.ndim - 1)))


class EpsBall:
    """The feasible set of an attack on clean input ``x`` (B, ...): the ``norm`` ball of radius
    ``eps`` around each row, intersected with the victim's valid input range.

    For ℓ∞ the set is a box whose corners are computed once, so projecting an iterate is a
    single clamp (an attack projects once per iteration).
    """

    def __init__(self, x: torch.Tensor, eps: float, norm: str, victim: Victim) -> None:
        self.x, self.eps, self.norm, self.victim = x, eps, norm, victim
        if norm == "linf":
            self.low = clip_to_input(x - eps, victim)
            self.high = clip_to_input(x + eps, victim)

    def project(self, x_adv: torch.Tensor) -> torch.Tensor:
        """The point of the set nearest to ``x_adv`` (for ℓ2: radial shrink, then clip to range)."""
        if self.norm == "linf":
            return torch.clamp(x_adv, self.low, self.high)
        delta = x_adv - self.x
        scale = (self.eps / flat_norm(delta, 2).clamp_min(1e-12)).clamp(max=1.0)
        return clip_to_input(self.x + delta * scale, self.victim)


def random_in_ball(rng: BatchRNG, shape: tuple[int, ...], eps: float, norm: str) -> torch.Tensor:
    """Random offsets inside the ball: uniform in the ℓ∞ box, or uniform in the ℓ2 ball."""
    if norm == "linf":
        return rng.uniform(shape, -eps, eps)
    direction = rng.normal(shape)
    direction = direction / flat_norm(direction, 2).clamp_min(1e-12)
    dim = direction[0].numel()
    radius = rng.uniform(()) ** (1.0 / dim) * eps
    return direction * radius.reshape(-1, *([1] * len(shape)))


class GradientAttack(Threat):
    """Base of the gradient attacks: projected (sign-)gradient ascent on :meth:`loss`.

    Subclasses set ``name``, optionally ``Params`` (extending :class:`AttackParams`) and
    ``kinds`` (the victim kinds the objective fits), and implement :meth:`loss`.
    """

    Params: ClassVar[type[AttackParams]] = AttackParams
    budget_params = ("eps",)
    white_box = True
    kinds: ClassVar[tuple[str, ...]] = ("q", "categorical", "gaussian", "deterministic")
    kinds_hint: ClassVar[str] = ""
    default_random_start: ClassVar[bool] = False

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        if victim.kind not in self.kinds:
            raise UserError(
                f"{self.name} does not apply to a {victim.kind} policy (it needs {' or '.join(self.kinds)}){self.kinds_hint}"
            )

    @property
    def step_size(self) -> float:
        p = self.params
        if p.step is not None:
            return p.step
        return p.eps if p.steps == 1 else 2.5 * p.eps / p.steps

    @torch.no_grad()
    def reference(self, x: torch.Tensor, victim: Victim) -> Any:
        """What the loss compares against, computed once on the clean input (default: its output)."""
        return victim.forward(x)

    @abstractmethod
    def loss(self, out: PolicyOutput, ref: Any) -> torch.Tensor:
        """Per-row loss to *maximise*, shape (B,)."""

    @classmethod
    def measure(cls, victim: Victim, x: torch.Tensor, x_adv: torch.Tensor) -> torch.Tensor:
        """What this attack achieves on each state, in its own objective's units, (B,): the
        quantity the false-robustness checks compare with random noise (not the surrogate loss
        the gradient follows). Attacks that declare no measure are not checked."""
        raise NotImplementedError(f"{cls.name} declares no per-state measure of its objective")

    def loss_and_gradient(self, x_adv: torch.Tensor, victim: Victim, ref: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row loss at ``x_adv`` (B,) and its gradient with respect to ``x_adv``."""
        z = x_adv.detach().requires_grad_(True)
        loss = self.loss(victim.forward(z), ref)
        (grad,) = torch.autograd.grad(loss.sum(), z)
        return loss.detach(), grad

    def ascent_step(self, grad: torch.Tensor) -> torch.Tensor:
        """The move for one iteration: step·sign(g) (ℓ∞) or step·g/‖g‖₂ (ℓ2)."""
        if self.params.norm == "linf":
            return self.step_size * grad.sign()
        return self.step_size * grad / flat_norm(grad, 2).clamp_min(1e-12)

    def start(self, ball: EpsBall, rng: BatchRNG, random: bool | None = None) -> torch.Tensor:
        """The first iterate: the clean input, or a random point of ``ball`` (random start)."""
        p, x = self.params, ball.x
        if (p.random_start if random is None else random) and p.eps > 0:
            return ball.project(x + random_in_ball(rng, tuple(x.shape[1:]), p.eps, p.norm).to(x))
        return x.clone()

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        x = x.detach()
        return self.ascend(x, victim, self.reference(x, victim), rng)

    def ascend(self, x: torch.Tensor, victim: Victim, ref: Any, rng: BatchRNG) -> torch.Tensor:
        """Projected ascent of ``loss(·, ref)`` from :meth:`start`, ``steps`` iterations.

        Returns, per row, the iterate with the highest loss (the last one cannot be worse
        than the best seen, which matters when sign steps oscillate around a boundary).
        """
        best, best_loss = x, None
        ball = EpsBall(x, self.params.eps, self.params.norm, victim)
        for restart in range(self.params.restarts):
            x_adv = self.start(ball, rng, random=None if restart == 0 else True)
            for i in range(self.params.steps):
                loss, grad = self.loss_and_gradient(x_adv, victim, ref)
                if not (torch.isfinite(loss).all() and torch.isfinite(grad).all()):
                    raise UserError(f"{self.spec}: the attack's loss or gradient became non-finite (the network "
                                    "overflows inside this budget); use a smaller eps")
                best, best_loss = _keep_best(best, best_loss, x_adv, loss)
                x_adv = ball.project(x_adv + self.iteration_move(grad, i, rng))
            with torch.no_grad():
                best, best_loss = _keep_best(best, best_loss, x_adv, self.loss(victim.forward(x_adv), ref))
        return best.detach()

    def iteration_move(self, grad: torch.Tensor, i: int, rng: BatchRNG) -> torch.Tensor:
        """The update of iteration ``i`` (plain PGD: :meth:`ascent_step`)."""
        return self.ascent_step(grad)


def _keep_best(best: torch.Tensor, best_loss: torch.Tensor | None, x_adv: torch.Tensor, loss: torch.Tensor):
    if best_loss is None:
        return x_adv.clone(), loss
    better = loss > best_loss
    best = torch.where(better.reshape(-1, *([1] * (x_adv.ndim - 1))), x_adv, best)
    return best, torch.where(better, loss, best_loss)


def discrete_probs_log(out: PolicyOutput) -> torch.Tensor:
    """log π(·|x) of a discrete victim: log-softmax of logits, or of Q-values (Huang et al. 2017)."""
    return torch.log_softmax(out.scores(), dim=-1)
