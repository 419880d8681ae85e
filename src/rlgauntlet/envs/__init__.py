"""Environment presets (the wrappers an env id implies, for training and for evaluation) and
env snapshots.

May import: errors (and Gymnasium, ale-py, MuJoCo, MinAtar, dm-control).
"""

from rlgauntlet.envs.presets import check_env_id, make_env, make_train_vec_env, resolve_preset
from rlgauntlet.envs.snapshot import Snapshot, restore, snapshot

__all__ = ["check_env_id", "make_env", "make_train_vec_env", "resolve_preset", "Snapshot", "snapshot", "restore"]
