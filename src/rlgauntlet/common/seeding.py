"""Seeding: episode ``k`` of an evaluation with seed ``s`` always uses env seed ``s + k``.

Random draws of threats, schedules and sampled actions come from per-episode generators
(one ``torch.Generator`` per episode and stream), so what happens in episode ``k`` does not
depend on how many envs run side by side or which other episodes share the batch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

STREAMS = {"threat": 1, "schedule": 2, "policy": 3, "uncertainty": 4}


def episode_generator(seed: int, episode: int, stream: str) -> torch.Generator:
    """A CPU generator for one episode and one stream (``threat``, ``schedule``, ``policy``,
    ``uncertainty``: the MC masks of an agent scoring its own uncertainty)."""
    entropy = np.random.SeedSequence([seed, episode, STREAMS[stream]]).generate_state(2, dtype=np.uint32)
    g = torch.Generator(device="cpu")
    g.manual_seed(int(entropy[0]) << 32 | int(entropy[1]))
    return g


class BatchRNG:
    """Per-row random draws for a batch whose rows are different episodes.

    Each row draws from its own episode's generator, so row ``i``'s numbers are the same
    whatever else is in the batch. Draws are made on the CPU and moved to ``device``.

    Example:
        >>> rng = BatchRNG([episode_generator(0, k, "threat") for k in range(3)])
        >>> rng.normal((2,)).shape
        torch.Size([3, 2])
    """

    def __init__(self, generators: Sequence[torch.Generator], device: torch.device | str = "cpu") -> None:
        self.generators = list(generators)
        self.device = torch.device(device)

    def __len__(self) -> int:
        return len(self.generators)

    def subset(self, mask: torch.Tensor | np.ndarray) -> "BatchRNG":
        """The generators of the rows where ``mask`` is true."""
        idx = np.flatnonzero(np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask))
        return BatchRNG([self.generators[i] for i in idx], self.device)

    def _stack(self, draw) -> torch.Tensor:
        return torch.stack([draw(g) for g in self.generators]).to(self.device)

    def normal(self, shape: Sequence[int]) -> torch.Tensor:
        """Standard normal draws, shape (B, *shape)."""
        return self._stack(lambda g: torch.randn(tuple(shape), generator=g))

    def uniform(self, shape: Sequence[int], low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """Uniform draws in [low, high), shape (B, *shape)."""
        return self._stack(lambda g: torch.rand(tuple(shape), generator=g)) * (high - low) + low

    def episode_normal(self, shape: Sequence[int], salt: int = 0) -> torch.Tensor:
        """Standard normal draws that are the same at every step of an episode, shape (B, *shape).

        For a change of the world that holds for a whole episode (a miscalibrated sensor, a
        tilted camera): each row draws from a fresh generator keyed by its episode stream.
        """
        def draw(g: torch.Generator) -> torch.Tensor:
            fixed = torch.Generator(device="cpu")
            fixed.manual_seed((g.initial_seed() + 0x9E3779B97F4A7C15 * (salt + 1)) % (1 << 63))
            return torch.randn(tuple(shape), generator=fixed)

        return self._stack(draw)

    def bernoulli(self, p: float) -> torch.Tensor:
        """One boolean per row, true with probability ``p``."""
        return self.uniform(()) < p
