"""Renamed: :mod:`rlgauntlet.metrics.detection` (this name is kept for one version, with a warning)."""

from rlgauntlet.common.deprecation import moved
from rlgauntlet.metrics import detection

__getattr__ = moved(__name__, detection)
