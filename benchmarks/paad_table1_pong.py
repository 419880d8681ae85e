"""PA-AD Table 1, Pong row, re-run on the zoo Pong agent (PPO, categorical like the paper's
A2C victim, so ε = 0.0005 on [0, 1] pixels; ``--eps 0.0002`` gives the DQN budget).

Attacks as in the paper's comparison: Random, MinBest (FGSM), MinBest+Momentum (10 steps,
μ = 0.5), MaxDiff (10 noisy steps); MinQ needs a DQN victim and is N/A here, as in the
paper's A2C rows. The paper's victim acted stochastically; ``--stochastic`` does the same.
Writes benchmarks/results/paad_table1_pong.json.

Run: python benchmarks/paad_table1_pong.py [--episodes 20] [--eps 0.0005] [--stochastic]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import zoo_victim_or_exit

from rlgauntlet.envs import make_env
from rlgauntlet.experiments.runs import run_evaluation
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.threats import parse_threat

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "paad_table1_pong.json"
#: the paper's A2C Pong row (mean ± std over 1000 episodes) at ε = 0.0005
PAPER_A2C_PONG = {"clean": "20±1", "random": "20±1", "fgsm": "−4±8", "momentum": "−11±7", "minq": "N/A",
                  "maxdiff": "18±3", "pa-ad": "−13±6"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--eps", default="0.0005")
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--stochastic", action="store_true")
    parser.add_argument("--store", default=str(HERE / "results" / "paad.sqlite"))
    args = parser.parse_args()
    victim = zoo_victim_or_exit("pong-ppo", "paad_table1_pong")
    store = ResultsStore(args.store)
    specs = {"clean": None, "random": f"random:eps={args.eps}", "fgsm": f"fgsm:eps={args.eps}",
             "momentum": f"momentum:eps={args.eps}", "maxdiff": f"maxdiff:eps={args.eps}"}
    rows = {}
    for name, spec in specs.items():
        s = run_evaluation(store, lambda: make_env("PongNoFrameskip-v4"), {"id": "PongNoFrameskip-v4", "preset": "atari"},
                           victim, parse_threat(spec) if spec else None, args.episodes, 0, n_envs=args.n_envs,
                           deterministic=not args.stochastic, resume=True)
        rows[name] = {"spec": spec or "clean", "return_mean": s["return_mean"], "return_std": s["return_std"],
                      "action_change_rate": s["action_change_rate"], "paper_a2c": PAPER_A2C_PONG[name]}
        print(f"{name:9s} {s['return_mean']:6.1f} ± {s['return_std']:4.1f}   paper (A2C) {PAPER_A2C_PONG[name]}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"eps": args.eps, "episodes": args.episodes, "stochastic": args.stochastic,
                               "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
