"""PPO with separate learning rates for its policy and its value function.

SB3's PPO trains actor and critic with one optimizer at one learning rate. The official
PA-AD / ATLA MuJoCo code trains them apart, and its Hopper adversary takes the policy at 1e-2 and
the value function at 1e-3 (digest of paper 001, §5). :class:`SplitLRPPO` keeps one Adam but
gives it two parameter groups: the policy's (everything but the critic) at ``learning_rate`` and
the critic's (``mlp_extractor.value_net`` and ``value_net``) at ``value_learning_rate``. A
learning-rate schedule scales both alike (each group keeps its ratio to the schedule).

Example:
    >>> model = SplitLRPPO("MlpPolicy", "Pendulum-v1", learning_rate=1e-2, value_learning_rate=1e-3)
    >>> [group["lr"] for group in model.policy.optimizer.param_groups]
    [0.01, 0.001]
"""

from __future__ import annotations

from stable_baselines3 import PPO



class SplitLRPPO(PPO):
    """PPO whose critic learns at ``value_learning_rate`` (see module docstring)."""

    def __init__(self, *args, value_learning_rate: float, **kwargs) -> None:
        if value_learning_rate <= 0:
            raise ValueError("SplitLRPPO needs value_learning_rate > 0")
        self.value_learning_rate = value_learning_rate
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        policy = self.policy
        critic = list(policy.mlp_extractor.value_net.parameters()) + list(policy.value_net.parameters())
        critic_ids = {id(p) for p in critic}
        actor = [p for p in policy.parameters() if id(p) not in critic_ids]
        if policy.share_features_extractor and any(True for _ in policy.features_extractor.parameters()):
            raise ValueError("SplitLRPPO needs a features extractor without weights or one per network "
                             "(share_features_extractor=False): a shared one belongs to neither group")
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
