"""The MinAtar paper's network body (Young & Tian 2019, §4): one 3×3 convolution of 16 filters
(stride 1, no padding) and a ReLU, then 128 ReLU units; SB3's Q (or policy) head follows. A
plain conv/linear chain, so interval bounds (``bounds.ibp``) walk it as they walk the Nature CNN.

Example:
    >>> import gymnasium as gym, numpy as np, torch
    >>> body = MinAtarCNN(gym.spaces.Box(0, 255, (4, 10, 10), np.uint8))
    >>> body(torch.zeros(2, 4, 10, 10)).shape
    torch.Size([2, 128])
"""

from __future__ import annotations

import gymnasium as gym
import torch
import torch.nn as nn
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor


class MinAtarCNN(BaseFeaturesExtractor):
    """(B, C, 10, 10) inputs in [0, 1] → (B, 128) features."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 128) -> None:
        super().__init__(observation_space, features_dim)
        channels, height, width = observation_space.shape
        self.cnn = nn.Sequential(nn.Conv2d(channels, 16, kernel_size=3, stride=1), nn.ReLU(), nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(16 * (height - 2) * (width - 2), features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations))
