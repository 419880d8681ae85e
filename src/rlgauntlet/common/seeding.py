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


#: the largest env seed an episode may use (Gymnasium seeds are checked against 2³¹ − 1 by some envs)
MAX_SEED = 2**31 - 1


def check_seeds(seeds: Sequence[int], episodes: int = 1, option: str = "--seeds") -> list[int]:
    """A list of seeds as every command takes it: at least one, each once, and each with its
    episode seeds ``seed … seed + episodes − 1`` inside 0 … ``MAX_SEED``. Raises a one-line
    :class:`~rlgauntlet.errors.UserError` whose example is written the way the CLI takes a
    repeated option (``--seeds 0 --seeds 1 --seeds 2``), so the suggested fix is accepted.

    >>> check_seeds([2, 0])
    [2, 0]
    """
    from rlgauntlet.errors import UserError

    seeds = list(seeds)
    if option.endswith(":"):  # a file's key: the example is written as the file takes it
        example = f"{option} [0, 1, 2]"
    else:
        example = f"{option} 0 {option} 1 {option} 2" if option.endswith("s") else f"{option} 0"
    if not seeds:
        raise UserError(f"{option}: give at least one seed, e.g. {example}")
    if len(set(seeds)) != len(seeds):
        raise UserError(f"{option} {' '.join(map(str, seeds))}: give each seed once, e.g. {example}")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise UserError(f"{option} {seed!r}: seeds are whole numbers, e.g. {example}")
        if seed < 0 or seed + episodes - 1 > MAX_SEED:
            which = f"its episode seeds {seed} … {seed + episodes - 1}" if episodes > 1 else "a seed"
            raise UserError(f"{option} {seed}: {which} must lie in 0 … {MAX_SEED}; e.g. {example}")
    return seeds
