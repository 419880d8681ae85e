"""The largest dropout probability at which an MC Dropout / MC DropConnect agent still solves
its task (paper 002's "hard part", which it does not report).

For each base recipe (cartpole-dqn, pendulum-td3) and dropout kind (activations = MC Dropout,
weights = MC DropConnect) it trains the recipe with p = 0.1, 0.2, 0.3, 0.5 in turn (ascending;
it stops a kind at the first p whose agent misses the recipe's target; when p = 0.1 already
misses, it goes down through 0.05, 0.02, 0.01 until an agent solves the task), and evaluates each
agent clean and deterministically (the weight-scaled network, every unit kept) on 20
episodes, seeds 0–19. The result is resumable: finished entries of the JSON are kept.
Writes benchmarks/results/ood_dropout_sweep_{cartpole,pendulum}.json (one per --bases run, --out).

Run: python benchmarks/ood_dropout_sweep.py [--bases cartpole-dqn,pendulum-td3] [--runs runs/ood-sweep]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rlgauntlet import evaluate
from rlgauntlet.training.recipes import PRESETS, register_preset
from rlgauntlet.training.recipes.zoo import _ood
from rlgauntlet.training.sb3_train import train_preset

PROBABILITIES = (0.1, 0.2, 0.3, 0.5)
LOWER = (0.05, 0.02, 0.01)
KINDS = ("activations", "weights")


def _train(base: str, kind: str, p: float, target: float, args, results: dict) -> dict:
    name = f"{base}-sweep-{kind}-p{p}"
    if name not in PRESETS:
        register_preset(_ood(base, name, "dropout sweep", dropout=p, dropout_kind=kind))
    start = time.time()
    ckpt = train_preset(name, args.runs / name, log=lambda s: print(s, flush=True))
    report = evaluate(f"sb3:{ckpt / 'model.zip'}", PRESETS[base].env_id, episodes=20, seed=0, n_envs=4, impact=False)
    clean = report.evaluations[0]
    progress = json.loads((ckpt / "progress.json").read_text())
    entry = {"base": base, "kind": kind, "p": p, "return_mean": clean["return_mean"],
             "return_std": clean["return_std"], "target": target, "solves": clean["return_mean"] >= target,
             "steps": progress.get("num_timesteps"), "train_seconds": round(time.time() - start, 1),
             "checkpoint": str(ckpt)}
    results["entries"].append(entry)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(entry, flush=True)
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", default="cartpole-dqn,pendulum-td3")
    parser.add_argument("--runs", type=Path, default=Path("runs/ood-sweep"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ood_dropout_sweep.json"))
    args = parser.parse_args()
    results = json.loads(args.out.read_text()) if args.out.exists() else {"entries": []}
    done = {(e["base"], e["kind"], e["p"]): e for e in results["entries"]}
    for base in args.bases.split(","):
        target = PRESETS[base].target_return
        for kind in KINDS:
            tried = {}
            for p in PROBABILITIES:
                tried[p] = done.get((base, kind, p)) or _train(base, kind, p, target, args, results)
                if not tried[p]["solves"]:
                    break
            if not tried[PROBABILITIES[0]]["solves"]:
                for p in LOWER:
                    if (done.get((base, kind, p)) or _train(base, kind, p, target, args, results))["solves"]:
                        break
    largest = {}
    for e in results["entries"]:
        key = f"{e['base']}/{e['kind']}"
        if e["solves"]:
            largest[key] = max(largest.get(key, 0.0), e["p"])
    results["largest_solving_p"] = largest
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(largest)


if __name__ == "__main__":
    main()
