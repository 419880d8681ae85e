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
from rlgauntlet.training.algorithms import register_algorithm
from rlgauntlet.victims.base import PolicyOutput, Victim

#: SGLD's inverse temperature in the official code ("gradients are relatively small here")
SGLD_BETA = 1e-5
METHODS = ("sgld", "ibp")


def policy_shift(clean: PolicyOutput, perturbed: PolicyOutput) -> th.Tensor:
    """R(x, x̃) per row (see module docstring); ``clean`` is treated as fixed."""
    if clean.kind == "gaussian":
        sigma = clean.log_std.detach().exp()
        return (((perturbed.mean - clean.mean.detach()) / sigma) ** 2).sum(dim=-1)
    logp = F.log_softmax(clean.logits.detach(), dim=-1)
    return (logp.exp() * (logp - F.log_softmax(perturbed.logits, dim=-1))).sum(dim=-1)


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
        x_adv = x_adv.detach().requires_grad_(True)
        objective = policy_shift(clean, victim.forward(x_adv)).sum()
        (grad,) = th.autograd.grad(objective, x_adv)
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
    n = lower.shape[-1]
    others = upper.unsqueeze(-2).expand(*upper.shape[:-1], n, n)  # [..., i, j] = u_j
    eye = th.eye(n, dtype=th.bool, device=lower.device)
    mixed = th.where(eye, lower.unsqueeze(-1).expand_as(others), others)  # l_i on the diagonal, u_j off it
    log_q_low = lower - th.logsumexp(mixed, dim=-1)
    return (logp.exp() * (logp - log_q_low)).sum(dim=-1)


class SAPPO(PPO):
    """PPO with the SA regulariser (see module docstring)."""

    def __init__(self, *args, sa_eps: float = 0.075, sa_kappa: float = 0.3, sa_method: str = "sgld",
                 sa_steps: int = 10, ramp_fraction: float = 0.5, **kwargs) -> None:
        if sa_method not in METHODS:
            raise ValueError(f"sa_method {sa_method!r}: choose one of {', '.join(METHODS)}")
        self.sa_eps, self.sa_kappa, self.sa_method, self.sa_steps = sa_eps, sa_kappa, sa_method, sa_steps
        self.ramp_fraction = ramp_fraction
        self._live_victim = None
        super().__init__(*args, **kwargs)

    def current_eps(self) -> float:
        done = float(np.clip(1.0 - self._current_progress_remaining, 0.0, 1.0))
        return self.sa_eps * (min(1.0, done / self.ramp_fraction) if self.ramp_fraction > 0 else 1.0)

    def _victim(self):
        from rlgauntlet.victims.sb3 import SB3Victim

        if self._live_victim is None or self._live_victim.policy is not self.policy:
            self._live_victim = SB3Victim.from_model(self)
        return self._live_victim

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_live_victim"]

    def regulariser(self, x: th.Tensor, eps: float) -> th.Tensor:
        """κ's term: the mean over the batch of the (approximate or bounded) worst R in the ball."""
        victim = self._victim()
        if self.sa_method == "ibp":
            return ibp_shift_bound(victim, x, eps).mean()
        x_adv = sgld_perturbation(victim, x, eps, self.sa_steps)
        return policy_shift(victim.forward(x), victim.forward(x_adv)).mean()

    def train(self) -> None:
        from gymnasium import spaces
        from stable_baselines3.common.preprocessing import preprocess_obs

        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)
        eps = self.current_eps()
        pg, vf, reg = [], [], []
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                actions = data.actions
                if isinstance(self.action_space, spaces.Discrete):
                    actions = actions.long().flatten()
                values, log_prob, entropy = self.policy.evaluate_actions(data.observations, actions)
                advantages = data.advantages
                if self.normalize_advantage and len(advantages) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                ratio = th.exp(log_prob - data.old_log_prob)
                policy_loss = -th.min(advantages * ratio,
                                      advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()
                value_loss = F.mse_loss(data.returns, values.flatten())
                entropy_loss = -th.mean(entropy) if entropy is not None else -th.mean(-log_prob)
                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
                if eps > 0 and self.sa_kappa > 0:
                    x = preprocess_obs(data.observations, self.observation_space,
                                       normalize_images=self.policy.normalize_images)
                    term = self.regulariser(x, eps)
                    loss = loss + self.sa_kappa * term
                    reg.append(term.item())
                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                pg.append(policy_loss.item())
                vf.append(value_loss.item())
            self._n_updates += 1
        self.logger.record("train/policy_gradient_loss", np.mean(pg))
        self.logger.record("train/value_loss", np.mean(vf))
        self.logger.record("sa/eps", eps)
        if reg:
            self.logger.record("sa/regulariser", np.mean(reg))


register_algorithm("sa_ppo", SAPPO)
