"""RADIAL-RL training (Oikarinen, Weng & Daniel, "Robust Deep RL through Adversarial Loss"):
SB3 algorithms whose loss adds a worst-case term computed from interval bounds (IBP) of the
network's outputs over the ℓ∞ ε-ball of each observation (in the network-input space, the
same units as evaluation budgets).

    L = κ·L_standard + (1 − κ)·L_wc

* :class:`RadialDQN` (paper Eq. 5): Double-DQN targets B; for the taken action the worse of
  the TD errors at the Q lower and upper bounds, for the others the distance of each bound
  to the nominal Q (kept tight). Huber (SB3's smooth L1) for both terms, summed over actions,
  averaged over the batch. κ ramps 1 → 0.5 and ε ramps 0 → ε_train linearly over the first
  ``ramp_fraction`` (2/3) of training, then stay.
* :class:`RadialPPO` (the PPO form of Eq. 6): the clipped surrogate evaluated a second time
  with the worst-case probability of the taken action, π̲(a) (softmax of its lower logit
  bound against the others' upper bounds) where the advantage is ≥ 0 and π̄(a) where it is
  < 0; κ = 0.5 throughout, ε ramps 0 → ε_train over the first 2/3 of training. Discrete
  actions only (the paper's setting).

``radial_eps`` and the schedule fractions are constructor arguments, so presets set them.
``eps_start`` > 0 makes the ε ramp geometric instead (:func:`radial_eps_at`): on a network
whose IBP bounds are loose (a vanilla Atari CNN's logit width is 1.5 at ε = 1e-6), a linear
ramp reaches, within a few updates, widths where log π̲ falls below the worst-case term's
clamp (−30), and that term's gradient is zero there.

``guard_max_width`` / ``guard_min_return`` make the ramp *guarded* (RADIAL-PPO): it advances
by one update's share of the ramp only after an update whose bounds were tight (median IBP
logit width at the current ε ≤ ``guard_max_width``) and whose recent training episodes held
their return (mean of the last ``guard_episodes`` ≥ ``guard_min_return``) and, with
``guard_greedy_return``, whose last greedy games held it (mean ≥ ``guard_greedy_return``, measured
every ``guard_greedy_every`` steps by :class:`~rlgauntlet.training.greedy_eval.GreedyEvalCallback`;
the sampled return alone let Pong's greedy game fall from 19.8 to 8.5); after any other
update it goes back by as much (:meth:`_RadialMixin._guard_ramp`). Where the network keeps up,
ε follows the unguarded ramp step for step; where it does not, ε waits for it. The ramp's
position is the run's state: saved in a checkpoint's progress (``schedule_state``) and restored
on resume.

Example:
    >>> model = RadialDQN("MlpPolicy", "CartPole-v1", radial_eps=0.1)   # doctest: +SKIP
    >>> model.learn(50_000)                                              # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import torch as th
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3 import DQN, PPO

from rlgauntlet.bounds import ibp
from rlgauntlet.training.live import LiveVictimMixin, PPOTerms


def radial_eps_at(ramp: float, radial_eps: float, eps_start: float = 0.0) -> float:
    """ε_train where the ramp stands (``ramp`` in [0, 1]: 0 at the start, 1 at its end).

    Linear from 0 when ``eps_start`` is 0 (the paper's schedule); geometric from ``eps_start``
    otherwise, ε = eps_start·(radial_eps/eps_start)^ramp, so ε grows by the same factor per
    step. Both reach ``radial_eps`` at ramp 1.

    >>> radial_eps_at(0.5, 1e-2), round(radial_eps_at(0.5, 1e-2, eps_start=1e-6), 12)
    (0.005, 0.0001)
    """
    if eps_start <= 0:
        return radial_eps * ramp
    return eps_start * (radial_eps / eps_start) ** ramp


def median_logit_width(lower: th.Tensor, upper: th.Tensor) -> float:
    """The median over states of the mean over actions of the (B, A) output bounds' width."""
    return float((upper - lower).mean(dim=1).median())


class _RadialMixin(LiveVictimMixin):
    """What both RADIAL algorithms share: the schedule and the bounds of the live network."""

    radial_eps: float
    ramp_fraction: float
    eps_start: float = 0.0
    guard_max_width: float | None = None
    guard_min_return: float | None = None
    guard_episodes: int = 10
    guard_greedy_return: float | None = None
    guard_greedy_every: int = 100_000
    guard_greedy_games: int = 8
    #: mean return of the last greedy games (None: none played yet)
    greedy_return: float | None = None
    #: where a guarded ramp stands, in [0, 1] (None: not guarded, or not started yet)
    ramp_position: float | None = None

    def _guarded(self) -> bool:
        return (self.guard_max_width is not None or self.guard_min_return is not None
                or self.guard_greedy_return is not None)

    def record_greedy_return(self, mean_return: float) -> None:
        """The mean return of greedy games just played (the guard's greedy floor reads it)."""
        self.greedy_return = float(mean_return)

    def _ramp(self) -> float:
        if not self._guarded():
            return super()._ramp()
        if self.ramp_position is None:  # a fresh run, or a checkpoint from before the guard: where the plain ramp is
            self.ramp_position = super()._ramp()
        return self.ramp_position

    def _ramp_read(self) -> float:
        """Where the ramp stands, read without starting a guarded one (which :meth:`_ramp` does):
        a checkpoint written before the first update, at a time budget's stop, must not start the
        ramp there, or the run resumed from it starts it one rollout earlier than the run never stopped."""
        if self._guarded() and self.ramp_position is not None:
            return self.ramp_position
        return super()._ramp()

    def current_eps(self) -> float:
        return radial_eps_at(self._ramp(), self.radial_eps, self.eps_start)

    def _score_bounds(self, x: th.Tensor, eps: float) -> tuple[th.Tensor, th.Tensor]:
        return ibp(self._victim(), x, eps)

    def _recent_return(self) -> float | None:
        """Mean return of the last ``guard_episodes`` training episodes (None: fewer finished)."""
        episodes = list(self.ep_info_buffer or [])[-self.guard_episodes:]
        return float(np.mean([e["r"] for e in episodes])) if len(episodes) >= self.guard_episodes else None

    def _guard_ramp(self, width: float | None, steps: int) -> None:
        """Move a guarded ramp after an update of ``steps`` agent steps whose median logit width at
        the current ε was ``width`` (None: no bounds were computed, at ε = 0): forward by those
        steps' share of the ramp if the update was healthy, back by as much if not. A return
        not yet known (fewer episodes than ``guard_episodes``, no greedy games yet) does not
        hold the ramp back."""
        if not self._guarded():
            return
        share = steps / (self.ramp_fraction * self._total_timesteps) if self.ramp_fraction > 0 else 1.0
        recent = self._recent_return()
        healthy = ((self.guard_max_width is None or width is None or width <= self.guard_max_width)
                   and (self.guard_min_return is None or recent is None or recent >= self.guard_min_return)
                   and (self.guard_greedy_return is None or self.greedy_return is None
                        or self.greedy_return >= self.guard_greedy_return))
        self.ramp_position = float(np.clip(self._ramp() + (share if healthy else -share), 0.0, 1.0))
        self.logger.record("radial/ramp_healthy", float(healthy))
        if width is not None:
            self.logger.record("radial/median_logit_width", width)

    def schedule_state(self) -> dict:
        """The schedule's state a checkpoint keeps (progress.json): ε now, and a guarded ramp's position
        once the ramp has started (read without starting it: :meth:`_ramp_read`)."""
        state = {"eps": radial_eps_at(self._ramp_read(), self.radial_eps, self.eps_start),
                 **({"ramp_position": self.ramp_position} if self._guarded() and self.ramp_position is not None
                    else {})}
        if self.greedy_return is not None:
            state["greedy_return"] = self.greedy_return
        return state

    def load_schedule_state(self, state: dict) -> None:
        if self._guarded() and state.get("ramp_position") is not None:
            self.ramp_position = float(state["ramp_position"])
        if self.guard_greedy_return is not None and state.get("greedy_return") is not None:
            self.greedy_return = float(state["greedy_return"])


def radial_dqn_loss(q_all: th.Tensor, lower: th.Tensor, upper: th.Tensor, actions: th.Tensor, target: th.Tensor,
                    kappa: float) -> tuple[th.Tensor, th.Tensor]:
    """RADIAL-DQN's loss (paper Eq. 5) and its worst-case term, for one batch.

    ``q_all``, ``lower``, ``upper``: (B, A) nominal Q-values and their bounds over the ε-ball;
    ``actions`` (B,) taken actions; ``target`` (B,) TD targets. The standard term is the Huber
    TD error of the taken action, averaged over the batch. The worst-case term takes, per
    action, the larger distance of its two bounds to y_a (the TD target for the taken action,
    the nominal Q, not detached, for the others), Huber of that, summed over actions and
    averaged over the batch. Returns (κ·standard + (1 − κ)·worst-case, worst-case).
    """
    standard = F.smooth_l1_loss(q_all.gather(1, actions[:, None]).squeeze(1), target)
    taken = F.one_hot(actions, q_all.shape[1]).to(q_all.dtype)
    target_y = taken * target[:, None] + (1 - taken) * q_all
    worst = th.maximum((upper - target_y).abs(), (lower - target_y).abs())
    worst_case = F.smooth_l1_loss(worst, th.zeros_like(worst), reduction="none").sum(dim=1).mean()
    return kappa * standard + (1 - kappa) * worst_case, worst_case


class RadialDQN(_RadialMixin, DQN):
    """DQN with the RADIAL worst-case TD loss (see module docstring)."""

    def __init__(self, *args, radial_eps: float = 1 / 255, ramp_fraction: float = 2 / 3, kappa_end: float = 0.5,
                 eps_start: float = 0.0, **kwargs) -> None:
        self.radial_eps, self.ramp_fraction, self.kappa_end = radial_eps, ramp_fraction, kappa_end
        self.eps_start = eps_start
        self._live_victim = None
        super().__init__(*args, **kwargs)

    def current_kappa(self) -> float:
        return 1.0 - (1.0 - self.kappa_end) * self._ramp()

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        kappa, eps = self.current_kappa(), self.current_eps()
        losses, wc_losses = [], []
        for _ in range(gradient_steps):
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = data.discounts if data.discounts is not None else self.gamma
            with th.no_grad():  # Double DQN: the online net picks, the target net values
                next_actions = self.q_net(data.next_observations).argmax(dim=1, keepdim=True)
                next_q = self.q_net_target(data.next_observations).gather(1, next_actions)
                target = data.rewards + (1 - data.dones) * discounts * next_q
            q_all = self.q_net(data.observations)
            actions = data.actions.long().flatten()
            if eps > 0 and kappa < 1:
                lower, upper = self._score_bounds(self._network_input(data.observations), eps)
                loss, worst_case = radial_dqn_loss(q_all, lower, upper, actions, target.flatten(), kappa)
                wc_losses.append(worst_case.item())
            else:
                loss = F.smooth_l1_loss(q_all.gather(1, actions[:, None]), target)
            losses.append(loss.item())
            self._optimize(loss)
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))
        self.logger.record("radial/kappa", kappa)
        self.logger.record("radial/eps", eps)
        if wc_losses:
            self.logger.record("radial/worst_case_loss", np.mean(wc_losses))


