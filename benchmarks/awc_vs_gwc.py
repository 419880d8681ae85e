"""GWC against AWC where the depth-first search finishes (RADIAL-RL's Figure 2 check), on CartPole
with short horizons: per zoo agent and ε, episodes capped at H steps, the Greedy Worst-Case
Reward, the Absolute Worst-Case Reward by depth-first search over every feasible action
sequence (node budget = env steps searched), how many searches finished and in how many of
those GWC equals AWC. AWC ≤ GWC always (GWC's trajectory is one of those searched); the paper
found them equal wherever its search finished.

Writes benchmarks/results/awc_vs_gwc.json after every case; a re-run skips the cases there.

Run: python benchmarks/awc_vs_gwc.py [--episodes 10] [--max-nodes 20000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _common import zoo_victim_or_exit

from rlgauntlet.experiments.certify import certify

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "awc_vs_gwc.json"
#: (agent, ε in raw CartPole units, horizon H): H short enough for the search to finish where
#: both actions are feasible at most steps (the vanilla DQN: 2^H sequences), longer where few are
CASES = [
    ("cartpole-dqn", "0.02", 10),
    ("cartpole-dqn", "0.1", 10),
    ("cartpole-ppo", "0.1", 20),
    ("cartpole-radial-ppo", "0.02", 50),
    ("cartpole-radial-ppo", "0.05", 50),
    ("cartpole-radial-ppo", "0.1", 50),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--max-nodes", type=int, default=20_000, help="env steps one AWC search may take")
    args = parser.parse_args()
    stored = json.loads(OUT.read_text()) if OUT.exists() else {}
    if stored.get("episodes") != args.episodes or stored.get("max_nodes") != args.max_nodes:
        stored = {"episodes": args.episodes, "max_nodes": args.max_nodes, "seed": 0, "eps_space": "raw", "rows": []}
    done = {(r["agent"], r["eps"], r["horizon"]) for r in stored["rows"]}
    for agent, eps, horizon in CASES:
        if (agent, eps, horizon) in done:
            continue
        zoo_victim_or_exit(agent, "awc_vs_gwc")
        started = time.perf_counter()
        result = certify(f"zoo:{agent}", "CartPole-v1", eps=eps, episodes=args.episodes, n_envs=1,
                         awc_max_nodes=args.max_nodes, awc_horizon=horizon)
        row = result["rows"][0]
        gwc, awc, finished = row["gwc"]["returns"], row["awc"]["returns"], row["awc"]["finished"]
        equal = sum(f and a == g for g, a, f in zip(gwc, awc, finished))
        stored["rows"].append({
            "agent": agent, "eps": eps, "horizon": horizon, "acr": row["acr"], "gwc": gwc, "awc": awc,
            "nodes": row["awc"]["nodes"], "finished": sum(finished), "gwc_equals_awc_where_finished": equal,
            "awc_below_gwc": sum(a is not None and a < g for g, a in zip(gwc, awc)),
            "seconds": round(time.perf_counter() - started, 1)})
        OUT.write_text(json.dumps(stored, indent=1) + "\n")
        print(f"{agent:20s} ε={eps:5s} H={horizon:3d}  GWC {sum(gwc) / len(gwc):5.1f}  finished {sum(finished)}/"
              f"{len(gwc)}  GWC = AWC in {equal} of them  ACR {row['acr']:.1%}", flush=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
