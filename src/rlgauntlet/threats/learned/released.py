"""The authors' own learned attacker from a policy_gradients release (``attack-*.model`` of the
SA-PPO / ATLA releases): Zhang et al. 2021, "Robust Reinforcement Learning on State
Observations with Learned Optimal Adversary" (ICLR 2021), replayed as the release's evaluation
does (``ATTACK_METHOD = advpolicy``).

The adversary is a policy from the agent's filtered state ``x`` to a perturbation; its mean,
squashed by hardtanh, is scaled by ε: ``x̃ = x + ε·hardtanh(μ_adv(x))`` (ℓ∞ budget in the agent's
filtered, normalized space, deterministic as in the release's evaluation). An MLP adversary
(``CtsPolicy``) maps each state alone; an LSTM adversary (``CtsLSTMPolicy``, released beside the
LSTM agents) carries its own memory through the episode: it starts at zero, and the adversary
reads every step's state, perturbed or not. The file is read as data
(:mod:`rlgauntlet.victims.pg_release`); only its ``adversary_policy_model`` is used, on the
victim's own state filter, as the release's code does.

Spec: ``released_attacker:path=ATLA_robust_RL/src/models/atla_release/PPO/attack-ppo-hopper.model,eps=0.075``.
"""

from __future__ import annotations

from functools import cached_property

import torch
import torch.nn as nn
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Memory, Threat, ThreatParams, register_threat
from rlgauntlet.victims.base import Victim


class ReleasedParams(ThreatParams):
    path: str = Field(description="an attack-*.model file of a policy_gradients release")
    eps: float = Field(ge=0.0, description="ℓ∞ budget in the agent's filtered (normalized) input space")


@register_threat
class ReleasedAttacker(Threat):
    name = "released_attacker"
    family = "learned"
    Params = ReleasedParams
    file_params = ("path",)
    budget_params = ("eps",)
    white_box = False

    @cached_property
    def _weights(self) -> dict[str, torch.Tensor]:
        """The adversary's weights, read from the file (once) as data."""
        from rlgauntlet.victims.pg_release import read_release

        adversary = read_release(self.params.path, role="attacker").adversary
        if adversary is None:
            raise UserError(f"released_attacker: {self.params.path} holds no adversary_policy_model; give an "
                            "attack-*.model file of the release")
        return adversary

    @property
    def recurrent(self) -> bool:
        """An LSTM adversary (``CtsLSTMPolicy``), which carries a memory through the episode."""
        return "lstm.weight_ih_l0" in self._weights

    @cached_property
    def network(self) -> nn.Module:
        """The adversary's network (float64): the MLP's mean chain, or one LSTM step
        (:class:`~rlgauntlet.victims.pg_release.LSTMStep`)."""
        from rlgauntlet.victims.pg_release import LSTMStep, mean_network

        network = LSTMStep(self._weights) if self.recurrent else mean_network(self._weights)
        for p in network.parameters():
            p.requires_grad_(False)
        return network.eval()

    def _sizes(self) -> tuple[int, int]:
        """(inputs, outputs) of the adversary."""
        net = self.network
        first, last = (net.embedding, net.output) if self.recurrent else (net[0], net[-1])
        return first.in_features, last.out_features

    def fingerprint(self) -> dict:
        from pathlib import Path

        from rlgauntlet.common.hashing import sha256_file

        return {"attacker_sha256": sha256_file(Path(self.params.path))}

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        if victim.description.get("source") != "pg":
            raise UserError("released_attacker replays a policy_gradients release's adversary on that release's "
                            "agents; give a pg:PATH.model agent")
        size = int(victim.observation_space.shape[0])
        inputs, outputs = self._sizes()
        if inputs != size or outputs != size:
            raise UserError(f"released_attacker: {self.params.path} perturbs {inputs} numbers and this agent "
                            f"observes {size}; give the attack file released beside this agent")

    def new_state(self) -> dict | None:
        return {"h": None, "c": None} if self.recurrent else None

    def _direction(self, x: torch.Tensor, memory: Memory | None) -> torch.Tensor:
        """hardtanh of the adversary's mean at ``x`` (an LSTM adversary also steps its memory)."""
        with torch.no_grad():
            x64 = x.to(torch.float64)
            if not self.recurrent:
                return nn.functional.hardtanh(self.network(x64)).to(x.dtype)
            zeros = torch.zeros(self.network.hidden, dtype=torch.float64, device=x.device)
            h = torch.stack([s["h"] if s["h"] is not None else zeros for s in memory.states])
            c = torch.stack([s["c"] if s["c"] is not None else zeros for s in memory.states])
            mean, (h, c) = self.network(x64, (h, c))
            for state, h_row, c_row in zip(memory.states, h.unbind(0), c.unbind(0)):
                state["h"], state["c"] = h_row, c_row
            return nn.functional.hardtanh(mean).to(x.dtype)

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        if self.recurrent:
            raise UserError("released_attacker: this adversary is an LSTM and needs its memory of the episode; "
                            "it runs in the rollout engine only")
        return (x + self.params.eps * self._direction(x, None)).detach()

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.recurrent:
            return super().apply(x, victim, rng, memory, scheduled)
        direction = self._direction(x, memory)  # every step moves the adversary's memory
        perturbed = (x + self.params.eps * direction).detach()
        return torch.where(scheduled.reshape(-1, *([1] * (x.ndim - 1))), perturbed, x), scheduled
