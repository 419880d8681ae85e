"""Renamed: :mod:`rlgauntlet.training.recipes` (this name is kept for one version, with a warning)."""

from rlgauntlet.common.deprecation import moved
from rlgauntlet.training import recipes

__getattr__ = moved(__name__, recipes)
