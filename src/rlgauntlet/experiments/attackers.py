"""Renamed: :mod:`rlgauntlet.experiments.attacker_job` (this name is kept for one version, with a warning)."""

from rlgauntlet.common.deprecation import moved
from rlgauntlet.experiments import attacker_job

__getattr__ = moved(__name__, attacker_job)
