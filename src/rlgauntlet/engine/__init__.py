"""The rollout engine: every evaluation runs through ``rollout.evaluate_episodes``.

May import: threats, metrics, victims, common, errors, version.
"""
