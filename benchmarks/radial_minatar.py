"""RADIAL-RL Table 1 on MinAtar: vanilla DQN, RADIAL-DQN and SA-DQN on Breakout and Space
Invaders at an ε grid in pixel01 units (1/255 and 3/255, the papers' Atari budgets, and larger
ones up to where vanilla collapses): nominal, PGD-30 (step ε/10, RADIAL's evaluation), FGSM,
GWC and ACR; 20 episodes each, mean ± sem, with the median score gap and certified margin
along the clean trajectory (why ACR is what it is). The first ε of the grid where PGD-30
takes each vanilla agent below half its clean return is recorded as ``vanilla_half_eps``.
Writes benchmarks/results/radial_minatar.json (resumes from benchmarks/results/radial_minatar.sqlite).

Run: python benchmarks/radial_minatar.py [--episodes 20] [--games breakout spaceinvaders]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import table1_row, zoo_victim_or_exit

from rlgauntlet import evaluate
from rlgauntlet.experiments.certify import certify
from rlgauntlet.zoo import load_manifest

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "radial_minatar.json"
GAMES = {"breakout": "MinAtar/Breakout-v1", "spaceinvaders": "MinAtar/SpaceInvaders-v1"}
VARIANTS = ("dqn", "radial-dqn", "sa-dqn")
EPS = ["1/255", "3/255", "0.02", "0.05", "0.1"]


def _value(eps: str) -> float:
    num, _, den = eps.partition("/")
    return float(num) / float(den or 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--games", nargs="+", default=list(GAMES), choices=list(GAMES))
    parser.add_argument("--eps", nargs="+", default=EPS, help="ε grid in pixel01 units")
    parser.add_argument("--store", default=str(HERE / "results" / "radial_minatar.sqlite"))
    args = parser.parse_args()
    rows, half = [], {}
    for game in args.games:
        env_id = GAMES[game]
        for variant in VARIANTS:
            name = f"minatar-{game}-{variant}"
            if name not in load_manifest():
                print(f"{name}: not in the zoo (train it with `rlgauntlet train --preset {name}`); skipped")
                continue
            zoo_victim_or_exit(name, "radial_minatar")
            threats = [t for e in args.eps for t in (f"pgd:eps={e},steps=30,step={_value(e) / 10}", f"fgsm:eps={e}")]
            report = evaluate(f"zoo:{name}", env_id, threats, episodes=args.episodes, n_envs=args.episodes,
                              store=args.store, resume=True, impact=False)
            evals = {ev["spec"]: ev for ev in report.evaluations}
            cert = certify(f"zoo:{name}", env_id, eps_grid=",".join(args.eps), episodes=args.episodes,
                           n_envs=args.episodes, store=args.store)
            clean = evals["clean"]
            for e, c in zip(args.eps, cert["rows"]):
                pgd, fgsm = evals[f"pgd:eps={e},steps=30,step={_value(e) / 10}"], evals[f"fgsm:eps={e}"]
                row = {"game": game, "agent": name, "eps": e, **table1_row(clean, pgd, fgsm, c)}
                rows.append(row)
                if variant == "dqn" and game not in half and row["pgd30"][0] < 0.5 * row["nominal"][0]:
                    half[game] = e
                print(f"{name:30s} ε={e:6s} nominal {row['nominal'][0]:6.2f}  PGD-30 {row['pgd30'][0]:6.2f} ± "
                      f"{row['pgd30'][1]:5.2f}  FGSM {row['fgsm'][0]:6.2f}  GWC {row['gwc'][0]:6.2f} ± "
                      f"{row['gwc'][1]:5.2f}  ACR {row['acr']:.1%}  gap {row['score_gap_median']:.3g}  "
                      f"margin {row['certified_margin_median']:.3g}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"episodes": args.episodes, "seed": 0, "eps_space": "pixel01", "eps_grid": args.eps,
                               "vanilla_half_eps": half, "rows": rows}, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
