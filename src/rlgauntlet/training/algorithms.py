"""The training algorithms a preset can name: SB3's own, and our subclasses of them.

A subclass of an SB3 algorithm (RADIAL-DQN, PA-ATLA's PPO, ...) is one class and one
:func:`register_algorithm` call; presets then name it like ``ppo``. A registered subclass
keeps SB3's policy classes, so its saved ``.zip`` loads as a victim of its SB3 base
algorithm (:func:`base_algorithm`), which is what the zoo manifest records.

Example:
    >>> from stable_baselines3 import PPO
    >>> class MyPPO(PPO):
    ...     pass
    >>> _ = register_algorithm("my_ppo", MyPPO)
    >>> base_algorithm("my_ppo")
    'ppo'
"""

from __future__ import annotations

from rlgauntlet.errors import UserError

ALGORITHMS: dict[str, type] = {}
#: our own subclasses, named as data ("module:Class") and imported on first use: the registry
#: imports no defence, and no defence imports the registry (no cycle between them)
BUILT_IN: dict[str, str] = {
    "radial_dqn": "rlgauntlet.training.defences.radial:RadialDQN",
    "radial_ppo": "rlgauntlet.training.defences.radial:RadialPPO",
    "sa_dqn": "rlgauntlet.training.defences.sa_dqn:SADQN",
    "sa_ppo": "rlgauntlet.training.defences.sa_ppo:SAPPO",
    "ppo_split_lr": "rlgauntlet.training.defences.split_lr:SplitLRPPO",
    "sa_recurrent_ppo": "rlgauntlet.training.defences.sa_recurrent_ppo:SARecurrentPPO",
    "wocar_ppo": "rlgauntlet.training.defences.wocar:WocaRPPO",
}


def _sb3_classes() -> dict[str, type]:
    """SB3's algorithms, and sb3-contrib's RecurrentPPO (LSTM policies; an on-policy algorithm of
    its own, not a PPO subclass)."""
    import stable_baselines3 as sb3
    from sb3_contrib import RecurrentPPO

    return {"ppo": sb3.PPO, "a2c": sb3.A2C, "dqn": sb3.DQN, "sac": sb3.SAC, "td3": sb3.TD3, "ddpg": sb3.DDPG,
            "recurrent_ppo": RecurrentPPO}


def register_algorithm(name: str, cls: type) -> type:
    """Make ``cls`` (an SB3 algorithm or a subclass of one) trainable by presets as ``name``."""
    if base_of(cls) is None:
        raise ValueError(f"{cls.__name__} is not a subclass of a Stable-Baselines3 algorithm")
    if name in ALGORITHMS and ALGORITHMS[name] is not cls:
        raise ValueError(f"algorithm {name!r} registered twice")
    ALGORITHMS[name] = cls
    return cls


def base_of(cls: type) -> str | None:
    """The SB3 algorithm ``cls`` derives from (``ppo``, ``dqn``, ...), nearest first; DDPG
    before TD3, which it subclasses."""
    bases = _sb3_classes()
    for klass in cls.__mro__:
        for name, base in bases.items():
            if klass is base:
                return name
    return None


def algorithm_class(name: str) -> type:
    """The class registered as ``name``: SB3's own algorithms, ours (:data:`BUILT_IN`) and any
    :func:`register_algorithm` added."""
    import importlib

    key = name.lower()
    if key in BUILT_IN and key not in ALGORITHMS:
        module, _, attr = BUILT_IN[key].partition(":")
        register_algorithm(key, getattr(importlib.import_module(module), attr))
    classes = {**_sb3_classes(), **ALGORITHMS}
    try:
        return classes[key]
    except KeyError:
        names = sorted({*classes, *BUILT_IN})
        raise UserError(f"unknown training algorithm {name!r}; choose one of: {', '.join(names)}") from None


def base_algorithm(name: str) -> str:
    """The SB3 base algorithm of a registered name (``ppo`` for ``ppo``)."""
    return base_of(algorithm_class(name))
