"""An input gradient for small MLP policies without autograd.

Learned attackers and adversarial training call the victim's input gradient once per env
step, at batch 1 for MuJoCo agents (one env per SB3 PPO run). For a 64×64 MLP the network
is not the cost there: autograd's graph and bookkeeping are. One forward pass that keeps
each layer's output, then the vector-Jacobian product walked back by hand (``g @ W`` through
a linear layer, ``g·(1 − y²)`` through tanh, ...), gives the same gradient up to float
rounding in about a fifth of the time (82 against 390 µs for hopper-ppo's policy; the
numbers in docs/decisions.md, "PA-ATLA's cost").

Only chains of the layers below are handled; :func:`plain_mlp` says whether a chain is one,
and callers fall back to autograd otherwise.

Example:
    >>> import torch, torch.nn as nn
    >>> net = [nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)]
    >>> x = torch.rand(5, 3)
    >>> out, grad = output_and_vjp(net, x, lambda out: torch.ones_like(out))
    >>> z = x.clone().requires_grad_(True)
    >>> torch.allclose(grad, torch.autograd.grad(nn.Sequential(*net)(z).sum(), z)[0], atol=1e-6)
    True
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from rlgauntlet.victims.base import Affine

#: the layers :func:`output_and_vjp` walks back
MLP_LAYERS = (nn.Linear, nn.Flatten, nn.Identity, nn.ReLU, nn.Tanh, nn.Sigmoid, Affine)


def plain_mlp(chain: list) -> bool:
    """Whether every layer of ``chain`` is one :func:`output_and_vjp` handles (exact types:
    a subclass may change what the layer computes)."""
    return bool(chain) and all(type(layer) in MLP_LAYERS for layer in chain)


@torch.no_grad()
def output_and_vjp(chain: list[nn.Module], x: torch.Tensor,
                   cotangent_of: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The chain's output at ``x`` (B, *input_shape) and ``gᵀ·∂out/∂x`` for the cotangent
    ``g = cotangent_of(out)`` (same shape as the output), one row per row: (out, grad) with
    ``grad`` shaped like ``x``. ``chain`` must satisfy :func:`plain_mlp`."""
    outputs: list[torch.Tensor] = []
    h = x
    for layer in chain:
        outputs.append(h if isinstance(layer, nn.Flatten) else None)  # Flatten needs its input's shape
        h = layer(h)
        if isinstance(layer, (nn.ReLU, nn.Tanh, nn.Sigmoid)):
            outputs[-1] = h  # each activation's derivative is a function of its output
    g = cotangent_of(h).to(h.dtype)
    for layer, kept in zip(reversed(chain), reversed(outputs)):
        if isinstance(layer, nn.Linear):
            g = g @ layer.weight
        elif isinstance(layer, nn.Tanh):
            g = g * (1.0 - kept * kept)
        elif isinstance(layer, nn.ReLU):
            g = g * (kept > 0).to(g.dtype)
        elif isinstance(layer, nn.Sigmoid):
            g = g * kept * (1.0 - kept)
        elif isinstance(layer, Affine):
            g = g * layer.scale
        elif isinstance(layer, nn.Flatten):
            g = g.reshape(kept.shape)
    return h, g
