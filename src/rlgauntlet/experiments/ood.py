"""Renamed: :mod:`rlgauntlet.experiments.ood_benchmark` (this name is kept for one version, with a warning)."""

from rlgauntlet.common.deprecation import moved
from rlgauntlet.experiments import ood_benchmark

__getattr__ = moved(__name__, ood_benchmark)
