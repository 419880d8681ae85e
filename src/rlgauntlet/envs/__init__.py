"""Environment presets: the wrappers an env id implies, for training and for evaluation."""

from rlgauntlet.envs.presets import make_env, make_train_vec_env, resolve_preset

__all__ = ["make_env", "make_train_vec_env", "resolve_preset"]
