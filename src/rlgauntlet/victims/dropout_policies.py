"""SB3 policies with MC Dropout or MC DropConnect in their networks (the OOD benchmark's agents).

Each is SB3's own policy with ``add_dropout`` applied to the networks it builds; two extra
``policy_kwargs`` choose the dropout: ``dropout`` (probability p) and ``dropout_kind``
(``activations`` for MC Dropout, ``weights`` for MC DropConnect). State dicts keep SB3's
parameter names, so a saved agent loads as data like any SB3 agent
(``victims.sb3_files`` lists these classes beside SB3's).

Example:
    >>> from stable_baselines3 import DQN
    >>> model = DQN(DropoutDQNPolicy, "CartPole-v1", policy_kwargs=dict(dropout=0.1, dropout_kind="weights"))
    >>> type(model.q_net.q_net[0]).__name__
    'DropConnectLinear'
"""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy
from stable_baselines3.dqn.policies import CnnPolicy as DQNCnnPolicy
from stable_baselines3.dqn.policies import DQNPolicy
from stable_baselines3.td3.policies import TD3Policy

from rlgauntlet.victims.uncertainty import add_dropout


class _Dropout:
    """Mixin: stores the two dropout kwargs and saves them with the policy.

    With DropConnect the target networks stay in training mode: the TD targets come from the
    same noisy network the online one is trained as. With SB3's weight-scaled (eval-mode)
    targets a DropConnect DQN's Q-values drifted above their bound (125 where 1/(1−γ) = 100)
    and the agent collapsed to one action at every p we tried (docs/decisions.md).
    """

    def _set_dropout(self, dropout: float, dropout_kind: str) -> None:
        self.dropout, self.dropout_kind = float(dropout), dropout_kind

    def _noisy_targets(self, *targets) -> None:
        if self.dropout_kind == "weights":
            for net in targets:
                net.set_training_mode(True)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "dropout": self.dropout, "dropout_kind": self.dropout_kind}


class _DropoutQNetwork(_Dropout):
    """DQN policies: dropout in the Q-network and its target."""

    def make_q_net(self):
        return add_dropout(super().make_q_net(), self.dropout, self.dropout_kind)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self._noisy_targets(self.q_net_target)


# Each concrete class defines its own __init__: a saved zip names its policy class by the
# qualified name of __init__, which is what the data-only reader looks up.
class DropoutDQNPolicy(_DropoutQNetwork, DQNPolicy):
    """DQN's MLP Q-network (and its target) with dropout."""

    def __init__(self, *args: Any, dropout: float = 0.1, dropout_kind: str = "weights", **kwargs: Any) -> None:
        self._set_dropout(dropout, dropout_kind)
        super().__init__(*args, **kwargs)


class DropoutDQNCnnPolicy(_DropoutQNetwork, DQNCnnPolicy):
    """DQN's Nature-CNN Q-network with dropout."""

    def __init__(self, *args: Any, dropout: float = 0.1, dropout_kind: str = "weights", **kwargs: Any) -> None:
        self._set_dropout(dropout, dropout_kind)
        super().__init__(*args, **kwargs)


class DropoutTD3Policy(_Dropout, TD3Policy):
    """TD3's actor and critics with dropout (the paper does not say where DDPG's went; both)."""

    def __init__(self, *args: Any, dropout: float = 0.1, dropout_kind: str = "weights", **kwargs: Any) -> None:
        self._set_dropout(dropout, dropout_kind)
        super().__init__(*args, **kwargs)

    def make_actor(self, features_extractor=None):
        return add_dropout(super().make_actor(features_extractor), self.dropout, self.dropout_kind)

    def make_critic(self, features_extractor=None):
        return add_dropout(super().make_critic(features_extractor), self.dropout, self.dropout_kind)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        self._noisy_targets(self.actor_target, self.critic_target)


class _DropoutActorCritic(_Dropout):
    """PPO / A2C policies: dropout in the extractors, both MLP heads and (DropConnect) the output layers."""

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        # the optimizer is made in _build; add_dropout keeps the Parameter objects it holds
        for name in ("features_extractor", "pi_features_extractor", "vf_features_extractor", "mlp_extractor"):
            module = getattr(self, name, None)
            if module is not None:
                add_dropout(module, self.dropout, self.dropout_kind)
        if self.dropout_kind == "weights":
            from rlgauntlet.victims.uncertainty import drop_connect

            self.action_net = drop_connect(self.action_net, self.dropout)
            self.value_net = drop_connect(self.value_net, self.dropout)


class DropoutActorCriticPolicy(_DropoutActorCritic, ActorCriticPolicy):
    """PPO / A2C MLP policy with dropout."""

    def __init__(self, *args: Any, dropout: float = 0.1, dropout_kind: str = "weights", **kwargs: Any) -> None:
        self._set_dropout(dropout, dropout_kind)
        super().__init__(*args, **kwargs)


class DropoutActorCriticCnnPolicy(_DropoutActorCritic, ActorCriticCnnPolicy):
    """PPO / A2C Nature-CNN policy with dropout (for a DropConnect Pong agent)."""

    def __init__(self, *args: Any, dropout: float = 0.1, dropout_kind: str = "weights", **kwargs: Any) -> None:
        self._set_dropout(dropout, dropout_kind)
        super().__init__(*args, **kwargs)
