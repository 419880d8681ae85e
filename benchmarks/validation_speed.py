"""What the validated choice costs per checkpoint, its push games one push at a time against side
by side (training.defences.validation.SIDE_BY_SIDE engine slots for all of them). One snapshot
(``--agent FOLDER`` with ``model.zip`` and ``vecnormalize.pkl``) validated as the pool3 recipe
does: 10 clean games, 2 games against each of the 14 Hopper push directions at ε/3, 2ε/3 and ε
(84 push games). "One push at a time" gives the engine 2 slots, so the games run two by two as
the earlier validation's one call per push did. Each figure is the median of ``--repeats`` runs,
the two settings interleaved; the push returns of both settings are the same games and must agree.
Writes benchmarks/results/validation_speed.json.

Run: python benchmarks/validation_speed.py --agent checkpoints/defences/…/snapshots/iter-0250 [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from rlgauntlet.training.defences import validation

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "validation_speed.json"


def one(folder: Path, slots: int) -> tuple[float, dict]:
    validation.SIDE_BY_SIDE = slots
    start = time.perf_counter()
    result = validation.validate_agent(folder, "Hopper-v5", 0.075, clean_episodes=10, push_episodes=2,
                                       eps_fractions=(1 / 3, 2 / 3, 1.0))
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--note", default="", help="the machine's load while it ran, in words")
    args = parser.parse_args()
    times: dict[int, list[float]] = {2: [], 16: []}
    pushes = {}
    for _ in range(args.repeats):
        for slots in times:
            seconds, result = one(args.agent, slots)
            times[slots].append(seconds)
            pushes[slots] = result["push"]
            print(f"{slots} slots: {seconds:.1f} s (worst push {result['push_min']:.1f})", flush=True)
    agree = all(abs(pushes[2][k] - pushes[16][k]) <= 1e-6 * max(1.0, abs(pushes[2][k])) for k in pushes[2])
    out = {"generator": "benchmarks/validation_speed.py", "agent": str(args.agent), "machine": platform.processor(),
           "note": args.note, "push_games": 84, "clean_games": 10, "repeats": args.repeats,
           "seconds_median": {"one push at a time (2 slots)": statistics.median(times[2]),
                              "side by side (16 slots)": statistics.median(times[16])},
           "seconds": {str(k): v for k, v in times.items()}, "speedup": statistics.median(times[2]) / statistics.median(times[16]),
           "push_returns_agree": agree}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["seconds_median"]), f"speedup {out['speedup']:.2f}", "agree" if agree else "DISAGREE")


if __name__ == "__main__":
    main()
