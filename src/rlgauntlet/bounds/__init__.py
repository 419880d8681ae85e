"""Certified bounds on a network's outputs over an ε-ball of inputs (interval bound propagation).

May import: victims, errors.
"""

from rlgauntlet.bounds.ibp import IBP_LAYERS, ibp, ibp_margins, input_box

__all__ = ["ibp", "ibp_margins", "input_box", "IBP_LAYERS"]
