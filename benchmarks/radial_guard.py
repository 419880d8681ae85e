"""RADIAL-PPO's guarded ε ramp against the plain one, on CartPole (minutes on a CPU).

The Pong fine-tune collapsed to a constant policy when its ramp reached ε it could not hold
(docs/reproduction.md); the guard (docs/decisions.md) advances ε only after healthy updates and
goes back after others. This runs the cartpole-radial-ppo recipe (fine-tune of zoo:cartpole-ppo,
100k steps, linear ramp over 2/3) at a training ε large enough to break the plain ramp, with and
without a guard on the training return (``--min-return``), then evaluates each agent clean and
under PGD-10 at the ε its ramp actually reached, 20 episodes. Writes
benchmarks/results/radial_guard.json.

Run: python benchmarks/radial_guard.py [--eps 0.3] [--min-return 400] [--steps 100000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from rlgauntlet import evaluate
from rlgauntlet.training.recipes import PRESETS, register_preset
from rlgauntlet.training.sb3_train import train_preset

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, default=0.3, help="ε_train (raw CartPole units)")
    parser.add_argument("--min-return", type=float, default=400.0, help="the guard's floor on the training return")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--runs", type=Path, default=Path("runs/radial-guard"))
    parser.add_argument("--out", type=Path, default=HERE / "results" / "radial_guard.json")
    args = parser.parse_args()
    base = PRESETS["cartpole-radial-ppo"]
    out = {"benchmark": "radial_guard", "recipe": "cartpole-radial-ppo", "eps_train": args.eps,
           "steps": args.steps, "episodes": args.episodes, "runs": {}}
    for guarded in (False, True):
        name = f"cartpole-radial-ppo-eps{args.eps:g}{'-guarded' if guarded else ''}"
        guard = {"guard_min_return": args.min_return, "guard_episodes": 10} if guarded else {}
        register_preset(dataclasses.replace(base, name=name, total_timesteps=args.steps,
                                            hyperparams={**base.hyperparams, "radial_eps": args.eps, **guard}))
        ckpt = train_preset(name, args.runs / name, stop_at_target=False)
        progress = json.loads((ckpt / "progress.json").read_text())
        reached = progress["schedule"]["eps"]
        specs = [f"pgd:eps={reached:.6g},steps=10", f"pgd:eps={args.eps:g},steps=10"]
        report = evaluate(f"sb3:{ckpt / 'model.zip'}", "CartPole-v1", specs, episodes=args.episodes, n_envs=10,
                          impact=False)
        by_spec = {ev["spec"]: [ev["return_mean"], ev["return_sem"]] for ev in report.evaluations}
        out["runs"][name] = {
            "guard": guard or None, "eps_reached": reached,
            "curve": [{"steps": h["steps"], "recent_return": h["recent_return"], "eps": h.get("schedule", {}).get("eps")}
                      for h in progress["history"]],
            "clean": by_spec["clean"], "pgd10_at_eps_reached": by_spec[specs[0]], "pgd10_at_eps_train": by_spec[specs[1]]}
        print(f"{name}: ε reached {reached:.3g}, clean {by_spec['clean'][0]:.1f}, PGD-10 at it "
              f"{by_spec[specs[0]][0]:.1f}, at {args.eps:g} {by_spec[specs[1]][0]:.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
