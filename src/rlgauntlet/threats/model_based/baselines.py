"""The model-free baselines of Weng et al. (ICLR 2020, Sec. 4 and App. A.2).

Distance: ℓ∞, ε in the victim's budget space (observation threats) or in env action units
(``*_action`` threats), as the model-based attacks they are compared with.

* ``rand_u`` / ``rand_u_action``: best of ``m`` rollouts whose per-step perturbation is drawn
  i.i.d. from Uniform[−ε, ε] per coordinate;
* ``rand_b`` / ``rand_b_action``: the same with each coordinate ±ε with probability ½ (the
  corners of the box);
* ``flip`` / ``flip_action``: one deterministic trajectory, x' = x − ε·sign(x) (the reading
  of the paper's "opposite sign and magnitude ε" that its digest recommends), projected to
  the input (action) bounds.

Best of m: at an episode's first step the threat saves the env (``envs.snapshot``), runs m
whole episodes from that state in the true env, each with its own noise stream, scores each
by its total distance to the target state (``select=loss``, Σ_t d(s_t, target) over the states
after every step, a terminated episode's last state counted up to the time limit, see
``Target.episode_loss``) or by its return (``select=reward``), restores the env and then replays
the best candidate's noise in the real episode. This sees the true env and its reward, which
the model-based attack never does: the paper calls it an unfair advantage of the baselines,
and so do we. Its cost is m episodes of env steps per episode attacked.

Example specs: ``rand_u:eps=0.3,m=1000,target=height:0``, ``flip_action:eps=0.5``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.actions import clip_to_action_space
from rlgauntlet.threats.base import Memory, Threat, ThreatParams, clip_to_input, register_threat
from rlgauntlet.threats.model_based.target import Target, parse_target
from rlgauntlet.victims.base import Victim

#: candidate j of an episode draws its noise from seed ``base * CANDIDATE_STRIDE + j``
CANDIDATE_STRIDE = 1_000_003


class BestOfParams(ThreatParams):
    eps: float = Field(gt=0.0, description="ℓ∞ budget per step")
    m: int = Field(1000, ge=1, le=100_000, description="rollouts tried per episode")
    target: str | list[str | float] | None = Field(None, description="unsafe state (for select=loss)")
    select: Literal["loss", "reward"] | None = Field(None, description="keep the rollout of lowest loss or reward "
                                                                       "(default: loss when a target is given)")


class _BestOfRandom(Threat):
    """Best of ``m`` random-noise rollouts, judged in the true env (see module docstring)."""

    Params = BestOfParams
    corners: ClassVar[bool]
    not_recurrent = "its rollouts from snapshots run the agent on future states"

    def __init__(self, params, schedule=None, spec=None) -> None:
        super().__init__(params, schedule, spec)
        self.target: Target | None = None
        if self.selection == "loss" and params.target is None:
            raise UserError(f"{self.name}: select=loss needs a target, e.g. target=height:0 (or select=reward)")

    @property
    def selection(self) -> str:
        return self.params.select or ("loss" if self.params.target is not None else "reward")

    def check_victim(self, victim: Victim) -> None:
        super().check_victim(victim)
        if not isinstance(victim.action_space, gym.spaces.Box):
            raise UserError(f"{self.name} is a baseline for continuous-action agents; this agent's actions are discrete")

    def check_env(self, env: gym.Env, env_id: str) -> None:
        from rlgauntlet.envs.presets import observation_layout
        from rlgauntlet.envs.snapshot import snapshot

        snapshot(env)  # a UserError now, not mid-run, when the env cannot be saved
        if self.params.target is not None:
            self.target = parse_target(self.params.target, observation_layout(env), int(np.prod(env.observation_space.shape)))

    def new_state(self) -> dict:
        return {"generator": None}

    # -- noise ---------------------------------------------------------------------------------
    def _noise(self, generator: torch.Generator, dim: int) -> torch.Tensor:
        u = torch.rand(dim, generator=generator, dtype=torch.float64)
        if self.corners:
            eps = torch.tensor(self.params.eps, dtype=torch.float64)
            return torch.where(u < 0.5, -eps, eps)
        return (2.0 * u - 1.0) * self.params.eps

    def _candidate(self, base: int, j: int) -> torch.Generator:
        return torch.Generator().manual_seed(base * CANDIDATE_STRIDE + j)

    def _perturbed_action(self, victim: Victim, obs: np.ndarray, noise: torch.Tensor) -> np.ndarray:
        """The action the env receives for one observation under one step of noise."""
        x = victim.preprocess(obs[None])
        if self.place == "observation":
            x = clip_to_input(x + noise.reshape(x.shape).to(x.dtype), victim)
            a = victim.actions(victim.forward(x))
        else:
            a = victim.actions(victim.forward(x)).float().to(x.dtype)
            a = clip_to_action_space(a + noise.reshape(a.shape).to(a.dtype), victim.action_space)
        return a[0].cpu().numpy().astype(np.float32)

    def _dim(self, victim: Victim, obs: np.ndarray) -> int:
        if self.place == "observation":
            return int(np.prod(victim.preprocess(obs[None]).shape[1:]))
        return int(np.prod(victim.action_space.shape))

    @torch.no_grad()
    def search(self, env: gym.Env, obs: np.ndarray, victim: Victim, base: int) -> tuple[int, list[float]]:
        """Run the m candidates from the env's current state; return the best one's index and
        every candidate's score (total loss or return). The env is left as it was found."""
        from rlgauntlet.envs.snapshot import restore, snapshot

        snap = snapshot(env)
        dim = self._dim(victim, obs)
        max_steps = env.spec.max_episode_steps if env.spec is not None else None
        scores = []
        try:
            for j in range(self.params.m):
                restore(env, snap)
                generator, current, losses, total_reward = self._candidate(base, j), obs, [], 0.0
                while True:
                    action = self._perturbed_action(victim, current, self._noise(generator, dim))
                    current, reward, terminated, truncated, info = env.step(action)
                    total_reward += float(reward)
                    if self.selection == "loss":
                        losses.append(float(self.target.distance(torch.as_tensor(np.asarray(current, np.float64))[None])[0]))
                    if truncated or (terminated and info.get("real_done", True)):
                        break
                scores.append(self.target.episode_loss(losses, max_steps) if self.selection == "loss" else total_reward)
        finally:
            restore(env, snap)
        return int(np.argmin(scores)), scores

    def _start_rows(self, victim: Victim, rng: BatchRNG, memory: Memory) -> None:
        """Search for the rows whose episode starts now (their first step)."""
        bases = (rng.uniform(()) * 2**31).long().tolist()  # one draw per row, every step, for stream stability
        for i, state in enumerate(memory.states):
            if state["generator"] is None:
                if int(memory.steps[i]) != 0:
                    raise RuntimeError(f"{self.name}: a row started mid-episode: a bug")
                best, _ = self.search(memory.envs[i], np.asarray(memory.observations[i]), victim, bases[i])
                state["generator"] = self._candidate(bases[i], best)

    def _step_noise(self, memory: Memory, dim: int) -> torch.Tensor:
        return torch.stack([self._noise(state["generator"], dim) for state in memory.states])


