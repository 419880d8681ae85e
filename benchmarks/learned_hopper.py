"""Learned attackers on the Hopper zoo agent at ε = 0.075 (normalized), the PA-AD paper's Table 2 row.

Trains PA-AD (``directional`` variant by default: the relaxed J on the action mean, the form
the official code uses for MuJoCo) and SA-RL with the same PPO settings, steps and seeds, and
Robust Sarsa Q functions (``robust-sarsa:SARSA_EPS:SARSA_REG`` entries, the official scan's
kind of grid), then evaluates the agent clean and under Random, MaxDiff (paper settings and
``restarts=3``), every Robust Sarsa Q, SA-RL and PA-AD on the same episodes. Writes
benchmarks/results/learned_hopper.json with the learning curves (victim's training return
under attack against director steps) and each attacker's training wall time, and a PNG of the curves beside it (the paper's Figure 12).

Run: python benchmarks/learned_hopper.py [--steps 300000] [--seeds 0] [--episodes 20] [--only-train]
         [--methods paad:directional sarl robust-sarsa:0.02:0.1 ...] [--rs-steps 61440]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import train_hopper_attackers

from rlgauntlet import evaluate

EPS = 0.075


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, history in curves.items():
        if label.startswith("robust-sarsa"):
            continue  # a Q function's training is not an attacker's learning curve
        ax.plot([h["steps"] for h in history], [h["recent_return"] for h in history], marker="o", label=label)
    ax.set_xlabel("attacker training steps")
    ax.set_ylabel("victim return in training episodes")
    ax.set_title(f"hopper-ppo, eps={EPS} (normalized)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--methods", nargs="+", default=["paad:directional", "sarl"])
    parser.add_argument("--rs-steps", type=int, default=30 * 2048, help="transitions per Robust Sarsa Q (official: 30 × 2048)")
    parser.add_argument("--runs", type=Path, default=Path("runs/attackers"))
    parser.add_argument("--only-train", action="store_true", help="train (or resume) and stop before the table")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/learned_hopper.json"))
    args = parser.parse_args()
    attackers = {}
    for seed in args.seeds:
        attackers.update(train_hopper_attackers("zoo:hopper-ppo", args.methods, args.steps, args.rs_steps, args.runs,
                                                args.episodes, seed=seed, eps=EPS))
    curves = {label: a.pop("learning_curve") for label, a in attackers.items()}
    out = {"benchmark": "learned_hopper", "eps": EPS, "budget_space": "normalized", "steps": args.steps,
           "attackers": attackers, "learning_curves": curves}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot(curves, args.out.with_suffix(".png"))
    if not args.only_train:
        specs = [f"random:eps={EPS}", f"maxdiff:eps={EPS}", f"maxdiff:eps={EPS},restarts=3"]
        specs += [a["spec"] for a in attackers.values()]
        report = evaluate("zoo:hopper-ppo", "Hopper-v5", specs, episodes=args.episodes, seed=0,
                          n_envs=min(10, args.episodes), impact=False)
        out["results"] = {ev["spec"]: {"mean": ev["return_mean"], "std": ev["return_std"], "sem": ev["return_sem"],
                                       "linf_max": ev["linf_max"]} for ev in report.evaluations}
        print(json.dumps({k: round(v["mean"], 1) for k, v in out["results"].items()}, indent=1))
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
