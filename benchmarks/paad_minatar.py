"""PA-AD on pixels at MinAtar scale: the paper's Table 1 (vanilla DQN) and Table 7 (robust
DQNs) layout on a MinAtar game, for the zoo's vanilla DQN, RADIAL-DQN and SA-DQN.

Per (agent, ε in pixel01 units) it trains two PA-AD directors against that very agent, the
stochastic variant (director picks a direction on the action simplex, FGSM actor, as the
paper attacks DQN in Table 1) and the deterministic one (director picks a target action, a
30-step PGD actor with cross-entropy, as the paper attacks SA-DQN and RADIAL-DQN), with the
same PPO settings, steps and seed; then it evaluates the agent clean and under Random,
MinBest (FGSM), MinBest+Momentum (10 steps), MinQ (PGD-10 on the Q-values), MaxDiff and both
PA-AD variants on the same episodes (episode k uses seed k). Writes
benchmarks/results/paad_minatar.json (mean ± std as the paper prints, each director's
training time and learning curve).

Run: python benchmarks/paad_minatar.py [--game breakout] [--steps 100000] [--episodes 20] [--cells dqn@1/255 ...]
     [--stochastic-steps 1000000]   (the stochastic director's own budget; a finished one is reused)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import zoo_victim_or_exit

from rlgauntlet import evaluate
from rlgauntlet.experiments.attacker_job import train_attacker
from rlgauntlet.zoo import load_manifest

GAMES = {"breakout": "MinAtar/Breakout-v1", "spaceinvaders": "MinAtar/SpaceInvaders-v1"}
#: (agent variant, ε) pairs: the vanilla agent at the papers' two Atari budgets, the robust
#: ones at the budget they were trained for
CELLS = (("dqn", "1/255"), ("dqn", "3/255"), ("radial-dqn", "3/255"), ("sa-dqn", "3/255"))
DIRECTORS = {"paad-stochastic": dict(variant="stochastic"),
             "paad-deterministic": dict(variant="deterministic", actor_steps=30, loss="ce")}


def heuristics(eps: str) -> dict[str, str]:
    return {"random": f"random:eps={eps}", "minbest": f"fgsm:eps={eps}", "momentum": f"momentum:eps={eps}",
            "minq": f"pgd:eps={eps},objective=minq", "maxdiff": f"pgd:eps={eps},objective=maxdiff"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="breakout", choices=list(GAMES))
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--stochastic-steps", type=int, default=None,
                        help="director steps of the stochastic variant (default: --steps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=Path, default=Path("runs/attackers"))
    parser.add_argument("--store", default="benchmarks/results/paad_minatar.sqlite")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/paad_minatar.json"))
    parser.add_argument("--cells", nargs="+", default=[f"{v}@{e}" for v, e in CELLS],
                        help="VARIANT@EPS cells to run (rows of other cells already in --out are kept)")
    args = parser.parse_args()
    env_id, rows = GAMES[args.game], []
    for variant, eps in (cell.split("@") for cell in args.cells):
        agent = f"minatar-{args.game}-{variant}"
        if agent not in load_manifest():
            print(f"{agent}: not in the zoo (train it with `rlgauntlet train --preset {agent}`); skipped")
            continue
        zoo_victim_or_exit(agent, "paad_minatar")
        num, _, den = eps.partition("/")
        value = float(num) / float(den or 1)
        directors = {}
        for name, options in DIRECTORS.items():
            steps = args.stochastic_steps if name == "paad-stochastic" and args.stochastic_steps else args.steps
            run_dir = args.runs / f"{name}-{agent}-eps{value:.5f}-seed{args.seed}" / f"steps{steps}"
            manifest = train_attacker(f"zoo:{agent}", env_id, "paad", value, steps, run_dir, seed=args.seed,
                                      eval_episodes=0, log=print, **options)
            directors[name] = {"run_dir": str(run_dir), "steps": steps, "train_seconds": manifest["train_seconds"],
                               "learning_curve": manifest["learning_curve"]}
        specs = {**heuristics(eps), **{name: f"paad:attacker={d['run_dir']},eps={eps}" for name, d in directors.items()}}
        started = time.perf_counter()
        report = evaluate(f"zoo:{agent}", env_id, list(specs.values()), episodes=args.episodes, seed=args.seed,
                          n_envs=args.episodes, store=args.store, resume=True, impact=False)
        by_spec = {ev["spec"]: ev for ev in report.evaluations}
        results = {"clean": by_spec["clean"]} | {name: by_spec[spec] for name, spec in specs.items()}
        row = {"agent": agent, "eps": eps, "budget_space": "pixel01", "episodes": args.episodes,
               "director_steps": {name: d["steps"] for name, d in directors.items()}, "seed": args.seed,
               "directors": directors,
               "eval_seconds": round(time.perf_counter() - started, 1),
               "results": {k: {"spec": v["spec"], "mean": v["return_mean"], "std": v["return_std"],
                               "sem": v["return_sem"], "action_change_rate": v["action_change_rate"],
                               "linf_max": v["linf_max"]} for k, v in results.items()}}
        heuristic_best = min(row["results"][k]["mean"] for k in heuristics(eps))
        row["paad_at_or_below_every_heuristic"] = min(row["results"][k]["mean"] for k in DIRECTORS) <= heuristic_best
        rows.append(row)
        print(agent, eps, "  ".join(f"{k} {v['mean']:.2f}±{v['std']:.1f}" for k, v in row["results"].items()),
              flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = {(r["agent"], r["eps"]) for r in rows}
    if args.out.exists():  # keep the rows of cells this run did not redo
        rows = [r for r in json.loads(args.out.read_text())["rows"] if (r["agent"], r["eps"]) not in done] + rows
    args.out.write_text(json.dumps({"benchmark": "paad_minatar", "game": args.game, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
