"""SA-PPO (Zhang et al. 2020a, "Robust Deep RL against Adversarial Perturbations on State
Observations"): PPO whose loss adds the state-adversarial regulariser

    L = L_PPO + κ · mean over the minibatch of  max over x̃ in the ℓ∞ ε-ball of x of  R(x, x̃)

where x is the network input (after VecNormalize, the units of evaluation budgets) and R
measures how far the policy moves: for a Gaussian policy the official code's
Σₖ ((μₖ(x̃) − μₖ(x)) / σₖ)², twice the KL of two Gaussians with the same σ; for a categorical
policy KL(π(·|x) ‖ π(·|x̃)). π(·|x) is held fixed (no gradient), so the term pulls the
perturbed policy towards the clean one. The inner maximum comes from

* ``sgld`` (the official method): ``steps`` signed gradient-ascent steps of ε/steps from a
  random corner step, with Langevin noise √(2·step·β)/(i+2), β = 1e-5, each projected onto the
  ball; R is then evaluated at the x̃ found, with gradients to the parameters;
* ``ibp``: a sound upper bound of the maximum from interval bounds of the network's outputs
  over the whole ball (the official code's convex relaxation, with IBP in place of CROWN):
  max((ub − μ)², (μ − lb)²)/σ² per action dimension, or Σᵢ pᵢ (log pᵢ − log q̲ᵢ) with q̲ᵢ the
  lowest softmax probability the logit bounds allow.

ε ramps linearly from 0 to ``sa_eps`` over the first ``ramp_fraction`` of training (the
official ε scheduler), κ (``sa_kappa``) is constant (the official Hopper value is 0.3); σ is
held fixed in R (``ROBUST_PPO_DETACH_STDEV``), so the term cannot be lowered by widening σ.

Example:
    >>> model = SAPPO("MlpPolicy", "CartPole-v1", sa_eps=0.1, sa_kappa=0.3)   # doctest: +SKIP
    >>> model.learn(100_000)                                                  # doctest: +SKIP
"""

from __future__ import annotations

import math

import numpy as np
import torch as th
import torch.nn.functional as F
from stable_baselines3 import PPO

from rlgauntlet.bounds import ibp
from rlgauntlet.threats.attacks.maxdiff import policy_divergence
from rlgauntlet.training.live import LiveVictimMixin
from rlgauntlet.training.defences.radial import softmax_bounds
from rlgauntlet.victims.base import PolicyOutput, Victim

#: SGLD's inverse temperature in the official code ("gradients are relatively small here")
SGLD_BETA = 1e-5
METHODS = ("sgld", "ibp")


def policy_shift(clean: PolicyOutput, perturbed: PolicyOutput) -> th.Tensor:
    """R(x, x̃) per row (see module docstring); ``clean`` is treated as fixed."""
    if clean.kind == "gaussian":
        sigma = clean.log_std.detach().exp()
        return (((perturbed.mean - clean.mean.detach()) / sigma) ** 2).sum(dim=-1)
    fixed = PolicyOutput("categorical", logits=clean.logits.detach())
    return policy_divergence(fixed, perturbed)  # KL(π(·|x) ‖ π(·|x̃))


def shift_gradient(victim: Victim, clean: PolicyOutput, x_adv: th.Tensor) -> th.Tensor:
    """∇ of R(x, ·) at ``x_adv``, per row (shaped like ``x_adv``): through the victim's
    hand-walked VJP where it offers one (an MLP policy: a fraction of autograd's cost at
    minibatch size), by autograd otherwise. The cotangent of R at the output: 2(μ̃ − μ)/σ² for
    a Gaussian policy, softmax(z̃) − π(·|x) for a categorical one."""
    if clean.kind == "gaussian":
        mean, variance = clean.mean.detach(), (2 * clean.log_std.detach()).exp()
        cotangent_of = lambda out: 2 * (out - mean) / variance  # noqa: E731
    else:
        probs = th.softmax(clean.logits.detach(), dim=-1)
        cotangent_of = lambda out: th.softmax(out, dim=-1) - probs  # noqa: E731
    found = victim.output_and_vjp(x_adv, cotangent_of)
    if found is not None:
        return found[1]
    x_adv = x_adv.detach().requires_grad_(True)
    (grad,) = th.autograd.grad(policy_shift(clean, victim.forward(x_adv)).sum(), x_adv)
    return grad


