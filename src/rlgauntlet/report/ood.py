"""Renamed: :mod:`rlgauntlet.report.ood_plots` (this name is kept for one version, with a warning)."""

from rlgauntlet.common.deprecation import moved
from rlgauntlet.report import ood_plots

__getattr__ = moved(__name__, ood_plots)
