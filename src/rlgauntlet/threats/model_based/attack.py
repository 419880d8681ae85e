"""Model-based attacks: ``model_obs`` (observation manipulation) and ``model_action`` (action
manipulation), Weng et al., "Toward Evaluating Robustness of Deep Reinforcement Learning
with Continuous Control", ICLR 2020.

Distance: ℓ∞. ``model_obs``: ‖δ‖∞ ≤ ε in the victim's budget space (its observation
normalisation, as every observation threat); ``model_action``: ‖δ‖∞ ≤ ε in env action units,
the executed action clipped to the action bounds. The attack plans T perturbations through
the victim and a learned dynamics model toward an unsafe target state (see
``planner.plan``), applies the first ``replan`` of them to the real episode, and plans again
from the true state (model-predictive control). The plan is kept per episode.

Example specs:
    ``model_obs:eps=0.3,horizon=5,model=runs/dyn-walker,target=height:0``
    ``model_action:eps=0.5,horizon=20,replan=5,model=runs/dyn-cartpole,target=position[1]:-1|position[2]:0``
"""

from __future__ import annotations

from typing import ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field, model_validator

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.actions import clip_to_action_space
from rlgauntlet.threats.base import Memory, Threat, ThreatParams, clip_to_input, register_threat
from rlgauntlet.threats.model_based.model import load_dynamics
from rlgauntlet.threats.model_based.planner import plan
from rlgauntlet.threats.model_based.target import Target, parse_target
from rlgauntlet.victims.base import Victim


class ModelAttackParams(ThreatParams):
    eps: float = Field(gt=0.0, description="ℓ∞ budget per step")
    model: str = Field(description="dynamics model folder from rlgauntlet dynamics-train")
    target: str | list[str | float] = Field(description="unsafe state, PART:VALUE items separated by |")
    horizon: int = Field(10, ge=1, le=1000, description="T, steps unrolled per plan")
    replan: int = Field(1, ge=1, le=1000, description="n ≤ T, planned steps applied before planning again")
    lr: float | None = Field(None, gt=0.0, description="Adam learning rate (default ε/10)")
    steps: int = Field(30, ge=1, le=10_000, description="Adam iterations per plan")
    init: Literal["zero", "flip"] = Field("zero", description="where δ starts: 0 or −ε·sign (the flip baseline)")

    @model_validator(mode="after")
    def _replan_within_horizon(self):
        if self.replan > self.horizon:
            raise ValueError(f"replan={self.replan} applies more steps than the plan has (horizon={self.horizon})")
        return self


class _ModelAttack(Threat):
    """What both model-based attacks share: the model, the target, the per-episode plan."""

    Params = ModelAttackParams
    file_params = ("model",)
    white_box = True
    mode: ClassVar[str]
    not_recurrent = "its planner runs the agent on imagined future states"

    def __init__(self, params, schedule=None, spec=None) -> None:
        super().__init__(params, schedule, spec)
        self.model, self.manifest = load_dynamics(params.model)
        self.target: Target | None = None

    @property
    def lr(self) -> float:
        return self.params.lr if self.params.lr is not None else self.params.eps / 10

    def fingerprint(self) -> dict:
        return {"model_sha256": self.manifest["model_sha256"]}  # load_dynamics checked the file against it

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        if not isinstance(victim.action_space, gym.spaces.Box):
            raise UserError(f"{self.name} attacks continuous-action agents; this agent's actions are discrete")
        # plan in the victim's precision: float64 for vector inputs keeps plans, like actions,
        # independent of how many rows are planned together (of --n-envs)
        self.model = self.model.to(victim.dtype)
        trained_on = self.manifest.get("victim", {}).get("sha256")
        if trained_on is not None and victim.description.get("sha256") not in (None, trained_on):
            raise UserError(f"model={self.params.model} was trained on another agent (sha256 {trained_on[:12]}…, "
                            f"this one {victim.description['sha256'][:12]}…); train a model for this agent "
                            "with rlgauntlet dynamics-train")

    def check_env(self, env: gym.Env, env_id: str) -> None:
        from rlgauntlet.envs.presets import observation_layout

        if self.manifest["env"] != env_id:
            raise UserError(f"model={self.params.model} was trained on {self.manifest['env']}, not {env_id}; "
                            "train a model for this env with rlgauntlet dynamics-train")
        obs_dim = int(np.prod(env.observation_space.shape))
        if obs_dim != self.manifest["obs_dim"]:
            raise UserError(f"model={self.params.model} predicts {self.manifest['obs_dim']} coordinates but {env_id} "
                            f"observes {obs_dim}")
        self.target = parse_target(self.params.target, observation_layout(env), obs_dim)

    def new_state(self) -> dict:
        return {"plan": None, "used": 0}

    def _next_perturbations(self, victim: Victim, memory: Memory, dim: int, device) -> torch.Tensor:
        """Each row's perturbation for this step (B, dim), planning again where the plan is used up."""
        if self.target is None:
            raise RuntimeError(f"{self.name}: check_env was not called before the attack ran: a bug")
        stale = [i for i, state in enumerate(memory.states)
                 if state["plan"] is None or state["used"] >= self.params.replan]
        if stale:
            s0 = torch.as_tensor(np.stack([np.asarray(memory.observations[i], dtype=np.float64).reshape(-1)
                                           for i in stale]), device=device)
            plans, _ = plan(victim, self.model, s0, self.target, self.mode, self.params.eps, self.params.horizon,
                            self.lr, self.params.steps, dim, self.params.init)
            for j, i in enumerate(stale):
                memory.states[i]["plan"], memory.states[i]["used"] = plans[j], 0
        out = []
        for state in memory.states:
            out.append(state["plan"][state["used"]])
            state["used"] += 1
        return torch.stack(out)


@register_threat
class ModelObservationAttack(_ModelAttack):
    """Model-based observation manipulation (Weng et al. 2020, Eq. 3): a' = π(x + δ), ‖δ‖∞ ≤ ε
    in the victim's budget space; see the module docstring.

    Example spec: ``model_obs:eps=0.3,horizon=5,model=runs/dyn-walker,target=height:0``.
    """

    name = "model_obs"
    family = "model_based"
    mode = "observation"
    budget_params = ("eps",)

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        delta = self._next_perturbations(victim, memory, int(np.prod(x.shape[1:])), x.device)
        perturbed = clip_to_input(x + delta.reshape(x.shape).to(x.dtype), victim)
        return torch.where(scheduled.reshape(-1, *([1] * (x.ndim - 1))), perturbed, x), scheduled


@register_threat
class ModelActionAttack(_ModelAttack):
    """Model-based action manipulation (Weng et al. 2020, Eq. 4): the env receives
    clip(π(x) + δ, low, high), ‖δ‖∞ ≤ ε in env action units; see the module docstring.

    Example spec: ``model_action:eps=0.5,horizon=20,model=runs/dyn-cartpole,target=position[1]:-1``.
    """

    name = "model_action"
    family = "model_based"
    place = "action"
    mode = "action"

    def perturb_action(self, actions: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory) -> torch.Tensor:
        delta = self._next_perturbations(victim, memory, actions.shape[1], actions.device)
        return clip_to_action_space(actions + delta.to(actions.dtype), victim.action_space)
