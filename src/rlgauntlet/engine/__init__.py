"""The rollout engine: every evaluation runs through ``rollout.evaluate_episodes``."""
