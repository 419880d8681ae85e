"""Learned attackers on the CartPole zoo agents: PA-AD and SA-RL against every heuristic.

For cartpole-dqn and cartpole-ppo at ε ∈ {0.1, 0.05} (raw units) it trains a PA-AD director
(stochastic variant, FGSM actor, λ = 1) and an SA-RL attacker with the same PPO settings,
steps and seed, then evaluates the agent clean and under Random, FGSM, PGD-10 MinBest,
MinBest+Momentum, MinQ (DQN), MaxDiff, SA-RL and PA-AD on the same 20 episodes (seeds 0–19).
Writes benchmarks/results/learned_cartpole.json (mean ± std as the paper prints, training
wall time and learning curve of each attacker).

Run: python benchmarks/learned_cartpole.py [--steps 50000] [--episodes 20] [--runs runs/attackers]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rlgauntlet import evaluate
from rlgauntlet.experiments.attacker_job import train_attacker

AGENTS = ("cartpole-dqn", "cartpole-ppo")
BUDGETS = (0.1, 0.05)


def heuristics(agent: str, eps: float) -> list[str]:
    specs = [f"random:eps={eps}", f"fgsm:eps={eps}", f"pgd:eps={eps},objective=minbest", f"momentum:eps={eps}"]
    if agent.endswith("dqn"):
        specs.append(f"pgd:eps={eps},objective=minq")
    return specs + [f"pgd:eps={eps},objective=maxdiff"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=Path, default=Path("runs/attackers"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/learned_cartpole.json"))
    args = parser.parse_args()
    rows = []
    for agent in AGENTS:
        for eps in BUDGETS:
            attackers = {}
            for method in ("paad", "sarl"):
                run_dir = args.runs / f"{method}-{agent}-eps{eps}-seed{args.seed}"
                manifest = train_attacker(f"zoo:{agent}", "CartPole-v1", method, eps, args.steps, run_dir,
                                          seed=args.seed, eval_episodes=args.episodes, log=print)
                attackers[method] = {"run_dir": str(run_dir), "train_seconds": manifest["train_seconds"],
                                     "variant": manifest["variant"], "learning_curve": manifest["learning_curve"]}
            specs = heuristics(agent, eps) + [f"sarl:attacker={attackers['sarl']['run_dir']},eps={eps}",
                                              f"paad:attacker={attackers['paad']['run_dir']},eps={eps}"]
            started = time.perf_counter()
            report = evaluate(f"zoo:{agent}", "CartPole-v1", specs, episodes=args.episodes, seed=args.seed,
                              n_envs=min(20, args.episodes), impact=False)
            row = {"agent": agent, "eps": eps, "budget_space": "raw", "episodes": args.episodes,
                   "attacker_steps": args.steps, "seed": args.seed, "attackers": attackers,
                   "eval_seconds": round(time.perf_counter() - started, 1), "results": {}}
            for ev in report.evaluations:
                row["results"][ev["spec"].split(",attacker=")[0] if ev["spec"] != "clean" else "clean"] = {
                    "spec": ev["spec"], "mean": ev["return_mean"], "std": ev["return_std"], "sem": ev["return_sem"],
                    "action_change_rate": ev["action_change_rate"], "linf_max": ev["linf_max"]}
            rows.append(row)
            print(json.dumps({k: {"mean": v["mean"], "std": round(v["std"], 1)} for k, v in row["results"].items()}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "learned_cartpole", "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