class _BestOfObservation(_BestOfRandom):
    budget_params = ("eps",)

    def apply(self, x: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory,
              scheduled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._start_rows(victim, rng, memory)
        noise = self._step_noise(memory, int(np.prod(x.shape[1:]))).to(x.device)
        perturbed = clip_to_input(x + noise.reshape(x.shape).to(x.dtype), victim)
        # every step draws (the search drew on every step too); the schedule only masks
        return torch.where(scheduled.reshape(-1, *([1] * (x.ndim - 1))), perturbed, x), scheduled


class _BestOfAction(_BestOfRandom):
    place = "action"

    def perturb_action(self, actions: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory) -> torch.Tensor:
        self._start_rows(victim, rng, memory)
        noise = self._step_noise(memory, actions.shape[1]).to(actions.device)
        return clip_to_action_space(actions + noise.to(actions.dtype), victim.action_space)


@register_threat
class RandU(_BestOfObservation):
    """rand-U on observations: best of m rollouts with Uniform[−ε, ε] noise (module docstring).

    Example spec: ``rand_u:eps=0.3,m=1000,target=height:0``.
    """

    name = "rand_u"
    family = "model_based"
    corners = False


@register_threat
class RandB(_BestOfObservation):
    """rand-B on observations: best of m rollouts with ±ε noise per coordinate (module docstring).

    Example spec: ``rand_b:eps=0.3,m=1000,target=height:0``.
    """

    name = "rand_b"
    family = "model_based"
    corners = True


@register_threat
class RandUAction(_BestOfAction):
    """rand-U on actions: best of m rollouts with Uniform[−ε, ε] action noise (module docstring).

    Example spec: ``rand_u_action:eps=0.5,m=1000,target=position[1]:-1``.
    """

    name = "rand_u_action"
    family = "model_based"
    corners = False


@register_threat
class RandBAction(_BestOfAction):
    """rand-B on actions: best of m rollouts with ±ε action noise (module docstring).

    Example spec: ``rand_b_action:eps=0.5,m=1000,target=position[1]:-1``.
    """

    name = "rand_b_action"
    family = "model_based"
    corners = True


class FlipParams(ThreatParams):
    eps: float = Field(gt=0.0, description="ℓ∞ budget per step")


@register_threat
class Flip(Threat):
    """flip on observations: x' = clip(x − ε·sign(x)) in the victim's budget space, every step.

    Example spec: ``flip:eps=0.3``.
    """

    name = "flip"
    family = "model_based"
    Params = FlipParams
    budget_params = ("eps",)

    def perturb(self, x: torch.Tensor, victim: Victim, rng: BatchRNG) -> torch.Tensor:
        return clip_to_input(x - self.params.eps * torch.sign(x), victim)


@register_threat
class FlipAction(Threat):
    """flip on actions: a' = clip(a − ε·sign(a), low, high) in env action units, every step.

    Example spec: ``flip_action:eps=0.5``.
    """

    name = "flip_action"
    family = "model_based"
    Params = FlipParams
    place = "action"

    def check_victim(self, victim: Victim) -> None:
        if not isinstance(victim.action_space, gym.spaces.Box):
            raise UserError("flip_action perturbs continuous actions; this agent's actions are discrete")

    def perturb_action(self, actions: torch.Tensor, victim: Victim, rng: BatchRNG, memory: Memory) -> torch.Tensor:
        return clip_to_action_space(actions - self.params.eps * torch.sign(actions), victim.action_space)
