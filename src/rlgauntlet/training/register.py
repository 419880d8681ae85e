"""Put a trained checkpoint into the zoo: copy its files, measure its clean return over 20
episodes with the rollout engine, and write its manifest entry (sha256, command, seed, and the
digest of the recipe it was trained with: :func:`~rlgauntlet.training.recipes.recipe_digest`)."""

from __future__ import annotations

from pathlib import Path

from rlgauntlet.envs import make_env
from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.training.algorithms import base_algorithm
from rlgauntlet.training.checkpoints import read_selection
from rlgauntlet.training.recipes import get_preset, recipe_digest
from rlgauntlet.victims.sb3 import load_sb3
from rlgauntlet.victims.sb3_files import write_zoo_form
from rlgauntlet.zoo import add_zoo_entry

ZOO_EVAL_EPISODES = 20
ZOO_EVAL_SEED = 0


def _clean_returns(victim, env_id: str, n_envs: int) -> list[float]:
    records = evaluate_episodes(lambda: make_env(env_id), victim, None, range(ZOO_EVAL_EPISODES), ZOO_EVAL_SEED,
                                n_envs=n_envs)
    return [r.episode_return for r in sorted(records, key=lambda r: r.episode)]


def _clean_return_entry(returns: list[float], target: float) -> dict:
    import numpy as np

    return {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "episodes": ZOO_EVAL_EPISODES,
            "seed": ZOO_EVAL_SEED, "deterministic": True, "target": target}


def member_solves(name: str, checkpoint: Path, n_envs: int = 4) -> bool:
    """Whether the agent in ``checkpoint`` reaches preset ``name``'s target over the zoo's 20 episodes."""
    import numpy as np

    preset = get_preset(name)
    candidate = load_sb3(checkpoint / "model.zip", base_algorithm(preset.algo))
    return float(np.mean(_clean_returns(candidate, preset.env_id, n_envs))) >= preset.target_return


def register_zoo_ensemble(name: str, checkpoints: list[Path], n_envs: int = 4, force: bool = False,
                          command: str | None = None, zoo_name: str | None = None,
                          rejected: list[Path] = ()) -> dict:
    """Put the members of ensemble preset ``name`` (from ``train_ensemble``) into the zoo as one
    entry: the ensemble (acting on the members' mean output) must reach the preset's target over
    20 episodes; each member's seed and own clean return are recorded, and so are the seeds
    that were tried and left out (``rejected``: agents below the target)."""
    import json

    import numpy as np

    from rlgauntlet.errors import UserError
    from rlgauntlet.victims.uncertainty import EnsembleVictim

    preset = get_preset(name)
    algo = base_algorithm(preset.algo)
    members, fields = [], []
    for ckpt in checkpoints:
        member = load_sb3(ckpt / "model.zip", algo)
        progress = json.loads((ckpt / "progress.json").read_text())
        returns = _clean_returns(member, preset.env_id, n_envs)
        members.append(member)
        fields.append({"seed": progress["seed"], "total_timesteps": progress.get("num_timesteps"),
                       "clean_return": _clean_return_entry(returns, preset.target_return)})
    returns = _clean_returns(EnsembleVictim(members), preset.env_id, n_envs)
    if float(np.mean(returns)) < preset.target_return and not force:
        raise UserError(f"ensemble {name} scores {np.mean(returns):.1f} over {ZOO_EVAL_EPISODES} episodes, below its "
                        f"target {preset.target_return}; train its members longer before it joins the zoo")
    left_out = []
    for ckpt in rejected:
        progress = json.loads((ckpt / "progress.json").read_text())
        returns_k = _clean_returns(load_sb3(ckpt / "model.zip", algo), preset.env_id, n_envs)
        left_out.append({"seed": progress["seed"], "clean_return": _clean_return_entry(returns_k, preset.target_return)})
    entry = {"env": preset.env_id, "algorithm": algo, "preset": name, "recipe_sha256": recipe_digest(name),
             "rejected_members": left_out,
             "command": command or f"rlgauntlet train --preset {name}", "seed": preset.seed,
             "uncertainty": {"method": "ensemble", "members": len(members)},
             "clean_return": _clean_return_entry(returns, preset.target_return)}
    return add_zoo_entry(zoo_name or name, entry, write_file=write_zoo_form, members=[(ckpt / "model.zip", f) for ckpt, f in zip(checkpoints, fields)])


def register_zoo_agent(name: str, checkpoint: Path, n_envs: int = 4, force: bool = False,
                       zoo_name: str | None = None, command: str | None = None, extra: dict | None = None) -> dict:
    """Copy ``checkpoint`` (from ``train_preset`` of preset ``name``) into the zoo and record it.

    The entry is called ``zoo_name`` (default: the preset's name) and records ``command``
    (default: ``rlgauntlet train --preset NAME``), the seed, and the threat and starting agent
    when training used them, plus the fields of ``extra`` (e.g. how this seed was chosen among
    several). An agent below its preset's target return is not registered (unless ``force``):
    the zoo only holds agents that meet their bar.
    """
    import json

    import numpy as np

    from rlgauntlet.errors import UserError

    preset = get_preset(name)
    vn = checkpoint / "vecnormalize.pkl"
    candidate = load_sb3(checkpoint / "model.zip", base_algorithm(preset.algo), vecnormalize=vn if vn.exists() else None)
    returns = _clean_returns(candidate, preset.env_id, n_envs)
    if float(np.mean(returns)) < preset.target_return and not force:
        raise UserError(
            f"{name} scores {np.mean(returns):.1f} over {ZOO_EVAL_EPISODES} episodes, below its target "
            f"{preset.target_return}; train longer (rlgauntlet train --preset {name} --steps N) before it joins the zoo"
        )
    if zoo_name is not None:
        name = zoo_name
    files = {"file": checkpoint / "model.zip"}
    if (checkpoint / "vecnormalize.pkl").exists():
        files["vecnormalize"] = checkpoint / "vecnormalize.pkl"
    progress = json.loads((checkpoint / "progress.json").read_text())
    entry: dict = {
        "env": preset.env_id,
        "algorithm": base_algorithm(preset.algo),
        "preset": preset.name,  # the recipe's name, also when the entry has a zoo name of its own
        "recipe_sha256": recipe_digest(preset.name),
        "command": command or f"rlgauntlet train --preset {name}",
        "seed": progress.get("seed", preset.seed),
    }
    if preset.algo != entry["algorithm"]:
        entry["trainer"] = preset.algo
    for key in ("threat", "init_from", "adversary"):  # adversary: ATLA / PA-ATLA training
        if progress.get(key):
            entry[key] = progress[key]
    if candidate.uncertainty_method is not None:  # MC Dropout / DropConnect: p and samples
        entry["uncertainty"] = candidate.description["uncertainty"]
    entry["total_timesteps"] = progress.get("num_timesteps")
    selection = read_selection(checkpoint)  # a selecting run's kept checkpoint: which one, by what rule
    if selection is not None:
        entry["selection"] = selection
    entry["clean_return"] = _clean_return_entry(returns, preset.target_return)
    entry.update(extra or {})
    return add_zoo_entry(name, entry, files, write_file=write_zoo_form)
