"""What our SB3 algorithm subclasses with a robustness term share (RADIAL-DQN/PPO, SA-PPO):
the live policy as a victim (for bounds and attacks during training), the network input of
stored observations, one clipped optimizer step, and PPO's minibatch terms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch as th
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.preprocessing import preprocess_obs


@dataclass
class PPOTerms:
    """One PPO minibatch's pieces: ``surrogate(log_prob)`` is the clipped surrogate loss of any
    log-probability of the taken actions (the nominal one, or a worst case)."""

    actions: th.Tensor
    advantages: th.Tensor  # normalised as SB3 normalises them (when it does)
    log_prob: th.Tensor
    surrogate: Callable[[th.Tensor], th.Tensor]
    value_loss: th.Tensor
    entropy_loss: th.Tensor


class LiveVictimMixin:
    """Mixed into an SB3 algorithm: ``_victim()`` wraps the policy being trained (see
    ``SB3Victim.from_model``); it is rebuilt when SB3 replaces the policy (a load)."""

    _live_victim = None
    #: the fraction of the training budget over which ε ramps linearly from 0 (0: no ramp)
    ramp_fraction: float = 0.0

    def _progress(self) -> float:
        """Fraction of the training budget done (SB3 keeps it across resumes)."""
        return float(np.clip(1.0 - self._current_progress_remaining, 0.0, 1.0))

    def _ramp(self) -> float:
        """Where the linear ramp over ``ramp_fraction`` of the budget stands, in [0, 1]."""
        return min(1.0, self._progress() / self.ramp_fraction) if self.ramp_fraction > 0 else 1.0

    def _network_input(self, observations: th.Tensor) -> th.Tensor:
        """The network input x of a batch of stored observations (pixels / 255; VecNormalize
        was applied when the replay buffer or rollout stored them)."""
        return preprocess_obs(observations, self.observation_space, normalize_images=self.policy.normalize_images)

    def _victim(self):
        from rlgauntlet.victims.sb3 import SB3Victim

        if self._live_victim is None or self._live_victim.policy is not self.policy:
            self._live_victim = SB3Victim.from_model(self)
        return self._live_victim

    def _excluded_save_params(self) -> list[str]:
        # the live victim wraps the policy: saving it would store the network a second time
        return [*super()._excluded_save_params(), "_live_victim"]

    def _optimize(self, loss: th.Tensor) -> None:
        """One optimizer step on ``loss``, gradients clipped as SB3 clips them."""
        self.policy.optimizer.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()

    def _ppo_terms(self, data, clip_range: float) -> PPOTerms:
        """PPO's loss pieces for one rollout minibatch, as SB3's PPO computes them."""
        actions = data.actions.long().flatten() if isinstance(self.action_space, spaces.Discrete) else data.actions
        values, log_prob, entropy = self.policy.evaluate_actions(data.observations, actions)
        advantages = data.advantages
        if self.normalize_advantage and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

        def surrogate(logp: th.Tensor) -> th.Tensor:
            ratio = th.exp(logp - data.old_log_prob)
            return -th.min(advantages * ratio, advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()

        entropy_loss = -th.mean(entropy) if entropy is not None else -th.mean(-log_prob)
        return PPOTerms(actions, advantages, log_prob, surrogate, F.mse_loss(data.returns, values.flatten()), entropy_loss)
