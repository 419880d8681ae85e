"""Training under a threat: an observation threat applied to a training ``VecEnv``.

The threat acts at the network-input level, after ``VecNormalize`` and the frame stack, so an
ε means in training what it means in evaluation: pixels in [0, 1] for images, normalised
units for VecNormalize agents, raw units otherwise. White-box threats differentiate the
policy being trained (through :meth:`SB3Victim.from_model`, which leaves it untouched).
Episodes are numbered in the order they start; episode j draws its noise and schedule from
its own streams (seed, j), and threats with memory get a fresh state per episode.

Image observations go back to the learner as float32 pixel values (x'·255); an on-policy
buffer keeps them exactly, a uint8 replay buffer rounds them to whole pixel levels. The
``terminal_observation`` of a finished episode is passed on clean. A threat with an
``episode_ended(state, episode_return)`` method hears each finished episode's state and full
return (the Monitor's, before any reward normalisation): a training pool that draws its members
by how the agent does against them (``training.defences.atla.AdversaryPool``).

Example:
    >>> env = ThreatVecEnv(make_train_vec_env("CartPole-v1", 4, 0), parse_threat("uniform_noise:eps=0.1"), seed=0)  # doctest: +SKIP
    >>> model = PPO("MlpPolicy", env); env.attach(model); model.learn(10_000)   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnvWrapper

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Memory, Threat


class ThreatVecEnv(VecEnvWrapper):
    """Apply ``threat`` to every observation the learner receives (see module docstring)."""

    def __init__(self, venv, threat: Threat, seed: int) -> None:
        if threat.place != "observation":
            raise UserError(f"training under a threat takes observation threats; {threat.spec} acts on the {threat.place}")
        super().__init__(venv)
        self.threat, self.threat_seed = threat, seed
        self.victim = None
        self.next_episode = 0
        self.episodes = [0] * self.num_envs
        self.states: list = [None] * self.num_envs
        self.steps = [0] * self.num_envs
        self.generators: list[dict] = [{} for _ in range(self.num_envs)]
        #: what was applied, for the training log: perturbed steps, all steps, largest ℓ∞
        self.perturbed_steps, self.total_steps, self.linf_max = 0, 0, 0.0

    def attach(self, model) -> None:
        """Use the learner's live policy as the victim (budget space, input range, gradients)."""
        from rlgauntlet.victims.sb3 import SB3Victim

        self.victim = SB3Victim.from_model(model)
        self.threat.check_victim(self.victim)

    def _start(self, i: int) -> None:
        self.episodes[i], self.next_episode = self.next_episode, self.next_episode + 1
        self.states[i], self.steps[i] = self.threat.new_state(), 0
        self.generators[i] = {s: episode_generator(self.threat_seed, self.episodes[i], s) for s in ("schedule", "threat")}

    def reset(self):
        obs = self.venv.reset()
        for i in range(self.num_envs):
            self._start(i)
        return self._perturb(obs)

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        ended = getattr(self.threat, "episode_ended", None)  # a threat that learns from its episodes' returns
        for i in np.flatnonzero(dones):
            if ended is not None and "episode" in infos[i]:  # the Monitor's full, unnormalised return
                ended(self.states[i], float(infos[i]["episode"]["r"]))
            self._start(int(i))  # SB3 envs reset themselves: obs[i] is the new episode's first
        return self._perturb(obs), rewards, dones, infos

    def state_dict(self) -> dict:
        """What this layer holds between two steps, as plain data (an exact resume puts it back with
        :meth:`load_state_dict`): each env's episode number, step, threat state and generators, and
        the applied counts. A threat that learns from its episodes' returns holds state of its own,
        which is saved where the threat gives it as data (``learned_state`` and
        ``load_learned_state``); a run whose threat learns and does not is not resumed exactly
        (training.run_state)."""
        from rlgauntlet.training.run_state import NotResumable

        learned = None
        if getattr(self.threat, "episode_ended", None) is not None:
            if getattr(self.threat, "learned_state", None) is None:
                raise NotResumable(f"the threat {self.threat.spec} learns from its episodes, state a checkpoint "
                                   "does not save")
            learned = self.threat.learned_state()
        return {"learned": learned, "next_episode": self.next_episode, "episodes": list(self.episodes),
                "steps": list(self.steps),
                "states": list(self.states), "applied": (self.perturbed_steps, self.total_steps, self.linf_max),
                "generators": [{name: g.get_state() for name, g in streams.items()} for streams in self.generators]}

    def load_state_dict(self, state: dict) -> None:
        """Put back what :meth:`state_dict` saved, in a layer built with the same threat and seed."""
        if len(state["episodes"]) != self.num_envs:
            raise ValueError(f"saved with {len(state['episodes'])} envs, this env has {self.num_envs}")
        self.next_episode, self.episodes, self.steps = state["next_episode"], list(state["episodes"]), list(state["steps"])
        self.states = list(state["states"])
        self.perturbed_steps, self.total_steps, self.linf_max = state["applied"]
        if state.get("learned") is not None:
            self.threat.load_learned_state(state["learned"])
        self.generators = []
        for episode, saved in zip(self.episodes, state["generators"]):
            streams = {name: episode_generator(self.threat_seed, episode, name) for name in saved}
            for name, generator in streams.items():
                generator.set_state(saved[name])
            self.generators.append(streams)

    def _to_input(self, obs: np.ndarray) -> torch.Tensor:
        if self.victim.is_image:  # pixels to [0, 1], channel-first: the victim's own preprocessing
            return self.victim.preprocess(obs)
        # vectors arrive already normalised (this wrapper sits after VecNormalize)
        return torch.as_tensor(obs, dtype=self.victim.dtype, device=self.victim.device)

    def _from_input(self, x: torch.Tensor, like: np.ndarray) -> np.ndarray:
        if self.victim.is_image:
            if x.shape[1:] != like.shape[1:]:
                x = x.permute(0, 2, 3, 1)
            return (x * 255.0).cpu().numpy().astype(np.float32)
        return x.cpu().numpy().astype(like.dtype if like.dtype.kind == "f" else np.float32)

    def _perturb(self, obs: np.ndarray) -> np.ndarray:
        if self.victim is None:
            raise RuntimeError("ThreatVecEnv.attach(model) must be called before training")
        x = self._to_input(obs)
        stream = lambda s: BatchRNG([g[s] for g in self.generators], x.device)  # noqa: E731
        scheduled = self.threat.schedule.mask(stream("schedule"))
        memory = Memory(self.states, torch.tensor(self.steps, device=x.device), [], [], list(self.episodes))
        x_in, acted = self.threat.apply(x, self.victim, stream("threat"), memory, scheduled)
        if not torch.isfinite(x_in).all():
            raise RuntimeError(f"threat {self.threat.spec!r} returned a non-finite input: a bug")
        self.steps = [t + 1 for t in self.steps]
        self.total_steps += len(self.steps)
        self.perturbed_steps += int(acted.sum())
        if acted.any():
            delta = (x_in[acted] - x[acted]).reshape(int(acted.sum()), -1)
            self.linf_max = max(self.linf_max, float(delta.abs().max()))
        return self._from_input(x_in.detach(), obs)
