"""The Victim interface: the agent under test, whatever library made it.

A victim turns env observations into the network input ``x`` (``preprocess``), maps ``x``
to a differentiable :class:`PolicyOutput` (``forward``) and picks actions (``act``).
White-box threats perturb ``x`` and differentiate ``forward``; black-box threats only need
``act``. ``budget_space`` says in which space an ε on ``x`` lives:

* ``pixel01``: image inputs scaled to [0, 1] (uint8 pixels / 255), as in the papers;
* ``normalized``: after observation normalisation (SB3 ``VecNormalize`` statistics);
* ``raw``: the env's own observation units.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

Kind = Literal["q", "categorical", "gaussian", "deterministic"]
KINDS: tuple[str, ...] = ("q", "categorical", "gaussian", "deterministic")
BudgetSpace = Literal["pixel01", "normalized", "raw"]


@dataclass
class PolicyOutput:
    """What a policy network says about a batch of inputs (all tensors batch-first).

    Attributes:
        kind: which fields are set.
        q: Q-values, shape (B, A) (``kind == "q"``).
        logits: action logits, shape (B, A) (``kind == "categorical"``).
        mean: Gaussian mean, shape (B, D) (``kind == "gaussian"``); for squashed policies
            (SAC) the mean *before* tanh.
        log_std: Gaussian log standard deviation, shape (B, D) (``kind == "gaussian"``).
        action: action in env units, shape (B, D) (``kind == "deterministic"``).
        squashed: the Gaussian action is tanh(sample) rescaled to the action bounds.
    """

    kind: Kind
    q: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    mean: torch.Tensor | None = None
    log_std: torch.Tensor | None = None
    action: torch.Tensor | None = None
    squashed: bool = False

    def rows(self, index: slice | torch.Tensor) -> "PolicyOutput":
        """The same output restricted to some rows of the batch."""
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        return PolicyOutput(self.kind, pick(self.q), pick(self.logits), pick(self.mean), pick(self.log_std),
                            pick(self.action), self.squashed)

    def scores(self) -> torch.Tensor:
        """Per-action scores of a discrete policy: Q-values or logits, shape (B, A)."""
        if self.kind == "q":
            return self.q
        if self.kind == "categorical":
            return self.logits
        raise ValueError(f"a {self.kind} policy has no per-action scores")

    def central_action(self) -> torch.Tensor:
        """A continuous policy's central action, shape (B, D): the deterministic action, or the
        Gaussian mean (before any tanh squashing)."""
        if self.kind == "deterministic":
            return self.action
        if self.kind == "gaussian":
            return self.mean
        raise ValueError(f"a {self.kind} policy has no continuous action")


class HeldStateSteps:
    """A recurrent victim's last three recurrent steps taken without a gradient, each by its input
    and held states: the engine and an attacker's MDP act on an input (``forward``) and then
    advance the states with that same input (``advance_state``), which is one LSTM step, not two
    (and the engine's clean comparison meets the clean step a gradient attack's reference took).
    An input is known by its memory (``x.detach()`` is the same input) and its in-place version:
    one changed in place since, or states held anew, make a new step. A step taken while autograd
    records is neither kept nor given (an attack needs its graph).

    Example:
        >>> steps, x, held = HeldStateSteps(), torch.zeros(1, 2), (torch.zeros(1, 3),)
        >>> with torch.no_grad():
        ...     a = steps.step(x, held, lambda: x + 1)
        ...     steps.step(x, held, lambda: x + 2) is a
        True
    """

    def __init__(self) -> None:
        self.entries: list[tuple] = []

    def step(self, x: torch.Tensor, held: object, compute):
        """``compute()``, the step of input ``x`` from states ``held``, or its kept result."""
        if torch.is_grad_enabled():
            return compute()
        key = self._key(x)
        for kept_key, kept_held, result, _ in self.entries:
            if kept_key == key and kept_held is held:
                return result
        result = compute()
        self.entries = [(key, held, result, x), *self.entries[:2]]  # x kept alive: its memory is not reused
        return result

    @staticmethod
    def _key(x: torch.Tensor) -> tuple:
        """The same numbers: the same memory, layout and in-place version (``x.detach()`` is the same input)."""
        return (x.data_ptr(), x.shape, x.stride(), x.dtype, x.device, x._version)


class Victim(ABC):
    """Agent under test. Subclasses set the attributes and implement ``preprocess`` and ``forward``.

    Attributes:
        kind: ``q``, ``categorical``, ``gaussian`` or ``deterministic``.
        observation_space: the env observation space the victim expects.
        action_space: the env action space it acts in.
        budget_space: the space perturbation budgets on ``x`` live in.
        device: torch device of the network.
        description: a dict recorded with every result (source, algorithm, file hash, ...).
        dtype: floating type of ``x`` and of the network (see :func:`choose_dtype`).
    """

    kind: Kind
    observation_space: gym.Space
    action_space: gym.Space
    budget_space: BudgetSpace
    device: torch.device
    description: dict
    dtype: torch.dtype = torch.float32
    #: how the victim measures its own uncertainty (``mc_dropout``, ``mc_dropconnect``,
    #: ``ensemble``), or None when it cannot (see ``victims.uncertainty``)
    uncertainty_method: str | None = None
    #: what the uncertainty score spreads over: ``policy`` (the primary output: Q-values,
    #: probabilities, mean or action) or ``critic`` (an actor-critic's value of the action it takes)
    uncertainty_output: str = "policy"
    #: a recurrent policy (an LSTM): ``forward`` reads a per-row state set by :meth:`use_state`,
    #: which the caller (the engine, an attacker's MDP) keeps per episode; gradient attacks
    #: perturb one step with that state held fixed
    recurrent: bool = False
    #: how the victim's own code sends a Gaussian policy's action to ``env.step``: clipped to the
    #: action bounds (SB3's ``predict``, the default) or as the network gives it (the
    #: policy_gradients releases). MuJoCo clamps the control for the physics either way, but
    #: Gymnasium's reward charges the control cost on the action as given, so the same trajectory
    #: scores differently (docs/decisions.md, "Hardening v4: released agents scored as their authors
    #: score them")
    clip_actions: bool = True
    #: the Gymnasium tasks (ids without their ``-vN``) the agent was trained for, where its file
    #: says so (a policy_gradients release names its gym env), or None: then any env whose spaces
    #: fit is accepted. Loading checks it (``experiments.agents.load_for_env``)
    trained_for: tuple[str, ...] | None = None

    def initial_state(self) -> object:
        """A recurrent victim's state at an episode's start (one row)."""
        raise NotImplementedError(f"{type(self).__name__} is not recurrent")

    def use_state(self, rows: list) -> None:
        """Hold these states (one per row of the next batches) for :meth:`forward`."""
        raise NotImplementedError(f"{type(self).__name__} is not recurrent")

    def advance_state(self, x: torch.Tensor) -> list:
        """The next state of every row after acting on input ``x`` (B, *input_shape), from the
        held states; the held states themselves are not changed."""
        raise NotImplementedError(f"{type(self).__name__} is not recurrent")

    @abstractmethod
    def preprocess(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Env observations, shape (B, *obs_shape), to network input ``x`` (float tensor on ``device``).

        ``obs`` may also be a float tensor of vector observations (a dynamics model's predicted
        state): then ``x`` is differentiable in it (model-based attacks unroll through it).
        """

    @abstractmethod
    def forward(self, x: torch.Tensor) -> PolicyOutput:
        """Network input ``x`` (B, *input_shape) to a :class:`PolicyOutput`, differentiable in ``x``."""

    def output_and_vjp(self, x: torch.Tensor, cotangent_of) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The primary output at ``x`` (Q-values, logits, mean or action: :meth:`layer_chain`'s)
        and its vector-Jacobian product ``gᵀ·∂out/∂x`` for ``g = cotangent_of(out)``, computed
        without autograd where the victim's network is a small MLP (``victims.mlp_vjp``); None
        where it does not offer one (callers then use autograd on :meth:`forward`). Victims whose
        ``forward`` is not exactly their chain (the delegating ones) keep None."""
        return None

    def layer_chain(self) -> list[nn.Module]:
        """Layers whose composition maps ``x`` to the primary output (Q, logits, mean or action).

        Bound propagation (IBP) walks this chain. Raises ``NotImplementedError`` when the
        network is not a plain chain.
        """
        raise NotImplementedError(f"{type(self).__name__} does not expose a layer chain")

    @property
    def input_bounds(self) -> tuple[float, float] | None:
        """Valid range of ``x`` (e.g. (0, 1) for pixel01 inputs), or None if unbounded."""
        return (0.0, 1.0) if self.budget_space == "pixel01" else None

    def uncertainty(self, x: torch.Tensor, rng, reduce: str = "mean") -> torch.Tensor:
        """Per-row uncertainty score of network inputs ``x`` (B, *input_shape), shape (B,).

        ``rng`` (a ``common.seeding.BatchRNG``, one generator per row) drives MC masks.
        Only victims with an ``uncertainty_method`` have one.
        """
        raise no_uncertainty_error(self)

    def actions(
        self, out: PolicyOutput, deterministic: bool = True, noise: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Actions from a policy output: (B,) long for discrete, (B, D) float in env units
        (a Gaussian policy's clipped to the action bounds unless :attr:`clip_actions` is False).

        ``noise`` drives stochastic actions: uniform(0,1) of shape (B,) for categorical,
        standard normal of shape (B, D) for Gaussian policies.
        """
        if out.kind == "q":
            return out.q.argmax(dim=-1)
        if out.kind == "categorical":
            if deterministic:
                return out.logits.argmax(dim=-1)
            cdf = torch.softmax(out.logits, dim=-1).cumsum(dim=-1)
            return torch.searchsorted(cdf, noise.unsqueeze(-1).to(cdf)).squeeze(-1).clamp(max=cdf.shape[-1] - 1)
        if out.kind == "deterministic":
            return out.action
        sample = out.mean if deterministic else out.mean + out.log_std.exp() * noise.to(out.mean)
        low = torch.as_tensor(self.action_space.low, device=sample.device, dtype=sample.dtype)
        high = torch.as_tensor(self.action_space.high, device=sample.device, dtype=sample.dtype)
        if out.squashed:
            return low + (torch.tanh(sample) + 1.0) * 0.5 * (high - low)
        if not self.clip_actions:
            return sample
        return torch.maximum(torch.minimum(sample, high), low)

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Batched actions for env observations (deterministic by default, as SB3's ``predict``)."""
        if not deterministic:
            raise ValueError("act() without a noise source is deterministic; use the rollout engine for sampled actions")
        return self.actions(self.forward(self.preprocess(obs))).cpu().numpy()

    @property
    def is_discrete(self) -> bool:
        return self.kind in ("q", "categorical")

    def check_env(self, env_observation_space: gym.Space, env_action_space: gym.Space, env_id: str) -> None:
        """Raise a :class:`~rlgauntlet.errors.UserError` when the victim does not fit the env."""
        from rlgauntlet.errors import UserError

        if type(env_action_space) is not type(self.action_space) or (
            isinstance(env_action_space, gym.spaces.Discrete) and env_action_space.n != self.action_space.n
        ) or (
            isinstance(env_action_space, gym.spaces.Box) and env_action_space.shape != self.action_space.shape
        ):
            raise UserError(
                f"the agent acts in {self.action_space} but {env_id} expects {env_action_space}; "
                "give the env the agent was trained on"
            )
        if not _observation_spaces_match(self.observation_space, env_observation_space):
            raise UserError(
                f"the agent observes {getattr(self.observation_space, 'shape', self.observation_space)} "
                f"but {env_id} (with its preset) gives {getattr(env_observation_space, 'shape', env_observation_space)}; "
                "give the env the agent was trained on, or set --preset to its wrappers"
            )


class DelegatingVictim(Victim):
    """A victim acting through another one; subclasses override only what they change (the
    argmin agent, GWC's worst feasible action, a meter counting certified steps)."""

    def __init__(self, victim: Victim) -> None:
        self.victim = victim
        for attr in ("kind", "observation_space", "action_space", "budget_space", "device", "description", "dtype",
                     "uncertainty_method", "clip_actions", "trained_for"):
            setattr(self, attr, getattr(victim, attr))

    def preprocess(self, obs: np.ndarray) -> torch.Tensor:
        return self.victim.preprocess(obs)

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        return self.victim.forward(x)

    def layer_chain(self) -> list[nn.Module]:
        return self.victim.layer_chain()

    @property
    def input_bounds(self) -> tuple[float, float] | None:
        return self.victim.input_bounds

    def actions(self, out: PolicyOutput, deterministic: bool = True, noise: torch.Tensor | None = None) -> torch.Tensor:
        return self.victim.actions(out, deterministic, noise)

    def uncertainty(self, x: torch.Tensor, rng, reduce: str = "mean") -> torch.Tensor:
        return self.victim.uncertainty(x, rng, reduce)


def as_tensor(obs: np.ndarray | torch.Tensor, device) -> torch.Tensor:
    """``obs`` as a tensor on ``device``, keeping the autograd graph of a tensor."""
    return obs.to(device) if isinstance(obs, torch.Tensor) else torch.as_tensor(np.asarray(obs), device=device)


def no_uncertainty_error(victim: Victim):
    """The :class:`UserError` for an agent asked for an uncertainty score it cannot give."""
    from rlgauntlet.errors import UserError

    name = victim.description.get("name") or victim.description.get("path") or "given"
    return UserError(f"this agent ({name}) reports no uncertainty; use an ensemble, MC Dropout or MC DropConnect "
                     "agent (e.g. zoo:cartpole-dqn-ensemble)")


def _observation_spaces_match(agent: gym.Space, env: gym.Space) -> bool:
    if not isinstance(agent, gym.spaces.Box) or not isinstance(env, gym.spaces.Box):
        return agent == env
    if agent.shape == env.shape:
        return True
    # SB3 stores image spaces channel-first while the env gives channel-last frames.
    return len(env.shape) == 3 and agent.shape == (env.shape[2], env.shape[0], env.shape[1])


PRECISIONS = ("auto", "float32", "float64")


def choose_dtype(precision: str, is_image: bool) -> torch.dtype:
    """Network precision: ``auto`` is float64 for vector inputs, float32 for images.

    Matrix products give results that depend (in the last bits) on how many rows are
    computed together, so a float32 continuous policy can act differently in the 8th digit
    depending on ``n_envs`` and chaotic dynamics amplify it. Computing small (vector-input)
    networks in float64 and rounding the action to float32 makes per-episode results
    independent of ``n_envs``; image networks stay float32 for speed, where only exact
    near-ties between action scores could differ. See docs/decisions.md.
    """
    if precision not in PRECISIONS:
        from rlgauntlet.errors import UserError

        raise UserError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")
    if precision == "auto":
        return torch.float32 if is_image else torch.float64
    return torch.float64 if precision == "float64" else torch.float32


class Affine(nn.Module):
    """y = x * scale + offset (elementwise), e.g. mapping tanh output to action bounds."""

    def __init__(self, scale: torch.Tensor, offset: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("scale", scale)
        self.register_buffer("offset", offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.offset


class SwapLastAxes(nn.Module):
    """Transpose an image batch's last two axes (B, C, H, W) -> (B, C, W, H): a permutation of the
    input, so interval bounds pass through it exactly (each corner permuted)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(-1, -2)


def flatten_chain(*modules: nn.Module) -> list[nn.Module]:
    """Flatten nested ``nn.Sequential`` containers into one list of layers."""
    out: list[nn.Module] = []
    for m in modules:
        if isinstance(m, nn.Sequential):
            out.extend(flatten_chain(*m))
        else:
            out.append(m)
    return out
