"""SA-DQN (Zhang et al. 2020a, "Robust Deep RL against Adversarial Perturbations on State
Observations", §3.3 and its official code): DQN whose TD loss adds the state-adversarial hinge

    L = L_TD + κ · mean over the batch of  max{ max over x̃ in the ε-ball of x of
                                               max over a ≠ a* of Q(x̃, a) − Q(x̃, a*),  −c }

with x the network input (pixels in [0, 1]: a ``pixel01`` ε), a* = argmax Q(x, ·) on the clean
input (held fixed) and c = ``sa_hinge`` (the official 1). The term pushes Q(·, a*) above every
other action's Q by up to c everywhere in the ball, so the greedy action cannot be flipped.

The inner maximum is bounded soundly, as the official "convex relaxation" solver does: the
margins Q(x̃, a*) − Q(x̃, a) get interval lower bounds with the margin folded into the last
layer (:func:`rlgauntlet.bounds.ibp_margins`), so the term is −min(min over a ≠ a* of the
margin bound, c). The official code mixes CROWN-IBP into these bounds early in training (β
from 1 to 0); pure IBP (β = 0) is what it ends with, and all that is used here.

The TD term is SB3's DQN loss unchanged (target network, max over its Q-values, Huber),
which is the official code's target as well (its Double-DQN line is commented out). At ε = 0
the term is 0: the official code skips it below float32's smallest positive number, because
the hinge would otherwise demand a gap of c between Q-values with no attacker at all (RADIAL's
criticism of SA-DQN). ε ramps linearly from 0 to ``sa_eps`` over the first ``ramp_fraction``
of training (the official schedule is a smoothed ramp over 4M of 6M frames); κ (``sa_kappa``,
official Atari value 0.005) is constant.

Example:
    >>> model = SADQN("CnnPolicy", "MinAtar/Breakout-v1", sa_eps=3 / 255)   # doctest: +SKIP
    >>> model.learn(200_000)                                                # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F
from stable_baselines3 import DQN

from rlgauntlet.bounds import ibp_margins
from rlgauntlet.training.live import LiveVictimMixin
from rlgauntlet.victims.base import Victim

#: the official hinge: the Q gap the regulariser asks for, in Q units
DEFAULT_HINGE = 1.0


def sa_dqn_regularizer(network: Victim | nn.Module, x: th.Tensor, eps: float, hinge: float = DEFAULT_HINGE,
                       q_clean: th.Tensor | None = None) -> th.Tensor:
    """SA-DQN's term per row (B,): −min(min over a ≠ a* of the margin bound, ``hinge``), with
    a* the greedy action on the clean input ``x`` (B, *input_shape); 0 at ε = 0 (see module
    docstring). ``q_clean`` (B, A) saves the clean forward pass when the caller has it."""
    if eps <= 0:
        return th.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    if q_clean is None:
        with th.no_grad():
            q_clean = network.forward(x).q if isinstance(network, Victim) else network(x)
    labels = q_clean.detach().argmax(dim=1)
    margins = ibp_margins(network, x, eps, labels)
    others = margins.masked_fill(F.one_hot(labels, margins.shape[1]).bool(), float("inf"))
    return -others.min(dim=1).values.clamp(max=hinge)


class SADQN(LiveVictimMixin, DQN):
    """DQN with the SA-DQN hinge regulariser (see module docstring)."""

    def __init__(self, *args, sa_eps: float = 1 / 255, sa_kappa: float = 0.005, sa_hinge: float = DEFAULT_HINGE,
                 ramp_fraction: float = 0.5, **kwargs) -> None:
        if sa_eps < 0 or sa_kappa < 0 or sa_hinge <= 0 or not 0 <= ramp_fraction <= 1:
            raise ValueError("SADQN needs sa_eps ≥ 0, sa_kappa ≥ 0, sa_hinge > 0 and 0 ≤ ramp_fraction ≤ 1")
        self.sa_eps, self.sa_kappa, self.sa_hinge, self.ramp_fraction = sa_eps, sa_kappa, sa_hinge, ramp_fraction
        self._live_victim = None
        super().__init__(*args, **kwargs)

    def current_eps(self) -> float:
        return self.sa_eps * self._ramp()

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        eps = self.current_eps()
        td_losses, regs = [], []
        for _ in range(gradient_steps):
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = data.discounts if data.discounts is not None else self.gamma
            with th.no_grad():
                next_q = self.q_net_target(data.next_observations).max(dim=1).values.reshape(-1, 1)
                target = data.rewards + (1 - data.dones) * discounts * next_q
            q_all = self.q_net(data.observations)
            td = F.smooth_l1_loss(q_all.gather(1, data.actions.long()), target)
            reg = sa_dqn_regularizer(self._victim(), self._network_input(data.observations), eps, self.sa_hinge,
                                     q_clean=q_all).mean()
            self._optimize(td + self.sa_kappa * reg)
            td_losses.append(td.item())
            regs.append(reg.item())
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(td_losses))
        self.logger.record("sa/eps", eps)
        self.logger.record("sa/regularizer", np.mean(regs))
