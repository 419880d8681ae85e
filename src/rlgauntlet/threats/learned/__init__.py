"""Learned attackers: RL-trained adversaries used as observation threats (PA-AD, SA-RL), and the
Robust Sarsa attack through a learned Q function of the victim."""

from rlgauntlet.threats.learned import paad, robust_sarsa, sarl  # noqa: F401
