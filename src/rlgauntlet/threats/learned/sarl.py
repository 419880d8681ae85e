"""SA-RL: the optimal state adversary learned by RL, Zhang et al. 2021, "Robust Reinforcement
Learning on State Observations with Learned Optimal Adversary" (ICLR 2021).

The attacker's action is the perturbation itself: δ ∈ [−1, 1]^{dim x}, applied as
x̃ = x + ε·δ (ℓ∞ budget in the victim's input space, clipped to its valid range). It needs
no gradient of the victim (black-box), but its action space is as large as the input.
Train it with ``rlgauntlet attack-train --method sarl``.

Spec: ``sarl:attacker=runs/sarl-cartpole,eps=0.1``.
"""

from __future__ import annotations

from rlgauntlet.threats.base import register_threat
from rlgauntlet.threats.learned.base import LearnedAttack


@register_threat
class SARL(LearnedAttack):
    name = "sarl"
    family = "learned"
    method = "sarl"
    white_box = False
