"""Threats: what changes the agent's observations, actions or world.

Importing this package registers the built-in threats; build one from a spec string with
:func:`parse_threat`.

May import: victims, envs, common, errors, version. Never the engine or a trainer.
"""

from rlgauntlet.threats import (  # noqa: F401  (registers threats)
    actions, attacks, corruptions, learned, memory, model_based, natural, noise, world,
)
from rlgauntlet.threats.base import THREATS, Memory, Schedule, Threat, ThreatParams, register_threat
from rlgauntlet.threats.spec import known_threats, parse_threat

__all__ = ["THREATS", "Memory", "Schedule", "Threat", "ThreatParams", "register_threat", "parse_threat", "known_threats"]
