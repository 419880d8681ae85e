"""The hand-walked input gradient of MLP policies (victims/mlp_vjp.py) against autograd.

zoo:hopper-ppo's policy (64×64 tanh MLP, 11 → 3), one torch thread: (1) the PA-AD actor's
directional FGSM (what PA-ATLA runs twice per agent step and a PA-AD director's training once)
at batch 1 and 8, through the victim's VJP and through the autograd objective; (2) the gradient
of SA-PPO's R(x, ·) at minibatch size 64 (one SGLD step). Alternated ``--repeats`` times, medians
reported. Writes benchmarks/results/mlp_vjp.json.

Run: python benchmarks/mlp_vjp.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from _common import zoo_victim_or_exit

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.threats.learned.actor import AttackActor
from rlgauntlet.training.defences.sa_ppo import shift_gradient

OUT = Path(__file__).resolve().parent / "results" / "mlp_vjp.json"


def _microseconds(call, n: int) -> float:
    call()  # warm-up
    start = time.perf_counter()
    for _ in range(n):
        call()
    return 1e6 * (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    victim = zoo_victim_or_exit("hopper-ppo", "mlp_vjp.py")
    hand_walked = victim.output_and_vjp
    paths = {"hand_vjp": hand_walked, "autograd": lambda *_: None}
    actor = AttackActor("directional", 0.075)
    g = torch.Generator().manual_seed(0)
    results: dict = {"benchmark": "mlp_vjp", "agent": "zoo:hopper-ppo", "threads": 1, "repeats": args.repeats,
                     "unit": "microseconds per call"}

    def case(name: str, call, n: int) -> None:
        times: dict[str, list[float]] = {path: [] for path in paths}
        for _ in range(args.repeats):
            for path, vjp in paths.items():
                victim.output_and_vjp = vjp
                times[path].append(_microseconds(call, n))
        victim.output_and_vjp = hand_walked
        row = {path: round(statistics.median(v), 1) for path, v in times.items()}
        row["speedup"] = round(row["autograd"] / row["hand_vjp"], 2)
        results[name] = row
        print(f"  {name:24s} hand VJP {row['hand_vjp']:7.1f} µs  autograd {row['autograd']:7.1f} µs  "
              f"{row['speedup']:.2f}×", flush=True)

    for batch in (1, 8):
        x = torch.randn(batch, 11, generator=g)
        direction = torch.rand(batch, 3, generator=g) * 2 - 1
        rng = BatchRNG([episode_generator(0, k, "threat") for k in range(batch)])
        case(f"fgsm_actor_batch_{batch}", lambda: actor.perturb(x, victim, direction, rng), args.calls)
    x = torch.randn(64, 11, generator=g)
    x_adv = x + (torch.rand(x.shape, generator=g) * 2 - 1) * 0.075
    with torch.no_grad():
        clean = victim.forward(x)
    case("sgld_gradient_batch_64", lambda: shift_gradient(victim, clean, x_adv), args.calls // 4)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
