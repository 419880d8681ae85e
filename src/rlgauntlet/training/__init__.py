"""Training of reference agents (the zoo) on top of Stable-Baselines3."""
