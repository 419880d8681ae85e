"""Put a trained checkpoint into the zoo: copy its files, measure its clean return over 20
episodes with the rollout engine, and write its manifest entry (sha256, command, seed)."""

from __future__ import annotations

import shutil
from pathlib import Path

from rlgauntlet.envs import make_env
from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.training.presets import get_preset
from rlgauntlet.victims.sb3 import load_sb3, sha256_file
from rlgauntlet.zoo import load_manifest, write_manifest, zoo_dir

ZOO_EVAL_EPISODES = 20
ZOO_EVAL_SEED = 0


def register_zoo_agent(name: str, checkpoint: Path, n_envs: int = 4, force: bool = False) -> dict:
    """Copy ``checkpoint`` (from ``train_preset``) into ``zoo/`` as ``name`` and record it.

    An agent below its preset's target return is not registered (unless ``force``): the
    zoo only holds agents that meet their bar.
    """
    import json

    import numpy as np

    from rlgauntlet.errors import UserError

    preset = get_preset(name)
    vn = checkpoint / "vecnormalize.pkl"
    candidate = load_sb3(checkpoint / "model.zip", preset.algo, vecnormalize=vn if vn.exists() else None)
    records = evaluate_episodes(
        lambda: make_env(preset.env_id), candidate, None, range(ZOO_EVAL_EPISODES), ZOO_EVAL_SEED, n_envs=n_envs
    )
    returns = [r.episode_return for r in sorted(records, key=lambda r: r.episode)]
    if float(np.mean(returns)) < preset.target_return and not force:
        raise UserError(
            f"{name} scores {np.mean(returns):.1f} over {ZOO_EVAL_EPISODES} episodes, below its target "
            f"{preset.target_return}; train longer (rlgauntlet train --preset {name} --steps N) before it joins the zoo"
        )
    directory = zoo_dir()
    directory.mkdir(parents=True, exist_ok=True)
    model_file = directory / f"{name}.zip"
    shutil.copyfile(checkpoint / "model.zip", model_file)
    entry: dict = {
        "env": preset.env_id,
        "algorithm": preset.algo,
        "preset": name,
        "file": model_file.name,
        "sha256": sha256_file(model_file),
        "command": f"rlgauntlet train --preset {name}",
        "seed": preset.seed,
    }
    vn_path = None
    if (checkpoint / "vecnormalize.pkl").exists():
        vn_path = directory / f"{name}.vecnormalize.pkl"
        shutil.copyfile(checkpoint / "vecnormalize.pkl", vn_path)
        entry["vecnormalize"] = {"file": vn_path.name, "sha256": sha256_file(vn_path)}
    progress = json.loads((checkpoint / "progress.json").read_text())
    entry["total_timesteps"] = progress.get("num_timesteps")
    entry["clean_return"] = {
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "episodes": ZOO_EVAL_EPISODES,
        "seed": ZOO_EVAL_SEED,
        "deterministic": True,
        "target": preset.target_return,
    }
    manifest = load_manifest()
    manifest[name] = entry
    write_manifest(manifest)
    return entry
