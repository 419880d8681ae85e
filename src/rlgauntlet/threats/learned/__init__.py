"""Learned attackers: RL-trained adversaries used as observation threats (PA-AD, SA-RL)."""

from rlgauntlet.threats.learned import paad, sarl  # noqa: F401
