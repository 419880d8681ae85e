"""Agents that report their own uncertainty per step: MC Dropout, MC DropConnect, ensembles.

The OOD benchmark (paper 002) scores every step by how much an agent disagrees with itself:

* **MC Dropout** (Gal & Ghahramani 2016): hidden activations are dropped with probability p,
  in training and in T test-time forward passes; the score is the spread of the T outputs.
* **MC DropConnect** (Mobiny et al. 2021): weights of every ``Linear`` and ``Conv2d`` layer are
  dropped instead (biases are kept), in training and in T test-time passes.
* **Ensemble** (Lakshminarayanan et al. 2017): K independently seeded agents; it acts on the
  mean output and its score is the spread across members.

The score of a step is the sample standard deviation (ddof = 1) of the agent's primary
output (Q-values, action probabilities, Gaussian mean or deterministic action) across the
T samples or K members, averaged over actions (``reduce="mean"``) or their maximum
(``reduce="max"``). MC agents *act* with the deterministic network (every unit kept, weights
as trained: the standard dropout inference), so their returns are those of a plain
evaluation; the T stochastic passes only measure the spread. Their masks are drawn from the
episode's own random stream, so the scores do not depend on ``n_envs``.

The dropout layers keep the parameter names of the layers they replace (``DropConnectLinear``
is an ``nn.Linear``; ``ActivationDropout`` has no parameters), so the policies' state dicts
are SB3's own and load as data.

Example:
    >>> import torch
    >>> layer = DropConnectLinear(3, 2, p=0.5)
    >>> _ = layer.eval(); torch.equal(layer(torch.ones(1, 3)), torch.nn.functional.linear(torch.ones(1, 3), layer.weight, layer.bias))
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import PolicyOutput, Victim

#: MC samples per step: the paper's only sample count ("the five predictors", its Fig. 5)
MC_SAMPLES = 5
DROPOUT_KINDS = ("activations", "weights")
REDUCTIONS = ("mean", "max")
SCORE_OUTPUTS = ("policy", "critic")


#: largest weight mask (elements) a DropConnectLinear draws per training forward
TRAIN_MASK_ELEMENTS = 1 << 18


class DropConnectLinear(nn.Linear):
    """A linear layer whose weights are dropped with probability ``p`` in training mode
    (inverted scaling: kept weights are divided by 1 − p, so the expected layer is the plain one).

    In training each example gets its own weight mask, as DropConnect is defined (Wan et al.
    2013); when a batch's masks would exceed ``TRAIN_MASK_ELEMENTS``, consecutive examples
    share one in equal groups. One mask for the whole batch does not train a DQN: the noise it
    puts on each action's Q-value is then the same for every example of a gradient step and
    independent across actions, and the agent collapsed to one action (docs/decisions.md).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, p: float = 0.1) -> None:
        super().__init__(in_features, out_features, bias)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(-1, self.in_features)
        rows = flat.shape[0]
        groups = max(1, min(rows, TRAIN_MASK_ELEMENTS // self.weight.numel()))
        size = -(-rows // groups)  # examples per mask
        keep = (torch.rand(groups, *self.weight.shape, device=x.device) >= self.p).to(x.dtype) / (1.0 - self.p)
        padded = F.pad(flat, (0, 0, 0, groups * size - rows)).reshape(groups, size, self.in_features)
        out = torch.bmm(padded, (self.weight * keep).transpose(1, 2)).reshape(groups * size, self.out_features)[:rows]
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


class DropConnectConv2d(nn.Conv2d):
    """A 2-D convolution whose kernel weights are dropped with probability ``p`` in training mode."""

    def __init__(self, *args: Any, p: float = 0.1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, F.dropout(self.weight, self.p, self.training), self.bias)


class ActivationDropout(nn.Module):
    """An activation followed by dropout of its outputs with probability ``p`` (training mode)."""

    def __init__(self, activation: nn.Module, p: float) -> None:
        super().__init__()
        self.activation, self.p = activation, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.activation(x), self.p, self.training)


_ACTIVATIONS = (nn.ReLU, nn.Tanh, nn.ELU, nn.LeakyReLU, nn.GELU, nn.SiLU)


def drop_connect(layer: nn.Module, p: float) -> nn.Module:
    """The DropConnect twin of a Linear or Conv2d layer, sharing its Parameter objects (an
    optimizer built before the swap still trains them)."""
    if isinstance(layer, nn.Linear) and not isinstance(layer, DropConnectLinear):
        new = DropConnectLinear(layer.in_features, layer.out_features, layer.bias is not None, p=p)
    elif isinstance(layer, nn.Conv2d) and not isinstance(layer, DropConnectConv2d):
        new = DropConnectConv2d(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride, layer.padding,
                                layer.dilation, layer.groups, layer.bias is not None, layer.padding_mode, p=p)
    else:
        return layer
    new.weight, new.bias = layer.weight, layer.bias
    return new


def _leaves(module: nn.Module):
    """(parent, name, layer) for every leaf layer of ``module`` in registration order (the
    forward order of Sequential and SB3's networks), nested containers flattened; a layer
    already carrying dropout is a leaf."""
    for name, child in module.named_children():
        if isinstance(child, ActivationDropout) or not list(child.children()):
            yield module, name, child
        else:
            yield from _leaves(child)


def add_dropout(module: nn.Module, p: float, kind: str) -> nn.Module:
    """Put dropout into ``module`` in place and return it.

    ``kind="weights"`` (DropConnect) replaces every Linear and Conv2d; ``kind="activations"``
    (MC Dropout) wraps every activation that a later Linear or Conv2d reads, in the network's
    layer order across nested containers (hidden units only: an output squashing such as TD3's
    final tanh is left alone; a convolutional body's activations are hidden units too).
    """
    if kind not in DROPOUT_KINDS:
        raise ValueError(f"dropout kind must be one of {DROPOUT_KINDS}, not {kind!r}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), not {p}")
    leaves = list(_leaves(module))
    for i, (parent, name, layer) in enumerate(leaves):
        if kind == "weights":
            new = drop_connect(layer, p)
        elif isinstance(layer, _ACTIVATIONS) and any(isinstance(c, (nn.Linear, nn.Conv2d)) for _, _, c in leaves[i + 1:]):
            new = ActivationDropout(layer, p)
        else:
            continue
        if new is not layer:
            setattr(parent, name, new)
    return module


def dropout_kind_of(layers: list[nn.Module]) -> tuple[str, float] | None:
    """(``mc_dropout`` or ``mc_dropconnect``, p) when a layer chain holds dropout layers."""
    for layer in layers:
        if isinstance(layer, (DropConnectLinear, DropConnectConv2d)):
            return "mc_dropconnect", float(layer.p)
        if isinstance(layer, ActivationDropout):
            return "mc_dropout", float(layer.p)
    return None


def _keep_mask(rng: BatchRNG, samples: int, shape: tuple[int, ...], p: float, like: torch.Tensor) -> torch.Tensor:
    """Inverted-dropout multipliers, shape (B, T, *shape): 1/(1−p) with probability 1 − p, else 0."""
    return (rng.uniform((samples, *shape)) >= p).to(device=like.device, dtype=like.dtype) / (1.0 - p)


def mc_forward(layers: list[nn.Module], x: torch.Tensor, rng: BatchRNG, samples: int = MC_SAMPLES) -> torch.Tensor:
    """T stochastic passes of a layer chain: output shape (B, T, *out_shape).

    Every row's masks come from its own generator in ``rng``: a Linear's weight mask is
    (T, out, in) per row, a Conv2d's (T, out, in, kh, kw), an activation's the shape of its
    output. Layers without dropout run on the B·T rows at once.
    """
    batch = x.shape[0]
    h = x.unsqueeze(1).expand(batch, samples, *x.shape[1:])
    for layer in layers:
        if isinstance(layer, DropConnectLinear):
            weight = layer.weight * _keep_mask(rng, samples, tuple(layer.weight.shape), layer.p, h)
            h = torch.einsum("btoi,bti->bto", weight, h)
            if layer.bias is not None:
                h = h + layer.bias
        elif isinstance(layer, DropConnectConv2d):
            weight = layer.weight * _keep_mask(rng, samples, tuple(layer.weight.shape), layer.p, h)
            rows = batch * samples
            grouped = h.reshape(1, rows * h.shape[2], *h.shape[3:])
            out = F.conv2d(grouped, weight.reshape(rows * layer.out_channels, *layer.weight.shape[1:]), None,
                           layer.stride, layer.padding, layer.dilation, groups=rows * layer.groups)
            h = out.reshape(batch, samples, layer.out_channels, *out.shape[2:])
            if layer.bias is not None:
                h = h + layer.bias.reshape(-1, 1, 1)
        elif isinstance(layer, ActivationDropout):
            h = layer.activation(h)
            h = h * _keep_mask(rng, samples, tuple(h.shape[2:]), layer.p, h)
        else:
            out = layer(h.reshape(batch * samples, *h.shape[2:]))
            h = out.reshape(batch, samples, *out.shape[1:])
    return h


def primary_output(out: PolicyOutput) -> torch.Tensor:
    """What a step's score spreads over, shape (B, D): Q-values, action probabilities, the
    Gaussian mean or the deterministic action."""
    if out.kind == "q":
        return out.q
    if out.kind == "categorical":
        return torch.softmax(out.logits, dim=-1)
    return out.mean if out.kind == "gaussian" else out.action


def spread_score(samples: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    """Per-row score from samples of shape (B, T, D): the sample std (ddof = 1) over T, then the
    mean (or max) over D. Shape (B,)."""
    if reduce not in REDUCTIONS:
        raise UserError(f"unknown uncertainty reduction {reduce!r}; choose one of: {', '.join(REDUCTIONS)}")
    std = samples.reshape(samples.shape[0], samples.shape[1], -1).std(dim=1, unbiased=True)
    return std.mean(dim=1) if reduce == "mean" else std.amax(dim=1)


def _mean_output(outs: list[PolicyOutput]) -> PolicyOutput:
    """The members' combined output: mean Q, mean probabilities (as log-probabilities), mean
    Gaussian mean and log-std, mean deterministic action."""
    kind = outs[0].kind
    mean = lambda name: torch.stack([getattr(o, name) for o in outs]).mean(dim=0)  # noqa: E731
    if kind == "q":
        return PolicyOutput("q", q=mean("q"))
    if kind == "categorical":
        probs = torch.stack([torch.softmax(o.logits, dim=-1) for o in outs]).mean(dim=0)
        return PolicyOutput("categorical", logits=probs.log())
    if kind == "gaussian":
        return PolicyOutput("gaussian", mean=mean("mean"), log_std=mean("log_std"), squashed=outs[0].squashed)
    return PolicyOutput("deterministic", action=mean("action"))


class EnsembleVictim(Victim):
    """K agents of one algorithm, env and input preprocessing, acting as one.

    ``forward`` is the members' mean output (the ensemble acts greedily on the mean Q-values,
    or with the mean action); ``uncertainty`` is the spread across members (no randomness).

    Example:
        >>> from rlgauntlet.victims import load_victim                         # doctest: +SKIP
        >>> ensemble = load_victim("zoo:cartpole-dqn-ensemble")               # doctest: +SKIP
        >>> ensemble.uncertainty(ensemble.preprocess(obs), rng).shape          # doctest: +SKIP
        torch.Size([8])
    """

    uncertainty_method = "ensemble"

    def __init__(self, members: list[Victim], description: dict | None = None) -> None:
        if len(members) < 2:
            raise UserError(f"an ensemble needs at least 2 members, got {len(members)}")
        first = members[0]
        for m in members[1:]:
            if (m.kind, m.budget_space, m.observation_space, m.action_space) != (
                    first.kind, first.budget_space, first.observation_space, first.action_space):
                raise UserError("ensemble members differ in kind, input space or action space; every member must be "
                                "the same algorithm trained on the same env")
        stats = [getattr(m, "vecnormalize", None) for m in members]
        if any(s is not None for s in stats) and not all(
                s is not None and np.array_equal(s.mean, stats[0].mean) and np.array_equal(s.var, stats[0].var)
                for s in stats):
            raise UserError("ensemble members normalise observations differently; an ensemble needs one "
                            "preprocessing (train its members without VecNormalize or share its statistics)")
        self.members = members
        for attr in ("kind", "observation_space", "action_space", "budget_space", "device", "dtype"):
            setattr(self, attr, getattr(first, attr))
        self.description = description or {"source": "ensemble", "members": [m.description for m in members]}

    def preprocess(self, obs: np.ndarray) -> torch.Tensor:
        return self.members[0].preprocess(obs)

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        return _mean_output([m.forward(x) for m in self.members])

    @property
    def input_bounds(self) -> tuple[float, float] | None:
        return self.members[0].input_bounds

    def actions(self, out: PolicyOutput, deterministic: bool = True, noise: torch.Tensor | None = None) -> torch.Tensor:
        return self.members[0].actions(out, deterministic, noise)

    def uncertainty(self, x: torch.Tensor, rng: BatchRNG, reduce: str = "mean") -> torch.Tensor:
        if self.uncertainty_output == "critic":  # each member's value of the action the ensemble takes
            action = self.actions(self.forward(x))
            samples = torch.stack([m.critic_value(x, action) for m in self.members], dim=1)
        else:
            samples = torch.stack([primary_output(m.forward(x)) for m in self.members], dim=1)
        return spread_score(samples, reduce)
