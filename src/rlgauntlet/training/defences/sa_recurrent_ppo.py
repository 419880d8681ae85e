"""SA-PPO for LSTM policies: sb3-contrib's RecurrentPPO whose loss adds the state-adversarial
regulariser over whole sequences, as ATLA_robust_RL's LSTM agents train (``robust_ppo_step`` with
``history_length`` > 0, ``get_state_kl_bound_sgld`` with ``not_dones``):

    L = L_PPO + κ · mean over the minibatch's steps t of  max over x̃ in the ℓ∞ ε-ball of x of
        Σₖ ((μₖ(x̃)_t − μₖ(x)_t) / σₖ)²

where x is a sequence of network inputs (after VecNormalize) and μ(x)_t the policy's mean at step
t *after the LSTM has read x₁..x_t*: every step's perturbation reaches every later step through
the hidden state, so the maximum is over the whole sequence's perturbation at once (a per-step
maximum with the clean history held would miss what an attacker who perturbs earlier
observations does to the memory). The inner maximum is the official SGLD loop
(:mod:`rlgauntlet.training.defences.sa_ppo`: ``steps`` signed steps of ε/steps from a random corner
step, Langevin noise, projection), run on the sequence; σ is held fixed; ε ramps from 0 over the
first ``ramp_fraction`` of training (the official scheduler: 1831 of 2441 iterations on Hopper).

The release takes one full-batch gradient step per epoch over all of a rollout's episodes; the
Hopper presets do the same with ``batch_size`` equal to the rollout (one RecurrentPPO minibatch
of whole sequences, each from its stored LSTM state), and the regulariser is computed on that
minibatch. With a smaller ``batch_size`` it is computed per minibatch on the same sequences.

Example:
    >>> model = SARecurrentPPO("MlpLstmPolicy", "Pendulum-v1", sa_eps=0.05, sa_kappa=0.3)  # doctest: +SKIP
    >>> model.learn(100_000)                                                             # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.type_aliases import RNNStates

from rlgauntlet.training.defences.sa_ppo import SGLD_BETA, record_update
from rlgauntlet.training.defences.split_lr import SplitLRMixin


def whole_sequences(data) -> tuple[RNNStates, th.Tensor]:
    """The (LSTM states, episode starts) of a RecurrentPPO minibatch ``data`` with every reset moved
    into the sequences' initial states. RecurrentPPO's buffer cuts its sequences at episode starts,
    so a start can only be a sequence's first step; but any start sends the policy's
    ``_process_sequence`` down a step-by-step Python loop (in the forward and in its backward),
    where no start runs the whole sequence as one LSTM call. Zeroing the initial state of the
    sequences that start an episode is what that loop's reset does, so the outputs are the same
    (``tests/test_sa_recurrent_ppo.py`` checks it); a minibatch with a start inside a sequence is
    returned unchanged."""
    n_seq = data.lstm_states.pi[0].shape[1]
    starts = data.episode_starts.reshape(n_seq, -1)
    if bool((starts[:, 1:] != 0).any()):
        return data.lstm_states, data.episode_starts
    keep = (1.0 - starts[:, 0]).view(1, n_seq, 1)
    pi, vf = data.lstm_states.pi, data.lstm_states.vf
    states = RNNStates(pi=(pi[0] * keep, pi[1] * keep), vf=(vf[0] * keep, vf[1] * keep))
    return states, th.zeros_like(data.episode_starts)


def sequence_shift(mean_of: Callable[[th.Tensor], th.Tensor], x: th.Tensor, x_adv: th.Tensor,
                   clean: th.Tensor, sigma: th.Tensor) -> th.Tensor:
    """R per step: Σₖ ((μₖ(x̃)_t − μₖ(x)_t) / σₖ)², ``clean`` = μ(x) held fixed."""
    return (((mean_of(x_adv) - clean) / sigma) ** 2).sum(dim=-1)


def sgld_sequence(mean_of: Callable[[th.Tensor], th.Tensor], x: th.Tensor, eps: float, steps: int,
                  sigma: th.Tensor, weight: th.Tensor | None = None,
                  generator: th.Generator | None = None) -> th.Tensor:
    """x̃ in the ℓ∞ ε-ball of the whole sequence ``x`` (steps × features, read in order by
    ``mean_of``) that approximately maximises the (``weight``-ed) sum of R over its steps: the
    official SGLD loop on the sequence. No parameter gradient is kept."""
    step = eps / steps
    with th.no_grad():
        clean = mean_of(x)
        noise = th.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
    lower, upper = x - eps, x + eps
    x_adv = th.max(th.min(x + noise.sign() * step, upper), lower)
    for i in range(steps):
        x_adv = x_adv.detach().requires_grad_(True)
        shift = sequence_shift(mean_of, x, x_adv, clean, sigma)
        (grad,) = th.autograd.grad((shift if weight is None else shift * weight).sum(), x_adv)
        scale = math.sqrt(2 * step * SGLD_BETA) / (i + 2)
        noise = th.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        x_adv = th.max(th.min(x_adv.detach() + (grad + scale * noise).sign() * step, upper), lower)
    return x_adv.detach()


class SARecurrentPPO(SplitLRMixin, RecurrentPPO):
    """RecurrentPPO with the sequence SA regulariser (see module docstring). Its loss, per
    minibatch: RecurrentPPO's clipped surrogate, entropy and value terms (as
    ``RecurrentPPO.train`` computes them, without target-KL early stopping, which the presets do
    not use) plus κ times the regulariser. ``value_learning_rate``: the critic (its LSTM and
    head) at its own rate in the one optimizer, as the release's separate value optimizer
    (:class:`~rlgauntlet.training.defences.split_lr.SplitLRMixin`); None: one rate for all."""

    def __init__(self, *args, sa_eps: float = 0.075, sa_kappa: float = 0.3, sa_steps: int = 2,
                 ramp_fraction: float = 0.75, value_learning_rate: float | None = None, **kwargs) -> None:
        if value_learning_rate is not None and value_learning_rate <= 0:
            raise ValueError("SARecurrentPPO needs value_learning_rate > 0 (or None: one rate)")
        self.sa_eps, self.sa_kappa, self.sa_steps, self.ramp_fraction = sa_eps, sa_kappa, sa_steps, ramp_fraction
        self.value_learning_rate = value_learning_rate
        super().__init__(*args, **kwargs)
        if not isinstance(self.action_space, spaces.Box):
            raise ValueError("SARecurrentPPO regularises a Gaussian policy's mean: give an env with Box actions")
        if self.clip_range_vf is not None or self.target_kl is not None:
            raise ValueError("SARecurrentPPO's loss has no value clipping and no target-KL stop: drop clip_range_vf "
                             "and target_kl")

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.value_learning_rate is not None:
            self._split_optimizer()

    def current_eps(self) -> float:
        """ε of this update: the linear ramp over ``ramp_fraction`` of the budget."""
        progress = float(np.clip(1.0 - self._current_progress_remaining, 0.0, 1.0))
        return self.sa_eps * (min(1.0, progress / self.ramp_fraction) if self.ramp_fraction > 0 else 1.0)

    def regulariser(self, data, eps: float) -> th.Tensor:
        """κ's term for one minibatch of sequences: the mean over its real (unpadded) steps of R at
        the sequence perturbation SGLD found, with gradients to the parameters."""
        policy = self.policy
        states, starts = whole_sequences(data)

        def mean_of(obs: th.Tensor) -> th.Tensor:
            distribution, _ = policy.get_distribution(obs, states.pi, starts)
            return distribution.distribution.mean

        mask = (data.mask > 1e-8).to(data.observations.dtype)
        sigma = policy.log_std.detach().exp()
        x = data.observations.float()
        x_adv = sgld_sequence(mean_of, x, eps, self.sa_steps, sigma, weight=mask)
        with th.no_grad():
            clean = mean_of(x)
        shift = sequence_shift(mean_of, x, x_adv, clean, sigma)
        return (shift * mask).sum() / mask.sum().clamp(min=1.0)

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)
        eps = self.current_eps()
        pg, vf, reg = [], [], []
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                mask = data.mask > 1e-8
                states, starts = whole_sequences(data)  # the same outputs, one LSTM call per minibatch
                values, log_prob, entropy = self.policy.evaluate_actions(data.observations, data.actions, states, starts)
                advantages = data.advantages
                if self.normalize_advantage:
                    advantages = (advantages - advantages[mask].mean()) / (advantages[mask].std() + 1e-8)
                ratio = th.exp(log_prob - data.old_log_prob)
                clipped = th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.mean(th.min(advantages * ratio, advantages * clipped)[mask])
                value_loss = th.mean(((data.returns - values.flatten()) ** 2)[mask])
                entropy_loss = -th.mean(entropy[mask]) if entropy is not None else th.mean(log_prob[mask])
                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
                if eps > 0 and self.sa_kappa > 0:
                    term = self.regulariser(data, eps)
                    loss = loss + self.sa_kappa * term
                    reg.append(term.item())
                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                pg.append(policy_loss.item())
                vf.append(value_loss.item())
            self._n_updates += 1
        record_update(self.logger, pg, vf, eps, reg)
