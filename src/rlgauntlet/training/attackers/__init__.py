"""The attackers' trainers: the attack MDPs (SA-MDP and PA-MDP as Gymnasium VecEnvs), PA-AD and
SA-RL director training (``attack_train``), Robust Sarsa's smoothed Q function and the learned
dynamics models of the model-based attacks.

The trained attackers are applied by threats (:mod:`rlgauntlet.threats.learned`,
:mod:`rlgauntlet.threats.model_based`), which never import these trainers. May import: the
trainer kit, presets and checkpoints, and the layers below training.
"""
