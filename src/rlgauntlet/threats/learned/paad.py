"""PA-AD: the policy adversary of Sun et al. 2022, "Who Is the Strongest Enemy? Towards Optimal
and Efficient Evasion Attacks in Deep RL" (ICLR 2022).

A director trained by RL on the Policy-Adversary MDP chooses, at each step, the direction in
which to push the victim's policy (or a target action); an actor realises that choice with a
gradient step inside the ℓ∞ ε-ball of the victim's input (see :mod:`.actor` for the
variants). Train the director with ``rlgauntlet attack-train --method paad``.

Spec: ``paad:attacker=runs/paad-cartpole,eps=0.1``.
"""

from __future__ import annotations

from rlgauntlet.threats.base import register_threat
from rlgauntlet.threats.learned.base import LearnedAttack


@register_threat
class PAAD(LearnedAttack):
    name = "paad"
    family = "learned"
    method = "paad"
