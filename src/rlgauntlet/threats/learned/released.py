"""The authors' own learned attacker from a policy_gradients release (``attack-*.model`` of the
SA-PPO / ATLA releases): Zhang et al. 2021, "Robust Reinforcement Learning on State
Observations with Learned Optimal Adversary" (ICLR 2021), replayed as the release's evaluation
does (``ATTACK_METHOD = advpolicy``).

The adversary is a ``CtsPolicy`` from the agent's filtered state ``x`` to a perturbation; its
mean, squashed by hardtanh, is scaled by ε: ``x̃ = x + ε·hardtanh(μ_adv(x))`` (ℓ∞ budget in the
agent's filtered, normalized space, deterministic as in the release's evaluation). The file is
read as data (:mod:`rlgauntlet.victims.pg_release`); only its ``adversary_policy_model`` is used,
on the victim's own state filter, as the release's code does.

Spec: ``released_attacker:path=ATLA_robust_RL/src/models/atla_release/PPO/attack-ppo-hopper.model,eps=0.075``.
"""

from __future__ import annotations

from functools import cached_property

import torch
import torch.nn as nn
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Threat, ThreatParams, register_threat
from rlgauntlet.victims.base import Victim


class ReleasedParams(ThreatParams):
    path: str = Field(description="an attack-*.model file of a policy_gradients release")
    eps: float = Field(ge=0.0, description="ℓ∞ budget in the agent's filtered (normalized) input space")


@register_threat
class ReleasedAttacker(Threat):
    name = "released_attacker"
    family = "learned"
    Params = ReleasedParams
    budget_params = ("eps",)
    white_box = False

    @cached_property
    def network(self) -> nn.Sequential:
        """The adversary's mean network (float64), read from the file as data."""
        from rlgauntlet.victims.pg_release import mean_network, read_release

        release = read_release(self.params.path)
        if release.adversary is None:
            raise UserError(f"released_attacker: {self.params.path} holds no adversary_policy_model; give an "
                            "attack-*.model file of the release")
        network = mean_network(release.adversary).eval()
        for p in network.parameters():
            p.requires_grad_(False)
        return network

    def fingerprint(self) -> dict:
        from pathlib import Path

        from rlgauntlet.common.hashing import sha256_file

        return {"attacker_sha256": sha256_file(Path(self.params.path))}

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        if victim.description.get("source") != "pg":
            raise UserError("released_attacker replays a policy_gradients release's adversary on that release's "
                            "agents; give a pg:PATH.model agent")
        first = self.network[0]
        size = int(victim.observation_space.shape[0])
        if first.in_features != size or self.network[-1].out_features != size:
            raise UserError(f"released_attacker: {self.params.path} perturbs {first.in_features} numbers and this "
                            f"agent observes {size}; give the attack file released beside this agent")

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        with torch.no_grad():
            direction = nn.functional.hardtanh(self.network(x.to(torch.float64)))
        return (x + self.params.eps * direction.to(x.dtype)).detach()
