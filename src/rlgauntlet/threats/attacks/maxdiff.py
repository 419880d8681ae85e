"""MaxDiff / MAD (Zhang et al. 2020, "Robust Deep RL against Adversarial Perturbations on
State Observations", Alg. 3).

Maximise the divergence between the perturbed and the clean policy, KL(π(·|x̃) ‖ π(·|x)):
for discrete victims between softmax distributions (of Q-values for DQN), for Gaussian
victims the closed-form KL between diagonal Gaussians, for deterministic victims the
squared action deviation ‖μ(x̃) − μ(x)‖². Solved with noisy (SGLD-style) sign-gradient
steps: g + √(2·step)/(i+2)·ξ, ξ ~ N(0, I), step ε/steps, from a random start (the KL has
zero gradient at x̃ = x). Distance: ℓ∞ (or ℓ2) in the victim's budget space.

Spec: ``maxdiff:eps=0.075`` (or ``pgd:objective=maxdiff``).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.threats.attacks.base import AttackParams, GradientAttack, discrete_probs_log
from rlgauntlet.threats.base import register_threat
from rlgauntlet.victims.base import PolicyOutput, Victim


def policy_divergence(out: PolicyOutput, ref: PolicyOutput) -> torch.Tensor:
    """KL(π(·|x̃) ‖ π(·|x)) per row; squared action deviation for deterministic policies."""
    if out.kind in ("q", "categorical"):
        logp, logq = discrete_probs_log(out), discrete_probs_log(ref)
        return (logp.exp() * (logp - logq)).sum(dim=-1)
    if out.kind == "gaussian":
        var_p, var_q = (2 * out.log_std).exp(), (2 * ref.log_std).exp()
        kl = ref.log_std - out.log_std + (var_p + (out.mean - ref.mean) ** 2) / (2 * var_q) - 0.5
        return kl.sum(dim=-1)
    return ((out.action - ref.action) ** 2).sum(dim=-1)


@register_threat
class MaxDiff(GradientAttack):
    name = "maxdiff"
    family = "adversarial"
    objective = True  # usable as fgsm:objective=NAME / pgd:objective=NAME

    class Params(AttackParams):
        random_start: bool = True
        noise: bool = Field(True, description="SGLD noise on the gradient (Zhang et al. 2020)")

    @property
    def step_size(self) -> float:
        p = self.params
        return p.step if p.step is not None else p.eps / p.steps

    def loss(self, out: PolicyOutput, ref: PolicyOutput) -> torch.Tensor:
        return policy_divergence(out, ref)

    @classmethod
    @torch.no_grad()
    def measure(cls, victim: Victim, x: torch.Tensor, x_adv: torch.Tensor) -> torch.Tensor:
        """KL(π(·|x̃) ‖ π(·|x)) on each state (squared action distance for deterministic policies)."""
        return policy_divergence(victim.forward(x_adv), victim.forward(x))

    def iteration_move(self, grad: torch.Tensor, i: int, rng: BatchRNG) -> torch.Tensor:
        if self.params.noise:
            grad = grad + math.sqrt(2 * self.step_size) / (i + 2) * rng.normal(grad.shape[1:]).to(grad)
        return self.ascent_step(grad)
