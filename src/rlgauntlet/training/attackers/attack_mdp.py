"""The attacker's MDPs as ordinary environments: PA-AD's PAMDP and SA-RL's SA-MDP.

The attacker observes what the victim's network sees (the network input ``x``: normalised
for VecNormalize agents, pixels in [0, 1] for Atari, raw otherwise), chooses an action
(a policy direction, a target action, or the perturbation itself; see
:mod:`rlgauntlet.threats.learned.actor`), the actor turns it into ``x̃`` inside the ε-ball,
the victim acts on ``x̃`` (deterministically, as it is evaluated, unless ``victim_samples``:
then it samples from its policy, as the official adversary training runs the frozen agent) and
the real env steps with that action. The attacker's reward is the negated victim reward.

Two forms share one step:

* :class:`PAMDP` and :class:`SAMDP` wrap one Gymnasium env and are Gymnasium envs themselves
  (they pass Gymnasium's env checker and work with any SB3 algorithm);
* :class:`AttackVecEnv` wraps an SB3 ``VecEnv`` of the victim's env and runs the actor and
  the victim once per step for all envs together (what ``attack-train`` uses).

Example:
    >>> from rlgauntlet.experiments.agents import load_for_env
    >>> from rlgauntlet.envs import make_env
    >>> victim, _ = load_for_env("zoo:cartpole-dqn", "CartPole-v1")
    >>> env = PAMDP(make_env("CartPole-v1"), victim, eps=0.1)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, env.action_space.shape
    ((4,), (1,))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnvWrapper

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.errors import UserError
from rlgauntlet.threats.learned.actor import AttackActor, default_variant, director_action_space
from rlgauntlet.victims.base import Victim


def check_victim_samples(victim: Victim) -> None:
    """Raise a :class:`UserError` unless ``victim`` has a policy to sample its actions from."""
    if victim.kind not in ("categorical", "gaussian"):
        raise UserError(f"--victim-samples needs an agent with a stochastic policy; this one's is {victim.kind!r} "
                        "(it acts greedily); train its attacker without --victim-samples")


class AttackCore:
    """What both forms share: the spaces, and one batched step from clean inputs and
    director actions to the victim's actions.

    Args:
        victim: the agent under attack (frozen).
        actor: turns director actions into perturbed inputs.
        sample_obs: one env observation (unbatched), to learn the shape of ``x``.
        victim_samples: the victim samples its action from its policy (a Gaussian's mean plus
            its std times normal noise, a categorical's draw) with each row's generator;
            otherwise it acts deterministically. Either way the change count compares the
            deterministic actions on ``x`` and ``x̃``.
    """

    def __init__(self, victim: Victim, actor: AttackActor, sample_obs: np.ndarray,
                 victim_samples: bool = False) -> None:
        if victim_samples:
            check_victim_samples(victim)
        self.victim, self.actor, self.victim_samples = victim, actor, victim_samples
        x = victim.preprocess(np.asarray(sample_obs)[None])
        self.input_shape = tuple(x.shape[1:])
        low, high = victim.input_bounds or (-np.inf, np.inf)
        self.observation_space = gym.spaces.Box(low, high, self.input_shape, np.float32)
        self.action_space = director_action_space(actor.variant, victim, self.input_shape)
        #: what was applied so far: steps, steps whose victim action changed, largest ℓ∞
        self.steps, self.changed, self.linf_max = 0, 0, 0.0

    def to_obs(self, x: torch.Tensor) -> np.ndarray:
        """The attacker's observation: ``x`` as float32 NumPy, inside the observation box."""
        return x.detach().to(torch.float32).cpu().numpy()

    def victim_actions(self, x: torch.Tensor, director_actions: np.ndarray, rng: BatchRNG,
                       states: list | None = None) -> np.ndarray:
        """The victim's deterministic actions on the actor's ``x̃`` for each row. A recurrent
        victim acts from ``states`` (one per row), which are advanced in place with ``x̃``."""
        acts = torch.as_tensor(np.asarray(director_actions))
        if self.victim.recurrent:
            self.victim.use_state(states)
        with torch.no_grad():  # one clean forward serves the actor and the change count
            clean_out = self.victim.forward(x)
        x_adv = self.actor.perturb(x, self.victim, acts, rng, clean_out=clean_out)
        with torch.no_grad():
            adv_out = self.victim.forward(x_adv)
            chosen = self.victim.actions(adv_out)
            clean = self.victim.actions(clean_out)
            stepped = chosen
            if self.victim_samples:
                noise = rng.uniform(()) if self.victim.is_discrete else rng.normal(chosen.shape[1:])
                stepped = self.victim.actions(adv_out, deterministic=False, noise=noise)
        self.steps += x.shape[0]
        if self.victim.is_discrete:
            self.changed += int((chosen != clean).sum())
        else:
            self.changed += int((chosen - clean).abs().amax(dim=-1).gt(1e-6).sum())
        self.linf_max = max(self.linf_max, float((x_adv - x).abs().amax()) if x.numel() else 0.0)
        if self.victim.recurrent:
            states[:] = self.victim.advance_state(x_adv)
        return stepped.cpu().numpy()

    def initial_states(self, n: int) -> list | None:
        """A recurrent victim's states at the start of ``n`` episodes (None otherwise)."""
        return [self.victim.initial_state() for _ in range(n)] if self.victim.recurrent else None


def _actor(victim: Victim, eps: float, variant: str | None, steps: int, lam: float, loss: str) -> AttackActor:
    return AttackActor(variant or default_variant(victim), eps, steps=steps, lam=lam, loss=loss)


class PAMDP(gym.Env):
    """PA-AD's Policy-Adversary MDP over one env (see the module docstring).

    Args:
        env: the victim's env, with the wrappers the victim expects.
        victim: the agent under attack.
        eps: ℓ∞ budget in the victim's budget space.
        variant: ``stochastic`` / ``deterministic`` (discrete victims), ``continuous`` /
            ``directional`` (continuous victims); default as :func:`default_variant`.
        steps, lam, loss: the actor's settings (FGSM, λ = 1, hinge by default).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, env: gym.Env, victim: Victim, eps: float, variant: str | None = None, steps: int = 1,
                 lam: float = 1.0, loss: str = "hinge", seed: int = 0) -> None:
        self.env = env
        self.core = AttackCore(victim, _actor(victim, eps, variant, steps, lam, loss), env.observation_space.sample())
        self.observation_space, self.action_space = self.core.observation_space, self.core.action_space
        self._rng = BatchRNG([episode_generator(seed, 0, "threat")])
        self._x: torch.Tensor | None = None
        self._states: list | None = None  # a recurrent victim's state in this episode

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self._x = self.core.victim.preprocess(np.asarray(obs)[None])
        self._states = self.core.initial_states(1)
        return self.core.to_obs(self._x)[0], info

    def step(self, action):
        acts = self.core.victim_actions(self._x, np.asarray(action)[None], self._rng, self._states)
        obs, reward, terminated, truncated, info = self.env.step(acts[0])
        self._x = self.core.victim.preprocess(np.asarray(obs)[None])
        return self.core.to_obs(self._x)[0], -float(reward), terminated, truncated, info

    def close(self) -> None:
        self.env.close()


class SAMDP(PAMDP):
    """SA-RL's state-adversary MDP over one env: the action is the perturbation itself,
    δ ∈ [−1, 1]^{dim x}, applied as x̃ = x + ε·δ (flattened for images)."""

    def __init__(self, env: gym.Env, victim: Victim, eps: float, seed: int = 0) -> None:
        super().__init__(env, victim, eps, variant="sarl", seed=seed)


class AttackVecEnv(VecEnvWrapper):
    """The attacker's MDP over an SB3 ``VecEnv`` of the victim's env, batched over its envs.

    ``terminal_observation`` in ``infos`` is converted to the attacker's observation too, so
    SB3 bootstraps truncated episodes from the right value.
    """

    def __init__(self, venv, victim: Victim, actor: AttackActor, seed: int = 0, victim_samples: bool = False) -> None:
        sample = venv.observation_space.sample()
        self.core = AttackCore(victim, actor, sample, victim_samples)
        super().__init__(venv, observation_space=self.core.observation_space, action_space=self.core.action_space)
        self._rng = BatchRNG([episode_generator(seed, i, "threat") for i in range(venv.num_envs)])
        self._x: torch.Tensor | None = None
        self._actions: np.ndarray | None = None
        self._states: list | None = None  # a recurrent victim's state in each env's episode

    def reset(self):
        self._x = self.core.victim.preprocess(self.venv.reset())
        self._states = self.core.initial_states(self.num_envs)
        return self.core.to_obs(self._x)

    def step_async(self, actions: np.ndarray) -> None:
        self.venv.step_async(self.core.victim_actions(self._x, actions, self._rng, self._states))

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        if self._states is not None:  # an env that finished its episode started a new one: a fresh state
            for i in np.flatnonzero(dones):
                self._states[i] = self.core.victim.initial_state()
        for info in infos:
            if "terminal_observation" in info:
                terminal = self.core.victim.preprocess(np.asarray(info["terminal_observation"])[None])
                info["terminal_observation"] = self.core.to_obs(terminal)[0]
        self._x = self.core.victim.preprocess(obs)
        return self.core.to_obs(self._x), -rewards, dones, infos

    def state_dict(self) -> dict[str, Any]:
        """What this layer holds between two steps, as plain data: each row's generator, the
        current network input, a recurrent victim's states and the applied counts (an exact
        resume puts it back with :meth:`load_state_dict`)."""
        core = self.core
        return {"generators": [g.get_state() for g in self._rng.generators], "x": self._x, "states": self._states,
                "applied": (core.steps, core.changed, core.linf_max)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` saved, in an env built with the same settings."""
        if len(state["generators"]) != self.num_envs:
            raise ValueError(f"saved with {len(state['generators'])} envs, this env has {self.num_envs}")
        for generator, saved in zip(self._rng.generators, state["generators"]):
            generator.set_state(saved)
        device = self.core.victim.device
        self._x = None if state["x"] is None else state["x"].to(device)
        self._states = None if state["states"] is None else [_to_device(s, device) for s in state["states"]]
        self.core.steps, self.core.changed, self.core.linf_max = state["applied"]


def _to_device(state: Any, device) -> Any:
    """A recurrent state (a tensor, or tuples and lists of them) moved to ``device``."""
    if isinstance(state, torch.Tensor):
        return state.to(device)
    if isinstance(state, (tuple, list)):
        return type(state)(_to_device(s, device) for s in state)
    return state
