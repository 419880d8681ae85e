"""RADIAL-RL Table 1 format on CartPole: vanilla zoo agents against their RADIAL fine-tunes
(cartpole-radial-dqn, cartpole-radial-ppo) at ε ∈ {0.02, 0.05, 0.1} (raw units): nominal,
PGD-30 (step ε/10, as RADIAL's evaluation), FGSM, GWC and ACR; 20 episodes, mean ± sem; with
ACR, the median score gap and certified margin along the clean trajectory (why ACR is what it is).
Writes benchmarks/results/radial_cartpole.json (resumes from benchmarks/results/radial.sqlite).

Run: python benchmarks/radial_cartpole.py [--episodes 20]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import table1_row, zoo_victim_or_exit

from rlgauntlet import evaluate
from rlgauntlet.experiments.certify import certify

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "radial_cartpole.json"
PAIRS = [("cartpole-dqn", "cartpole-radial-dqn"), ("cartpole-ppo", "cartpole-radial-ppo")]
EPS = ["0.02", "0.05", "0.1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--store", default=str(HERE / "results" / "radial.sqlite"))
    args = parser.parse_args()
    rows = []
    from rlgauntlet.zoo import load_manifest

    for pair in PAIRS:
        for name in pair:
            if name not in load_manifest():
                print(f"{name}: not in the zoo (train it with `rlgauntlet train --preset {name}`); skipped")
                continue
            zoo_victim_or_exit(name, "radial_cartpole")
            threats = [t for e in EPS for t in (f"pgd:eps={e},steps=30,step={float(e) / 10}", f"fgsm:eps={e}")]
            report = evaluate(f"zoo:{name}", "CartPole-v1", threats, episodes=args.episodes, n_envs=args.episodes,
                              store=args.store, resume=True, impact=False)
            evals = {ev["spec"]: ev for ev in report.evaluations}
            cert = certify(f"zoo:{name}", "CartPole-v1", eps_grid=",".join(EPS), episodes=args.episodes,
                           n_envs=args.episodes, store=args.store)
            clean = evals["clean"]
            for e, c in zip(EPS, cert["rows"]):
                pgd, fgsm = evals[f"pgd:eps={e},steps=30,step={float(e) / 10}"], evals[f"fgsm:eps={e}"]
                row = {"agent": name, "eps": e, **table1_row(clean, pgd, fgsm, c)}
                rows.append(row)
                print(f"{name:20s} ε={e:5s} nominal {row['nominal'][0]:6.1f}  PGD-30 {row['pgd30'][0]:6.1f} ± "
                      f"{row['pgd30'][1]:5.1f}  FGSM {row['fgsm'][0]:6.1f}  GWC {row['gwc'][0]:6.1f} ± "
                      f"{row['gwc'][1]:5.1f}  ACR {row['acr']:.1%}  gap {row['score_gap_median']:.3g}  "
                      f"margin {row['certified_margin_median']:.3g}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"episodes": args.episodes, "seed": 0, "eps_space": "raw", "rows": rows}, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
