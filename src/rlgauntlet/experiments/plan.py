"""Renamed: :mod:`rlgauntlet.experiments.evaluations` (this name is kept for one version, with a warning)."""

from rlgauntlet.common.deprecation import moved
from rlgauntlet.experiments import evaluations

__getattr__ = moved(__name__, evaluations)
