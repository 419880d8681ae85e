"""WocaR-PPO (Liang et al. 2022, "Efficient Adversarial Training without Attacking: Worst-Case-Aware
Robust Reinforcement Learning"; umd-huang-lab/WocaR-RL, MIT): SA-PPO whose advantage also carries
a learned *worst-case* action value, so the policy prefers actions whose value holds up when an
observation attacker steers the next actions.

Per iteration, as the official ``robust_q_ppo`` mode does it:

1. **The worst-case Q** ``Q_w(x, a)`` (an MLP on the network input and the action) is regressed
   for ``q_epochs`` passes over the rollout's transitions, minibatch by minibatch, on the target

       y = r + γ · (1 − done) · Q̄_w(x', ā(x')),   ā(x') = argmin over a in B(x') of Q_w(x', a)

   where B(x') is the box of policy means an ℓ∞ perturbation of ``q_eps`` (the official 0.01,
   fixed, in normalised units) can produce, from interval bounds of the policy network, and the
   argmin is ``q_pgd_steps`` signed descent steps of (ub − lb)/steps from the clean mean
   (``worst_action_pgd``); Q̄_w is a target copy updated softly (τ) after every step. r is the
   reward the rollout stored (normalised by VecNormalize when the recipe normalises returns).
2. **The policy's advantage** is Â + w · Q̄_w(x, a), each normalised over the minibatch, with the
   weight w ramping linearly from 0 to ``q_weight`` over training (the official "linear"
   schedule, capped at 1); the SA regulariser is added as in SA-PPO.

The transitions are read in rollout order from SB3's buffer (next observation = the one stored
after it, or the last observation of the rollout; done = the next step starts an episode, so
time-limit ends count as ends, as the official code's ``not_dones``).

Example:
    >>> model = WocaRPPO("MlpPolicy", "Pendulum-v1", sa_eps=0.075, q_weight=0.8)   # doctest: +SKIP
    >>> model.learn(2_000_000)                                                    # doctest: +SKIP
"""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F
from gymnasium import spaces

from rlgauntlet.bounds import ibp
from rlgauntlet.training.defences.sa_ppo import SAPPO
from rlgauntlet.training.live import PPOTerms


def autograd_action_gradient(q: nn.Module, x: th.Tensor) -> Callable[[th.Tensor], th.Tensor]:
    """a ↦ ∂q(x, a)/∂a (B, A) by autograd: for any Q module."""

    def gradient(a: th.Tensor) -> th.Tensor:
        a = a.detach().requires_grad_(True)
        (grad,) = th.autograd.grad(q(x, a).sum(), a)
        return grad

    return gradient


def worst_actions(q: nn.Module, x: th.Tensor, lower: th.Tensor, upper: th.Tensor, start: th.Tensor,
                  steps: int) -> th.Tensor:
    """Actions in the box [lower, upper] (B, A) that (approximately) minimise ``q(x, a)``: signed
    descent steps of (upper − lower)/steps from ``start``, each projected onto the box. The
    gradient is :meth:`WorstCaseQ.action_gradient` for a :class:`WorstCaseQ` (the same numbers,
    2.5× faster: the search is most of WocaR's cost), autograd's for any other module."""
    gradient = q.action_gradient(x) if isinstance(q, WorstCaseQ) else autograd_action_gradient(q, x)
    step = (upper - lower) / steps
    a = th.max(th.min(start.detach(), upper), lower)
    for _ in range(steps):
        a = th.max(th.min(a.detach() - step * gradient(a).sign(), upper), lower)
    return a.detach()


def worst_case_targets(q_target: nn.Module, rewards: th.Tensor, next_x: th.Tensor, not_done: th.Tensor,
                       box: Callable[[th.Tensor], tuple[th.Tensor, th.Tensor, th.Tensor]], gamma: float,
                       steps: int, q_search: nn.Module | None = None) -> th.Tensor:
    """y = r + γ (1 − done) Q̄(x', ā(x')) per transition (see module docstring); ``box(x')``
    gives (lower, upper, clean mean) of the actions an attacker can make the policy take.
    ``q_search``: the network whose argmin ā is (the online Q_w, as the official
    ``worst_q_step`` searches with ``q_net`` and evaluates ``target_q_net``); None: ``q_target``."""
    lower, upper, mean = box(next_x)
    worst = worst_actions(q_target if q_search is None else q_search, next_x, lower, upper, mean, steps)
    with th.no_grad():
        return rewards + gamma * not_done * q_target(next_x, worst).squeeze(-1)


