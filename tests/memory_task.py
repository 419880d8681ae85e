"""A task whose optimal observation attack needs a memory of the episode (tests only).

The cue env: the first observation is a cue c = +1 (even reset seed) or -1 (odd), every later one
is 0; an episode has 3 steps, each paying 1 when the action is 1 for c = +1 (0 for c = -1): a
clean return of 3.

The victim remembers the cue: its state h is the input of its first step; it acts on the sign of
that input at the first step and 1 exactly when 0.05·h + x > 0 afterwards. Under an ℓ∞ budget of
0.1 on x the first input stays within c ± 0.1 (sign kept: the first step always pays, and
0.05·|h| ≤ 0.055 < 0.1), so at the two later steps the perturbation δ = -0.1·c flips the action:
the optimal attack takes the return to 1. A director without memory reads the clean input 0 at
both later steps, so its perturbation there is one fixed δ whatever c was: it flips the actions
of one cue and not the other's, and over seeds of both cues in equal number its mean return is at
least 2 (exactly 2 when it pushes hard enough one way, 3 when it never flips), never lower.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rlgauntlet.victims.base import PolicyOutput, Victim

ENV_ID = "CueMemory-v0"
#: the clean return, the lowest mean return a director without memory can reach, the optimal attack's
CLEAN_RETURN, MEMORYLESS_FLOOR, OPTIMAL_ATTACK = 3.0, 2.0, 1.0


class CueEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"]}
    observation_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is None:  # training envs after their first episode: a random cue
            self.cue = float(self.np_random.choice([-1.0, 1.0]))
        else:
            self.cue = 1.0 if seed % 2 == 0 else -1.0
        self.t = 0
        return np.array([self.cue], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        reward = float(int(action) == (1 if self.cue > 0 else 0))
        return np.zeros(1, dtype=np.float32), reward, False, self.t >= 3, {}


def register_cue() -> None:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=CueEnv)


class CueVictim(Victim):
    """The remembering victim of the module docstring (categorical, two actions)."""

    kind = "categorical"
    recurrent = True
    budget_space = "raw"
    device = torch.device("cpu")
    description = {"source": "test", "sha256": "c" * 64}
    observation_space = CueEnv.observation_space
    action_space = CueEnv.action_space

    def __init__(self) -> None:
        self._held: list = []

    def initial_state(self) -> dict:
        return {"h": None}

    def use_state(self, rows: list) -> None:
        self._held = list(rows)

    def advance_state(self, x: torch.Tensor) -> list:
        return [{"h": float(x[i, 0]) if row["h"] is None else row["h"]} for i, row in enumerate(self._held)]

    def preprocess(self, obs) -> torch.Tensor:
        return torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(-1, 1)

    def forward(self, x: torch.Tensor) -> PolicyOutput:
        held = self._held if len(self._held) == x.shape[0] else [self.initial_state()] * x.shape[0]
        h = torch.tensor([[0.0 if row["h"] is None else row["h"]] for row in held], dtype=x.dtype)
        first = torch.tensor([[row["h"] is None] for row in held])
        score = torch.where(first, x, 0.05 * h + x)  # the first step acts on the cue itself
        return PolicyOutput(kind="categorical", logits=torch.cat([-score, score], dim=1))
