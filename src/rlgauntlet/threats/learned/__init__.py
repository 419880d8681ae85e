"""Learned attackers: RL-trained adversaries used as observation threats (PA-AD, SA-RL), the
Robust Sarsa attack through a learned Q function of the victim, and a policy_gradients release's
own adversary replayed (``released_attacker``)."""

from rlgauntlet.threats.learned import paad, released, robust_sarsa, sarl  # noqa: F401
