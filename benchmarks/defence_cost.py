"""What a defence costs per agent step on Hopper: plain PPO (hopper-ppo), SA-PPO
(hopper-sa-ppo, SGLD-10 inner loop), ATLA-PPO and PA-ATLA-PPO (hopper-atla-ppo,
hopper-pa-atla-ppo: the agent's iteration with the SA regulariser, then the adversary's of
the same length; hopper-pa-atla-ppo-official: the official config's 2 SGLD steps), each trained from scratch for ``--steps`` agent steps with one torch thread
(the thread policy), on an idle machine and beside one CPU-bound competing process. The
issue's targets: SA-PPO within 2× plain PPO's time per agent step, the ATLA variants within 3×.
Each figure is the median of ``--repeats`` runs, the methods interleaved within each repeat;
a cost is the median of the per-repeat ratios to PPO. Writes benchmarks/results/defence_cost.json.

Run: python benchmarks/defence_cost.py [--steps 8192] [--repeats 1] [--idle-only] [--methods ppo pa_atla ...] [--pair]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from _common import Competitor

from rlgauntlet.training.defences.atla import train_atla
from rlgauntlet.training.sb3_train import train_preset

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "defence_cost.json"
METHODS = {"ppo": "hopper-ppo", "sa_ppo": "hopper-sa-ppo", "atla": "hopper-atla-ppo", "pa_atla": "hopper-pa-atla-ppo",
           "pa_atla_official": "hopper-pa-atla-ppo-official"}
TARGETS = {"sa_ppo": 2.0, "atla": 3.0, "pa_atla": 3.0, "pa_atla_official": 3.0}


def _quiet(*_args) -> None:
    pass


def seconds_per_agent_step(method: str, steps: int) -> float:
    """Wall seconds per agent step of one fresh run of ``steps`` agent steps (set-up included)."""
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        if method.startswith(("atla", "pa_atla")):
            train_atla(METHODS[method], folder, total_agent_steps=steps, log=_quiet, threads=1)
        else:
            train_preset(METHODS[method], folder, total_timesteps=steps, threads=1, stop_at_target=False, log=_quiet)
        return (time.perf_counter() - started) / steps


def measure(steps: int, repeats: int, methods: list[str] = list(METHODS)) -> dict:
    """Rates of each method, the repeats interleaved (PPO, then each method, then PPO again, ...),
    so a drift of the machine's speed moves the ratio's two terms alike: each method's cost is
    the median over repeats of its time over the same repeat's PPO time."""
    order = ["ppo", *(m for m in methods if m != "ppo")]
    runs: dict[str, list[float]] = {method: [] for method in order}
    for _ in range(repeats):
        for method in order:
            runs[method].append(seconds_per_agent_step(method, steps))
    out = {}
    for method in order:
        median = statistics.median(runs[method])
        out[method] = {"seconds_per_agent_step": median, "agent_steps_per_second": 1.0 / median, "runs": runs[method],
                       "cost_vs_ppo": statistics.median(t / base for t, base in zip(runs[method], runs["ppo"]))}
        if method in TARGETS:
            row = out[method]
            row["target"], row["meets_target"] = TARGETS[method], row["cost_vs_ppo"] <= TARGETS[method]
        print(f"  {method:8s} {out[method]['agent_steps_per_second']:7.1f} agent steps/s, "
              f"{out[method]['cost_vs_ppo']:.2f}× PPO", flush=True)
    return out


def measure_pair(steps: int, methods: list[str], alone: dict) -> dict:
    """Two runs of each method at once, in two processes (two trainings on the two cores, as
    ``rlgauntlet train --seeds 0 1 --workers 2`` runs them): each run's rate over the rate alone.
    The busy-machine benchmark's bar is 0.5 (benchmarks/contention.py)."""
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing

    out = {}
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        for method in methods:
            pair = list(pool.map(seconds_per_agent_step, [method, method], [steps, steps]))
            rates = [1.0 / s for s in pair]
            ratio = min(rates) / alone[method]["agent_steps_per_second"]
            out[method] = {"agent_steps_per_second": rates, "slowest_over_alone": ratio, "target": 0.5,
                           "meets_target": ratio >= 0.5}
            print(f"  {method:8s} two at once: {rates[0]:7.1f} and {rates[1]:7.1f} agent steps/s "
                  f"({ratio:.2f} of alone)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8192, help="agent steps per run (2048 per iteration)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--idle-only", action="store_true")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS),
                        help="which to time (ppo is always timed: the others are ratios to it)")
    parser.add_argument("--pair", action="store_true", help="also time two runs of each method at once")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON goes (a subset: another file, so "
                        "the full table is not overwritten)")
    args = parser.parse_args()
    result = {"benchmark": "defence_cost", "env": "Hopper-v5", "agent_steps": args.steps, "repeats": args.repeats,
              "threads": 1, "machine": platform.processor() or platform.machine()}
    print("idle:")
    result["idle"] = measure(args.steps, args.repeats, args.methods)
    if args.pair:
        print("two runs at once, one per core:")
        result["pair"] = measure_pair(args.steps, ["ppo", *(m for m in args.methods if m != "ppo")], result["idle"])
    if not args.idle_only:
        print("beside one competing CPU-bound process:")
        with Competitor():
            result["loaded"] = measure(args.steps, args.repeats, args.methods)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
