"""Turn a zoo agent back into a zip Stable-Baselines3 itself loads.

The zoo ships each agent as what evaluation needs (policy weights and the fields that rebuild
the policy, see ``victims.sb3_files.write_agent_zip``). SB3 users who want to run, fine-tune
or inspect an agent with SB3's own ``load`` get a full zip from :func:`export_sb3`: the
agent's SB3 base algorithm built with its preset's hyperparameters, its policy weights, the
target networks set to copies of the online ones (as SB3 initialises them), and, for agents
trained with observation normalisation, ``OUT.vecnormalize.pkl`` beside it. The optimizer
state is fresh: the zoo does not keep it.

Example:
    >>> from rlgauntlet.training.export import export_sb3   # doctest: +SKIP
    >>> export_sb3("cartpole-ppo", "cartpole-ppo.zip")       # doctest: +SKIP
    >>> from stable_baselines3 import PPO                    # doctest: +SKIP
    >>> model = PPO.load("cartpole-ppo.zip")                 # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from pathlib import Path

from rlgauntlet.errors import UserError


def export_sb3(name: str, out: str | Path, member: int | None = None) -> list[Path]:
    """Write zoo agent ``name`` (member ``member`` of an ensemble) as an SB3 zip at ``out``.

    Returns the files written: the zip, and its VecNormalize statistics when the agent has them.
    Existing files are never overwritten.
    """
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.algorithms import algorithm_class, base_algorithm
    from rlgauntlet.training.recipes import get_preset
    from rlgauntlet.victims.sb3 import VecNormalizeStats
    from rlgauntlet.victims.sb3_files import read_sb3_zip, with_target_networks
    from rlgauntlet.zoo import zoo_entry, zoo_file, zoo_files

    out = Path(out)
    if out.suffix != ".zip":
        raise UserError(f"--out {out}: an SB3 model file ends in .zip; e.g. --out {out.with_suffix('.zip').name}")
    entry = zoo_entry(name)
    if "members" in entry:
        if member is None or not 0 <= member < len(entry["members"]):
            raise UserError(f"{name} is an ensemble of {len(entry['members'])} agents; choose one with "
                            f"--member K (0 to {len(entry['members']) - 1})")
        path = zoo_files(entry)[member]
    elif member is not None:
        raise UserError(f"{name} is a single agent; drop --member")
    else:
        path = zoo_file(entry)
    stats_out = out.with_name(out.stem + ".vecnormalize.pkl")
    targets = [out] + ([stats_out] if "vecnormalize" in entry else [])
    for target in targets:
        if target.exists():
            raise UserError(f"{target} exists; give a new --out (export never overwrites a file)")
        if not target.parent.is_dir():
            raise UserError(f"--out {out}: folder {target.parent} does not exist; create it first")
    preset = get_preset(entry["preset"])
    cls = algorithm_class(base_algorithm(preset.algo))
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in preset.hyperparams.items() if k in accepted and k != "policy"}
    env = make_train_vec_env(preset.env_id, 1, preset.seed)
    try:
        model = cls(preset.hyperparams["policy"], env, seed=preset.seed, device="cpu", verbose=0, **kwargs)
        _, state = read_sb3_zip(path)
        model.policy.load_state_dict(with_target_networks(state, list(model.policy.state_dict())))
        model.num_timesteps = int(entry.get("total_timesteps", 0))
        model.save(out)
        if "vecnormalize" in entry:
            from stable_baselines3.common.vec_env import VecNormalize

            stats = VecNormalizeStats(zoo_file(entry, "vecnormalize"))
            norm = VecNormalize(env, norm_obs=stats.enabled, norm_reward=False, clip_obs=stats.clip,
                                epsilon=stats.epsilon, training=False)
            norm.obs_rms.mean, norm.obs_rms.var, norm.obs_rms.count = stats.mean.copy(), stats.var.copy(), stats.count
            norm.save(str(stats_out))
    finally:
        env.close()
    return targets
