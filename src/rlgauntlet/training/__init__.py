"""Training on top of Stable-Baselines3: the public trainer kit (``kit``), the presets as data
(``presets``, naming their algorithms), the algorithm registry (``algorithms``), resumable
checkpoints, the defences (SA-PPO, SA-DQN, RADIAL, ATLA / PA-ATLA) and the attackers' trainers
(attack MDPs, PA-AD / SA-RL, Robust Sarsa, dynamics models), and the train job.

May import: engine, threats, bounds, victims, envs, zoo, common, errors, version."""
