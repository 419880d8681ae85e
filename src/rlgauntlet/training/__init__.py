"""Training on top of Stable-Baselines3: the public trainer kit (``kit``), the recipes as data
(``recipes``: the zoo's and the alternating trainings', naming their algorithms), the algorithm registry (``algorithms``), resumable
checkpoints, the defences (SA-PPO, SA-DQN, RADIAL, ATLA / PA-ATLA) and the attackers' trainers
(attack MDPs, PA-AD / SA-RL, Robust Sarsa, dynamics models), and the train job (``zoo_training``).

May import: engine, threats, bounds, victims, envs, zoo, common, errors, version."""
