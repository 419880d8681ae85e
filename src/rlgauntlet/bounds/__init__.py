"""Certified bounds on a network's outputs over an ε-ball of inputs (interval bound propagation)."""

from rlgauntlet.bounds.ibp import IBP_LAYERS, ibp, input_box

__all__ = ["ibp", "input_box", "IBP_LAYERS"]
