"""Victims: the agent under test behind one interface (see ``base.Victim``), with adapters for
Stable-Baselines3, torch modules and TorchScript, the policy_gradients release format and the
MinAtar network; the agent grammar (``agent_ref``) and the resolver that loads an agent by name
(``resolver``).

May import: zoo and published (to resolve ``zoo:NAME`` and ``published:NAME``), common, errors, version. Knows nothing of threats or rollouts."""

from __future__ import annotations

from rlgauntlet.victims.agent_ref import AGENT_FORMS, AgentRef, parse_agent
from rlgauntlet.victims.base import PolicyOutput, Victim
from rlgauntlet.victims.resolver import load_victim
from rlgauntlet.victims.sb3 import SB3Victim, load_sb3
from rlgauntlet.victims.torch_module import TorchVictim, load_torchscript

__all__ = ["AGENT_FORMS", "AgentRef", "PolicyOutput", "Victim", "SB3Victim", "TorchVictim", "load_sb3",
           "load_torchscript", "load_victim", "parse_agent"]
