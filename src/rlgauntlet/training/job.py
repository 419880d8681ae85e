"""Renamed: :mod:`rlgauntlet.training.zoo_training` (this name is kept for one version, with a warning)."""

from rlgauntlet.common.deprecation import moved
from rlgauntlet.training import zoo_training

__getattr__ = moved(__name__, zoo_training)
