"""How fast an LSTM director (PA-AD with a memory, ``mujoco`` v5's director for recurrent agents)
trains: sb3-contrib's RecurrentPPO against the same loss computed by our loop (one LSTM call per
minibatch, ``training.defences.sa_recurrent_ppo.whole_sequences``), on the zoo's Hopper agent,
alternating the two so that a busy machine slows both alike.

Writes benchmarks/results/lstm_director_speed.json (agent steps per second of each, per round).

Run: python benchmarks/lstm_director_speed.py [--steps 8192] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "lstm_director_speed.json"


def train(victim, steps: int, trainer: str) -> float:
    """Agent steps per second of one LSTM director trained ``steps`` steps; ``trainer``:
    ``ours`` (what the gauntlet uses) or ``sb3-contrib`` (RecurrentPPO's own train loop)."""
    import rlgauntlet.training.attackers.attack_train as attack_train

    build = attack_train.build_model

    def sb3_contrib(preset, env, device):  # the same preset, on RecurrentPPO's own loop
        hyper = {k: v for k, v in preset.hyperparams.items() if k != "sa_kappa"}
        return build(preset.__class__(**{**vars(preset), "algo": "recurrent_ppo", "hyperparams": hyper}), env, device)

    config = attack_train.attacker_config("paad", "Hopper-v5", 0.075, 0, None, victim, recurrent=True)
    attack_train.build_model = sb3_contrib if trainer == "sb3-contrib" else build
    try:
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            attack_train.learn_attacker(victim, config, steps, folder, log=lambda _: None)
            return steps / (time.perf_counter() - started)
    finally:
        attack_train.build_model = build


def main() -> None:
    import torch
    from _common import zoo_victim_or_exit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    victim = zoo_victim_or_exit("hopper-ppo", "lstm_director_speed")
    rounds = []
    for _ in range(args.rounds):
        row = {trainer: round(train(victim, args.steps, trainer), 1) for trainer in ("sb3-contrib", "ours")}
        rounds.append(row)
        print(row, flush=True)
    report = {"agent": "zoo:hopper-ppo", "env": "Hopper-v5", "director": "paad@lstm, eps 0.075", "steps": args.steps,
              "rounds": rounds, "speedup": round(sum(r["ours"] / r["sb3-contrib"] for r in rounds) / len(rounds), 2)}
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"ours / sb3-contrib: {report['speedup']}×")


if __name__ == "__main__":
    main()
