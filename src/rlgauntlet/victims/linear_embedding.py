"""A linear embedding of the state, no activation: the first layer of the policy_gradients
releases' LSTM policies (``CtsLSTMPolicy``: ``embedding_layer``, then the LSTM, then one linear
layer to the action mean), as an SB3 features extractor so that a RecurrentPPO agent can have the
released network's shape (``hopper-lstm-ppo-release-net``).

Example:
    >>> import gymnasium as gym, numpy as np, torch
    >>> body = LinearEmbedding(gym.spaces.Box(-np.inf, np.inf, (11,), np.float32), features_dim=64)
    >>> body(torch.zeros(2, 11)).shape
    torch.Size([2, 64])
"""

from __future__ import annotations

import gymnasium as gym
import torch
import torch.nn as nn
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor


class LinearEmbedding(BaseFeaturesExtractor):
    """(B, obs_dim) vector observations → (B, features_dim): W·x + b."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 64) -> None:
        super().__init__(observation_space, features_dim)
        self.linear = nn.Linear(int(observation_space.shape[0]), features_dim)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(observations.flatten(1))
