"""rlgauntlet: put trained deep-RL agents through the gauntlet."""

__version__ = "0.1.0"
