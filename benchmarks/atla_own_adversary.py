"""An alternating-training agent against its own last adversary, clean, and under random noise.

A diagnostic for the robust-agent table: an ATLA / PA-ATLA agent is trained only on observations
its adversary perturbs, so where the adversary is predictable the agent can learn to undo it,
and clean observations then become a shift of their own. This plays the agent (greedy) from a
training run's last checkpoint on episodes SEED … SEED+N−1, clean and under the adversary that
trained beside it (the adversary samples its actions, as in training), with the agent's saved
VecNormalize statistics.

Under the adversary it also records how far the adversary moves the agent's mean action at
each step (μ(x̃) − μ(x), per action dimension), and then plays a third condition: clean
observations with that shift's average added to every action as a constant bias (clipped to
the action space). If the bias alone recovers the attacked return, what the agent learned to
depend on is a systematic push of its actions, not anything state-dependent in the perturbation.
A fourth condition keeps the actor and draws the adversary's action at random (uniform over its
action space): for PA-ATLA, FGSM towards a random direction.

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
    from stable_baselines3.common.vec_env import VecEnvWrapper, VecNormalize

    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.defences import atla
    from rlgauntlet.training.greedy_eval import greedy_returns
    from rlgauntlet.training.kit import build_model
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

    from rlgauntlet.training.attackers.attack_mdp import AttackVecEnv

    agent_env = normalised(args.seed)
    agent = build_model(recipe, agent_env, "cpu")
    live = SB3Victim.from_model(agent)
    actor = atla.adversary_actor(preset, live)
    adversary = build_model(adversary_recipe, AttackVecEnv(make_train_vec_env(recipe.env_id, recipe.n_envs, 1), live,
                                                             actor, seed=1), "cpu")
    atla._restore(ckpt, agent, adversary, progress)
    agent_env.training = False
    stats = agent_env if recipe.normalize else None

    class RecordingThreatVecEnv(ThreatVecEnv):
        """Keeps each step's network input before and after the perturbation."""

        def _perturb(self, obs):
            out = super()._perturb(obs)
            self.pairs.append((self._to_input(obs), self._to_input(out)))
            return out

    class ActionBias(VecEnvWrapper):
        """Adds a constant bias to every action, clipped to the action space."""

        def __init__(self, venv, bias):
            super().__init__(venv)
            self.bias = bias

        def step_async(self, actions):
            space = self.action_space
            self.venv.step_async(np.clip(actions + self.bias, space.low, space.high))

        def reset(self):
            return self.venv.reset()

        def step_wait(self):
            return self.venv.step_wait()

    class UntrainedAdversary(atla.LiveAdversary):
        """The same actor with the adversary's action drawn uniformly from its action space: for
        PA-ATLA a random direction that FGSM then pushes the agent's action towards, for ATLA a
        random perturbation in the ball. What the learned adversary adds is the difference."""

        def perturb(self, x, victim, rng):
            space = self.adversary.action_space
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
            actions = low + (high - low) * torch.rand((len(x), *space.shape), generator=generator)
            return self.actor.perturb(x, victim, actions, rng)

    generator = torch.Generator().manual_seed(args.seed)
    results = {"run": str(args.run), "agent_steps": progress["agent_steps"], "episodes": args.episodes}
    bias = None
    conditions = [("clean", None), ("own_adversary", atla.LiveAdversary(adversary, actor)), ("clean_plus_bias", None),
                  ("untrained_adversary", UntrainedAdversary(adversary, actor))]
    for label, threat in conditions:
        env = normalised(args.seed)
        if stats is not None:
            env.obs_rms = stats.obs_rms
        if threat is not None:
            env = RecordingThreatVecEnv(env, threat, seed=args.seed)
            env.pairs = []
            env.attach(agent)
        if label == "clean_plus_bias":
            env = ActionBias(env, bias)
        got = greedy_returns(agent, env, args.seed)
        if label == "own_adversary":
            with torch.no_grad():
                clean_x = torch.cat([c for c, _ in env.pairs])
                shift = live.forward(torch.cat([p for _, p in env.pairs])).mean - live.forward(clean_x).mean
            bias = shift.mean(dim=0).numpy()
            results["action_shift"] = {"mean_per_dimension": bias.tolist(),
                                       "mean_abs": float(shift.abs().mean()),
                                       "std_per_dimension": shift.std(dim=0).tolist(), "steps": len(shift)}
            print(f"action shift under the adversary: mean {np.round(bias, 3).tolist()}, "
                  f"mean |shift| {float(shift.abs().mean()):.3f} over {len(shift)} steps")
        results[label] = {"mean": float(np.mean(got)), "sem": float(np.std(got, ddof=1) / np.sqrt(len(got))),
                          "returns": got}
        print(f"{label:14s} {np.mean(got):8.1f} ± {results[label]['sem']:.1f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