class WorstCaseQ(nn.Module):
    """Q_w(x, a): an MLP of the network input and the action (the official ValueDenseNet: two
    tanh layers of 64)."""

    def __init__(self, input_dim: int, action_dim: int, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        layers, width = [], input_dim + action_dim
        for size in hidden:
            layers += [nn.Linear(width, size), nn.Tanh()]
            width = size
        self.net = nn.Sequential(*layers, nn.Linear(width, 1))

    def forward(self, x: th.Tensor, a: th.Tensor) -> th.Tensor:
        return self.net(th.cat([x.flatten(1), a], dim=1))

    def action_gradient(self, x: th.Tensor) -> Callable[[th.Tensor], th.Tensor]:
        """a ↦ ∂Q(x, a)/∂a (B, A) for fixed ``x``, back-propagated by hand through the tanh layers:
        the first layer's x part is computed once for all of a search's steps, and no autograd
        graph is built. The same derivative as autograd's (tested); no gradient flows to Q."""
        linears = [m for m in self.net if isinstance(m, nn.Linear)]
        first, hidden, last = linears[0], linears[1:-1], linears[-1]
        x = x.flatten(1).detach()
        width = x.shape[1]
        with th.no_grad():
            from_x = th.addmm(first.bias, x, first.weight[:, :width].t())
        on_a = first.weight[:, width:].detach()

        def gradient(a: th.Tensor) -> th.Tensor:
            with th.no_grad():
                activations = [th.tanh(from_x + a @ on_a.t())]
                for layer in hidden:
                    activations.append(th.tanh(F.linear(activations[-1], layer.weight, layer.bias)))
                grad = last.weight.expand(len(a), -1)  # ∂Q/∂(last activation)
                for layer, h in zip(reversed(hidden), reversed(activations[1:])):
                    grad = (grad * (1 - h * h)) @ layer.weight
                return (grad * (1 - activations[0] * activations[0])) @ on_a

        return gradient


def fit_worst_q(q: nn.Module, q_target: nn.Module, optimizer: th.optim.Optimizer, x: th.Tensor, actions: th.Tensor,
                rewards: th.Tensor, next_x: th.Tensor, not_done: th.Tensor,
                box: Callable[[th.Tensor], tuple[th.Tensor, th.Tensor, th.Tensor]], gamma: float, epochs: int,
                minibatches: int, tau: float, steps: int, generator: th.Generator | None = None) -> float:
    """``epochs`` shuffled passes of ``minibatches`` regression steps of Q_w onto its worst-case
    targets (each step: the worst action searched on ``q``, valued by the target network, which is
    then updated softly by ``tau``).
    Returns the last step's loss."""
    n = len(rewards)
    loss = th.zeros(())
    # the box is the policy's, which this fit does not change: bounded once for every transition
    lower, upper, mean = box(next_x)
    for _ in range(epochs):
        order = th.randperm(n, generator=generator)
        for rows in th.tensor_split(order, minibatches):
            y = worst_case_targets(q_target, rewards[rows], next_x[rows], not_done[rows],
                                   lambda _, rows=rows: (lower[rows], upper[rows], mean[rows]), gamma, steps,
                                   q_search=q)
            loss = F.mse_loss(q(x[rows], actions[rows]).squeeze(-1), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with th.no_grad():
                for target, source in zip(q_target.parameters(), q.parameters()):
                    target.mul_(1.0 - tau).add_(source, alpha=tau)
    return float(loss.detach())


class WocaRPPO(SAPPO):
    """SA-PPO with the worst-case-aware advantage (see module docstring)."""

    def __init__(self, *args, q_weight: float = 0.8, q_lr: float = 4e-4, q_epochs: int = 10, q_tau: float = 0.001,
                 q_eps: float = 0.01, q_pgd_steps: int = 50, **kwargs) -> None:
        self.q_weight, self.q_lr, self.q_epochs, self.q_tau = q_weight, q_lr, q_epochs, q_tau
        self.q_eps, self.q_pgd_steps = q_eps, q_pgd_steps
        super().__init__(*args, **kwargs)
        if not isinstance(self.action_space, spaces.Box):
            raise ValueError("WocaR-PPO's worst-case Q takes continuous actions: give an env with Box actions")
        obs_dim = int(np.prod(self.observation_space.shape))
        self.worst_q = WorstCaseQ(obs_dim, int(self.action_space.shape[0])).to(self.device)
        self.worst_q_target = copy.deepcopy(self.worst_q)
        for p in self.worst_q_target.parameters():
            p.requires_grad_(False)
        self.worst_q_optimizer = th.optim.Adam(self.worst_q.parameters(), lr=q_lr)

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        """The worst-case Q, its target and its optimizer are saved and resumed with the policy."""
        state_dicts, variables = super()._get_torch_save_params()
        return state_dicts + ["worst_q", "worst_q_target", "worst_q_optimizer"], variables

    def current_q_weight(self) -> float:
        """w of this update: linear from 0 to ``q_weight`` over training, at most 1."""
        return min(1.0, self.q_weight * self._progress())

    def _policy_box(self, x: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """(lower, upper, clean) policy means over the ``q_eps`` ball of each row of ``x``."""
        victim = self._victim()
        with th.no_grad():
            lower, upper = ibp(victim, x.to(victim.dtype), self.q_eps)
            mean = victim.forward(x.to(victim.dtype)).mean
        return lower.float(), upper.float(), mean.float()

    def _transitions(self) -> tuple[th.Tensor, ...]:
        """(x, a, r, x', not done) of the rollout, in rollout order, flattened over envs."""
        buffer = self.rollout_buffer
        obs = th.as_tensor(buffer.observations, dtype=th.float32, device=self.device)  # (T, E, *obs)
        last = th.as_tensor(np.asarray(self._last_obs), dtype=th.float32, device=self.device)[None]
        next_obs = th.cat([obs[1:], last], dim=0)
        starts = np.concatenate([buffer.episode_starts[1:], np.asarray(self._last_episode_starts, dtype=np.float32)[None]])
        flat = lambda t: t.reshape(-1, *t.shape[2:])  # noqa: E731
        return (flat(self._network_input(obs)).flatten(1), flat(th.as_tensor(buffer.actions, device=self.device)),
                flat(th.as_tensor(buffer.rewards, device=self.device)), flat(self._network_input(next_obs)).flatten(1),
                flat(th.as_tensor(1.0 - starts, dtype=th.float32, device=self.device)))

    def _ppo_terms(self, data, clip_range: float) -> PPOTerms:
        """SA-PPO's terms with the advantage Â + w Q̄_w(x, a), each normalised over the minibatch."""
        terms = super()._ppo_terms(data, clip_range)
        weight = self.current_q_weight()
        if weight <= 0:
            return terms
        with th.no_grad():
            worst = self.worst_q_target(self._network_input(data.observations).flatten(1).float(),
                                        terms.actions.float()).squeeze(-1)
            worst = (worst - worst.mean()) / (worst.std() + 1e-8) if len(worst) > 1 else worst
        advantages = terms.advantages + weight * worst.to(terms.advantages.dtype)

        def surrogate(logp: th.Tensor) -> th.Tensor:
            ratio = th.exp(logp - data.old_log_prob)
            return -th.min(advantages * ratio, advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()

        return PPOTerms(terms.actions, advantages, terms.log_prob, surrogate, terms.value_loss, terms.entropy_loss)

    def train(self) -> None:
        x, actions, rewards, next_x, not_done = self._transitions()
        minibatches = max(1, len(rewards) // self.batch_size)
        q_loss = fit_worst_q(self.worst_q, self.worst_q_target, self.worst_q_optimizer, x, actions.float(),
                             rewards.float(), next_x, not_done, self._policy_box, self.gamma, self.q_epochs,
                             minibatches, self.q_tau, self.q_pgd_steps)
        self.logger.record("wocar/q_loss", q_loss)
        self.logger.record("wocar/q_weight", self.current_q_weight())
        super().train()
