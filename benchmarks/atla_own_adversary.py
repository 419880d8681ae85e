"""An alternating-training agent against its own last adversary, clean, and under random noise.

A diagnostic for the robust-agent table: an ATLA / PA-ATLA agent is trained only on observations
its adversary perturbs, so where the adversary is predictable the agent can learn to undo it,
and clean observations then become a shift of their own. This plays the agent (greedy) from a
training run's last checkpoint on episodes SEED … SEED+N−1, clean and under the adversary that
trained beside it (the adversary samples its actions, as in training), with the agent's saved
VecNormalize statistics.

    python benchmarks/atla_own_adversary.py runs/hopper-pa-atla-ppo --preset hopper-pa-atla-ppo
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the training run's folder (holding checkpoint/)")
    parser.add_argument("--preset", required=True)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training import atla
    from rlgauntlet.training.greedy_eval import greedy_returns
    from rlgauntlet.training.sb3_train import _build_model
    from rlgauntlet.training.threat_env import ThreatVecEnv
    from rlgauntlet.victims.sb3 import SB3Victim

    torch.set_num_threads(1)
    preset = atla.get_atla_preset(args.preset)
    recipe = atla.agent_recipe(preset)
    adversary_recipe = atla._adversary_recipe(preset, recipe)
    ckpt = args.run / "checkpoint"
    progress = json.loads((ckpt / "progress.json").read_text())

    def normalised(seed: int):
        env = make_train_vec_env(recipe.env_id, args.episodes, seed)
        return VecNormalize(env, norm_obs=True, norm_reward=False, training=False) if recipe.normalize else env

    from rlgauntlet.training.attack_mdp import AttackVecEnv

    agent_env = normalised(args.seed)
    agent = _build_model(recipe, agent_env, "cpu")
    live = SB3Victim.from_model(agent)
    actor = atla.adversary_actor(preset, live)
    adversary = _build_model(adversary_recipe, AttackVecEnv(make_train_vec_env(recipe.env_id, recipe.n_envs, 1), live,
                                                             actor, seed=1), "cpu")
    atla._restore(ckpt, agent, adversary, progress)
    agent_env.training = False
    stats = agent_env if recipe.normalize else None

    results = {"run": str(args.run), "agent_steps": progress["agent_steps"], "episodes": args.episodes}
    for label, threat in (("clean", None), ("own_adversary", atla.LiveAdversary(adversary, actor))):
        env = normalised(args.seed)
        if stats is not None:
            env.obs_rms = stats.obs_rms
        if threat is not None:
            env = ThreatVecEnv(env, threat, seed=args.seed)
            env.attach(agent)
        got = greedy_returns(agent, env, args.seed)
        results[label] = {"mean": float(np.mean(got)), "sem": float(np.std(got, ddof=1) / np.sqrt(len(got))),
                          "returns": got}
        print(f"{label:14s} {np.mean(got):8.1f} ± {results[label]['sem']:.1f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