def sgld_perturbation(victim: Victim, x: th.Tensor, eps: float, steps: int = 10,
                      generator: th.Generator | None = None) -> th.Tensor:
    """x̃ in the ℓ∞ ε-ball of x (and the victim's input range) that (approximately) maximises
    R(x, x̃): the official SGLD loop (see module docstring). No parameter gradient is kept."""
    step = eps / steps
    with th.no_grad():
        clean = victim.forward(x)
        noise = th.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        x_adv = x + noise.sign() * step
    lower, upper = x - eps, x + eps
    bounds = victim.input_bounds
    if bounds is not None:
        lower, upper = lower.clamp(*bounds), upper.clamp(*bounds)
    x_adv = th.max(th.min(x_adv, upper), lower)
    for i in range(steps):
        grad = shift_gradient(victim, clean, x_adv.detach())
        scale = math.sqrt(2 * step * SGLD_BETA) / (i + 2)
        noise = th.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        x_adv = th.max(th.min(x_adv + (grad + scale * noise).sign() * step, upper), lower)
    return x_adv.detach()


def ibp_shift_bound(victim: Victim, x: th.Tensor, eps: float) -> th.Tensor:
    """A sound upper bound, per row, of max over the ε-ball of R(x, x̃), from interval bounds of
    the policy's outputs; differentiable in the parameters (a certified-training term)."""
    clean = victim.forward(x)
    lower, upper = ibp(victim, x, eps)
    if clean.kind == "gaussian":
        sigma = clean.log_std.detach().exp()
        reach = th.max(upper - clean.mean.detach(), clean.mean.detach() - lower)
        return ((reach / sigma) ** 2).sum(dim=-1)
    logp = F.log_softmax(clean.logits.detach(), dim=-1)
    rows, n = lower.shape
    every = th.arange(n, device=lower.device).repeat(rows)  # each action of each row, as RADIAL bounds the taken one
    log_q_low, _ = softmax_bounds(lower.repeat_interleave(n, 0), upper.repeat_interleave(n, 0), every)
    return (logp.exp() * (logp - log_q_low.reshape(rows, n))).sum(dim=-1)


def record_update(logger, policy_losses: list[float], value_losses: list[float], eps: float,
                  regulariser: list[float]) -> None:
    """An SA-regularised update's log: the mean losses, ε, and the regulariser when it ran."""
    logger.record("train/policy_gradient_loss", np.mean(policy_losses))
    logger.record("train/value_loss", np.mean(value_losses))
    logger.record("sa/eps", eps)
    if regulariser:
        logger.record("sa/regulariser", np.mean(regulariser))


class SAPPO(LiveVictimMixin, PPO):
    """PPO with the SA regulariser (see module docstring)."""

    def __init__(self, *args, sa_eps: float = 0.075, sa_kappa: float = 0.3, sa_method: str = "sgld",
                 sa_steps: int = 10, ramp_fraction: float = 0.5, **kwargs) -> None:
        if sa_method not in METHODS:
            raise ValueError(f"sa_method {sa_method!r}: choose one of {', '.join(METHODS)}")
        self.sa_eps, self.sa_kappa, self.sa_method, self.sa_steps = sa_eps, sa_kappa, sa_method, sa_steps
        self.ramp_fraction = ramp_fraction
        super().__init__(*args, **kwargs)

    def current_eps(self) -> float:
        return self.sa_eps * self._ramp()

    def regulariser(self, x: th.Tensor, eps: float) -> th.Tensor:
        """κ's term: the mean over the batch of the (approximate or bounded) worst R in the ball."""
        victim = self._victim()
        if self.sa_method == "ibp":
            return ibp_shift_bound(victim, x, eps).mean()
        x_adv = sgld_perturbation(victim, x, eps, self.sa_steps)
        return policy_shift(victim.forward(x), victim.forward(x_adv)).mean()

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)
        eps = self.current_eps()
        pg, vf, reg = [], [], []
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                terms = self._ppo_terms(data, clip_range)
                policy_loss = terms.surrogate(terms.log_prob)
                loss = policy_loss + self.ent_coef * terms.entropy_loss + self.vf_coef * terms.value_loss
                if eps > 0 and self.sa_kappa > 0:
                    term = self.regulariser(self._network_input(data.observations), eps)
                    loss = loss + self.sa_kappa * term
                    reg.append(term.item())
                self._optimize(loss)
                pg.append(policy_loss.item())
                vf.append(terms.value_loss.item())
            self._n_updates += 1
        record_update(self.logger, pg, vf, eps, reg)
