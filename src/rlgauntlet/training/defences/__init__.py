"""The defences: SB3 algorithm subclasses that train agents to hold up under attack.

* :mod:`~rlgauntlet.training.defences.sa_ppo`: SA-PPO (a KL regulariser maximised over the ε-ball);
* :mod:`~rlgauntlet.training.defences.sa_dqn`: SA-DQN (a hinge on IBP margin bounds);
* :mod:`~rlgauntlet.training.defences.radial`: RADIAL-DQN and RADIAL-PPO (worst-case losses from IBP);
* :mod:`~rlgauntlet.training.defences.atla`: ATLA-PPO and PA-ATLA-PPO (agent and adversary in alternation);
* :mod:`~rlgauntlet.training.defences.split_lr`: PPO with a critic learning rate of its own (the
  official PA-ATLA adversary's).

The algorithm registry (:mod:`rlgauntlet.training.algorithms`) names these classes as data; a
preset names the registered algorithm. May import: the trainer kit and the rest of
:mod:`rlgauntlet.training` below it (live, checkpoints, presets, attackers for ATLA's adversary),
and the layers below training.
"""
