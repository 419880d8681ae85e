"""Impact of a threat (Korkmaz, Daylight §2.5): how much of the agent's score it takes away,
on a scale where 0 is the clean agent and 1 the worst agent.

    I = (Score_max − Score_adv) / (Score_max − Score_min)

Score_max is the clean agent's mean return; Score_min the mean return of the *argmin agent*,
the same network taking its worst action on every step (lowest Q-value or logit). The
generalized impact replaces Score_min by a fixed minimum score of the env (−21 for Pong,
0 for the other Atari games in the paper; see :func:`default_min_score`).

Example:
    >>> impact(score_max=20.0, score_adv=-1.0, score_min=-21.0)
    0.5121951219512195
"""

from __future__ import annotations

import torch

from rlgauntlet.errors import UserError
from rlgauntlet.victims.base import DelegatingVictim, PolicyOutput, Victim

ARGMIN_LABEL = "argmin_agent"

#: fixed minimum scores for the generalized impact (the paper's defaults)
MIN_SCORES = {"PongNoFrameskip-v4": -21.0, "SADQN/Pong-v0": -21.0}


def default_min_score(env_id: str, preset: str) -> float | None:
    """The paper's fixed minimum score: −21 for Pong, 0 for other Atari games; None elsewhere
    (give ``--min-score`` for non-Atari envs)."""
    if env_id in MIN_SCORES:
        return MIN_SCORES[env_id]
    return 0.0 if preset in ("atari", "sa_dqn") else None


def impact(score_max: float, score_adv: float, score_min: float | None) -> float | None:
    """(max − adv) / (max − min); None when undefined (no minimum, or max == min)."""
    if score_min is None or score_max == score_min:
        return None
    return (score_max - score_adv) / (score_max - score_min)


class ArgminVictim(DelegatingVictim):
    """The victim's network acting with its *worst* action: argmin of Q-values or logits.

    Only for discrete victims (the paper's Score_min agent); everything but the action
    choice is delegated to the wrapped victim.
    """

    def __init__(self, victim: Victim) -> None:
        if not victim.is_discrete:
            raise UserError("the argmin agent needs discrete actions; for continuous victims give --min-score")
        super().__init__(victim)

    def actions(self, out: PolicyOutput, deterministic: bool = True, noise=None) -> torch.Tensor:
        return out.scores().argmin(dim=-1)
