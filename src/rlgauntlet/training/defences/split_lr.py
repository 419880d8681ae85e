"""PPO with separate learning rates for its policy and its value function.

SB3's PPO trains actor and critic with one optimizer at one learning rate. The official
PA-AD / ATLA MuJoCo code trains them apart, and its Hopper adversary takes the policy at 1e-2 and
the value function at 1e-3 (digest of paper 001, §5). :class:`SplitLRPPO` keeps one Adam but
gives it two parameter groups: the policy's (everything but the critic) at ``learning_rate`` and
the critic's (``mlp_extractor.value_net`` and ``value_net``, and a recurrent policy's critic LSTM)
at ``value_learning_rate``. A learning-rate schedule scales both alike (each group keeps its ratio
to the schedule). :class:`SplitLRMixin` gives the same to another on-policy algorithm (the
recurrent SA-PPO of ``training.defences.sa_recurrent_ppo``).

Example:
    >>> model = SplitLRPPO("MlpPolicy", "Pendulum-v1", learning_rate=1e-2, value_learning_rate=1e-3)
    >>> [group["lr"] for group in model.policy.optimizer.param_groups]
    [0.01, 0.001]
"""

from __future__ import annotations

import torch as th
from stable_baselines3 import PPO


def critic_parameters(policy: th.nn.Module) -> list[th.nn.Parameter]:
    """The critic's parameters: ``mlp_extractor.value_net`` and ``value_net``, and a recurrent
    policy's own critic LSTM (``lstm_critic``, sb3-contrib) or its linear stand-in (``critic``)."""
    modules = [policy.mlp_extractor.value_net, policy.value_net]
    modules += [m for m in (getattr(policy, "lstm_critic", None), getattr(policy, "critic", None))
                if isinstance(m, th.nn.Module)]
    return [p for m in modules for p in m.parameters()]


class SplitLRMixin:
    """Two parameter groups in the policy's one optimizer (see module docstring): mix in before
    an SB3 on-policy algorithm and pass ``value_learning_rate``."""

    value_learning_rate: float

    def _split_optimizer(self) -> None:
        policy = self.policy
        critic = critic_parameters(policy)
        critic_ids = {id(p) for p in critic}
        actor = [p for p in policy.parameters() if id(p) not in critic_ids]
        if policy.share_features_extractor and any(True for _ in policy.features_extractor.parameters()):
            raise ValueError(f"{type(self).__name__} needs a features extractor without weights or one per network "
                             "(share_features_extractor=False): a shared one belongs to neither group")
        if getattr(policy, "shared_lstm", False):
            raise ValueError(f"{type(self).__name__} needs the critic's own LSTM (shared_lstm=False): a shared one "
                             "belongs to neither group")
        base = self.lr_schedule(1.0)
        policy.optimizer = policy.optimizer_class(
            [{"params": actor, "lr": base, "lr_ratio": 1.0},
             {"params": critic, "lr": self.value_learning_rate, "lr_ratio": self.value_learning_rate / base}],
            lr=base, **policy.optimizer_kwargs)

    def _update_learning_rate(self, optimizers) -> None:
        # SB3's version sets every group to the schedule's rate; each group keeps its ratio here
        rate = self.lr_schedule(self._current_progress_remaining)
        self.logger.record("train/learning_rate", rate)
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            for group in optimizer.param_groups:
                group["lr"] = rate * group.get("lr_ratio", 1.0)


class SplitLRPPO(SplitLRMixin, PPO):
    """PPO whose critic learns at ``value_learning_rate`` (see module docstring)."""

    def __init__(self, *args, value_learning_rate: float, **kwargs) -> None:
        if value_learning_rate <= 0:
            raise ValueError("SplitLRPPO needs value_learning_rate > 0")
        self.value_learning_rate = value_learning_rate
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        self._split_optimizer()
