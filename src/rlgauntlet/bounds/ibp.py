"""Interval bound propagation (IBP; Gowal et al. 2018, as RADIAL-RL uses it).

For every input in the box [lower, upper] the output of a chain of layers lies in the box
IBP returns. Affine layers map the box's centre μ and radius r to layer(μ) and |W|·r (the
same linear map or convolution with |W| and no bias, so one bounded pass costs about two
forward passes); monotone element-wise layers (ReLU, Tanh, Sigmoid), Flatten and the axis swap
map the two corners. The input box is the ℓ∞ ε-ball around x intersected with the victim's valid input
range (pixels in [0, 1]; none for raw inputs). Everything is differentiable, so training
losses (RADIAL) can use the bounds.

Example:
    >>> import torch, torch.nn as nn
    >>> net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
    >>> lower, upper = ibp(net, torch.zeros(1, 2), eps=0.1)
    >>> bool((lower <= net(torch.zeros(1, 2))).all() and (net(torch.zeros(1, 2)) <= upper).all())
    True
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import Affine, SwapLastAxes, Victim, flatten_chain

MONOTONE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU)
#: the layers IBP can bound
IBP_LAYERS = (nn.Linear, nn.Conv2d, nn.Flatten, nn.Identity, SwapLastAxes, Affine) + MONOTONE


def input_box(x: torch.Tensor, eps: float | torch.Tensor,
              input_bounds: tuple[float, float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ℓ∞ ball [x − ε, x + ε] intersected with the valid input range, if any."""
    lower, upper = x - eps, x + eps
    if input_bounds is not None:
        lower, upper = lower.clamp(*input_bounds), upper.clamp(*input_bounds)
    return lower, upper


def _bound_layer(layer: nn.Module, lower: torch.Tensor, upper: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(layer, (nn.Linear, nn.Conv2d, Affine)):
        centre, radius = (upper + lower) / 2, (upper - lower) / 2
        if isinstance(layer, nn.Linear):
            mid, rad = layer(centre), F.linear(radius, layer.weight.abs())
        elif isinstance(layer, nn.Conv2d):
            mid = layer(centre)
            rad = F.conv2d(radius, layer.weight.abs(), None, layer.stride, layer.padding, layer.dilation, layer.groups)
        else:
            mid, rad = layer(centre), radius * layer.scale.abs()
        return mid - rad, mid + rad
    if isinstance(layer, MONOTONE + (nn.Flatten, nn.Identity, SwapLastAxes)):
        return layer(lower), layer(upper)
    raise UserError(f"interval bounds cannot pass a {type(layer).__name__} layer; IBP handles "
                    f"{', '.join(sorted({c.__name__ for c in IBP_LAYERS}))}")


def _layers_and_box(network: Victim | nn.Module | Sequence[nn.Module], x: torch.Tensor, eps: float | torch.Tensor,
                    input_bounds: tuple[float, float] | None) -> tuple[list[nn.Module], torch.Tensor, torch.Tensor]:
    if isinstance(network, Victim):
        if input_bounds is None:
            input_bounds = network.input_bounds
        try:
            layers = network.layer_chain()
        except NotImplementedError as exc:
            raise UserError(f"no layer chain to bound: {exc}") from None
        x = x.to(network.dtype)
    else:
        layers = flatten_chain(network) if isinstance(network, nn.Module) else flatten_chain(*network)
    lower, upper = input_box(x, eps, input_bounds)
    return layers, lower, upper


def ibp(network: Victim | nn.Module | Sequence[nn.Module], x: torch.Tensor, eps: float | torch.Tensor,
        input_bounds: tuple[float, float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds (lower, upper) on the outputs of ``network`` for every input in the ℓ∞ ball of
    radius ``eps`` around ``x`` (B, *input_shape), intersected with ``input_bounds``.

    ``network`` is a victim (its ``layer_chain()``, with its input bounds unless given), an
    ``nn.Sequential`` or a list of layers. ``eps`` may be a (B, 1, …) tensor of per-row radii.
    """
    layers, lower, upper = _layers_and_box(network, x, eps, input_bounds)
    for layer in layers:
        lower, upper = _bound_layer(layer, lower, upper)
    return lower, upper


def ibp_margins(network: Victim | nn.Module | Sequence[nn.Module], x: torch.Tensor, eps: float | torch.Tensor,
                labels: torch.Tensor, input_bounds: tuple[float, float] | None = None) -> torch.Tensor:
    """Lower bounds (B, A) on the margins out[y] − out[a] over the ε-ball, y = ``labels`` (B,).

    The last layer must be linear. It is bounded as one map per row, w_y − w_a (the margin
    specification folded into it, as verifiers do): tighter than lower[y] − upper[a] from
    :func:`ibp`, because the two outputs share the same hidden units. Column y is 0. Sound:
    every input in the ball has margins at or above these (tests sample points to check).
    """
    layers, lower, upper = _layers_and_box(network, x, eps, input_bounds)
    *hidden, last = layers
    if not isinstance(last, nn.Linear):
        raise UserError(f"margin bounds need a linear last layer, not {type(last).__name__}")
    for layer in hidden:
        lower, upper = _bound_layer(layer, lower, upper)
    centre, radius = (upper + lower) / 2, (upper - lower) / 2
    weight_diff = last.weight[labels].unsqueeze(1) - last.weight.unsqueeze(0)  # (B, A, H)
    bias_diff = 0.0 if last.bias is None else last.bias[labels].unsqueeze(1) - last.bias.unsqueeze(0)
    return (torch.einsum("bah,bh->ba", weight_diff, centre) + bias_diff
            - torch.einsum("bah,bh->ba", weight_diff.abs(), radius))