def softmax_bounds(lower: th.Tensor, upper: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
    """Log π̲(a) and log π̄(a) over the logit box: the taken action at its lower (upper) bound
    against every other action at its upper (lower) bound."""
    taken = F.one_hot(actions, lower.shape[1]).bool()
    low_logits = th.where(taken, lower, upper)
    high_logits = th.where(taken, upper, lower)
    pick = actions[:, None]
    return (th.log_softmax(low_logits, dim=1).gather(1, pick).squeeze(1),
            th.log_softmax(high_logits, dim=1).gather(1, pick).squeeze(1))


def radial_ppo_policy_loss(terms: PPOTerms, lower: th.Tensor, upper: th.Tensor,
                           kappa: float) -> tuple[th.Tensor, th.Tensor]:
    """RADIAL-PPO's policy loss and its worst-case term, for one minibatch: the clipped
    surrogate (averaged over the minibatch) at the nominal log π(a) and again at the worst-case
    log-probability, log π̲(a) where the advantage is ≥ 0 and log π̄(a) where it is < 0 (from
    the (B, A) logit bounds). Returns (κ·nominal + (1 − κ)·worst-case, worst-case)."""
    log_low, log_high = softmax_bounds(lower, upper, terms.actions)
    worst = th.where(terms.advantages >= 0, log_low, log_high).clamp(-30.0, 0.0)
    worst_loss = terms.surrogate(worst)
    return kappa * terms.surrogate(terms.log_prob) + (1 - kappa) * worst_loss, worst_loss


class RadialPPO(_RadialMixin, PPO):
    """PPO with the RADIAL worst-case policy term (see module docstring)."""

    def __init__(self, *args, radial_eps: float = 1 / 255, ramp_fraction: float = 2 / 3, kappa: float = 0.5,
                 eps_start: float = 0.0, guard_max_width: float | None = None, guard_min_return: float | None = None,
                 guard_episodes: int = 10, guard_greedy_return: float | None = None,
                 guard_greedy_every: int = 100_000, guard_greedy_games: int = 8, **kwargs) -> None:
        self.radial_eps, self.ramp_fraction, self.kappa = radial_eps, ramp_fraction, kappa
        self.eps_start = eps_start
        if ((guard_max_width is not None and guard_max_width <= 0) or guard_episodes < 1
                or guard_greedy_every < 1 or guard_greedy_games < 1):
            raise ValueError("RadialPPO's ramp guard needs guard_max_width > 0, guard_episodes ≥ 1, "
                             "guard_greedy_every ≥ 1 and guard_greedy_games ≥ 1")
        self.guard_max_width, self.guard_min_return, self.guard_episodes = guard_max_width, guard_min_return, guard_episodes
        self.guard_greedy_return, self.guard_greedy_every = guard_greedy_return, guard_greedy_every
        self.guard_greedy_games, self.greedy_return = guard_greedy_games, None
        self.ramp_position = None
        self._live_victim = None
        super().__init__(*args, **kwargs)
        if not isinstance(self.action_space, spaces.Discrete):
            raise ValueError("RadialPPO bounds action probabilities: discrete actions only")

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)
        eps = self.current_eps()
        pg, wc, vf, widths = [], [], [], []
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                terms = self._ppo_terms(data, clip_range)
                policy_loss = terms.surrogate(terms.log_prob)
                if eps > 0:
                    lower, upper = self._score_bounds(self._network_input(data.observations), eps)
                    policy_loss, worst_loss = radial_ppo_policy_loss(terms, lower, upper, self.kappa)
                    wc.append(worst_loss.item())
                    widths.append(median_logit_width(lower.detach(), upper.detach()))
                loss = policy_loss + self.ent_coef * terms.entropy_loss + self.vf_coef * terms.value_loss
                pg.append(policy_loss.item())
                vf.append(terms.value_loss.item())
                self._optimize(loss)
            self._n_updates += 1
        self.logger.record("train/policy_gradient_loss", np.mean(pg))
        self.logger.record("train/value_loss", np.mean(vf))
        self.logger.record("radial/eps", eps)
        if wc:
            self.logger.record("radial/worst_case_loss", np.mean(wc))
        self._guard_ramp(float(np.median(widths)) if widths else None, self.n_steps * self.n_envs)
