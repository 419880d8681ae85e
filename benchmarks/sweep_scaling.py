"""Sweep throughput against workers: episodes per second with 1 and 2 workers, on the local
executor and on a Ray head (2 CPUs, inside a loopback-only network namespace; skipped, and said
so in the JSON, without Ray or without the rights to make a namespace), idle and with one
competing CPU-bound process (a user's busy machine).

The sweep is CPU-bound and evenly divisible: the CartPole DQN under PGD-10 at ε = 0.05 (it
survives, so every episode is 500 steps), 16 episodes in chunks of 2. Times are the whole
command, worker start-up included (what a user waits for). Scaling efficiency =
throughput(2 workers) / (2 × throughput(1 worker)).

Usage: python benchmarks/sweep_scaling.py [--out benchmarks/results/sweep_scaling.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

CLI = [sys.executable, "-m", "rlgauntlet.cli"]
SWEEP = {"name": "scaling", "agents": [{"agent": "zoo:cartpole-dqn", "envs": ["CartPole-v1"]}],
         "threats": ["pgd:eps=0.05,steps=10"], "episodes": 16, "chunk_episodes": 2, "n_envs": 2, "impact": False}


def busy() -> subprocess.Popen:
    """One competing CPU-bound process."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def timed(command: list[str], runner=None) -> float:
    start = time.perf_counter()
    done = (runner or (lambda c: subprocess.run(c, capture_output=True, text=True)))(command)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def measure(folder: Path, executor: str, workers: int, loaded: bool, ns=None) -> dict:
    store = folder / f"{executor}-{workers}-{'loaded' if loaded else 'idle'}.sqlite"
    command = [*CLI, "sweep", str(folder / "sweep.yaml"), "--store", str(store), "--executor", executor]
    command += ["--address", ns.address] if ns is not None else ["--workers", str(workers)]
    competitor = busy() if loaded else None
    try:
        seconds = timed(command, ns.run if ns is not None else None)
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
    episodes = SWEEP["episodes"]
    row = {"executor": executor, "workers": workers, "loaded": loaded, "episodes": episodes,
           "seconds": round(seconds, 2), "episodes_per_second": round(episodes / seconds, 3)}
    print(row, flush=True)
    return row


def efficiency(rows: list[dict], executor: str, loaded: bool) -> float | None:
    by = {r["workers"]: r["episodes_per_second"] for r in rows if r["executor"] == executor and r["loaded"] == loaded}
    return round(by[2] / (2 * by[1]), 3) if 1 in by and 2 in by else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sweep_scaling.json"))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # tools/netns.py: not installed
    from netns import RayNamespace, namespace_unavailable

    rows, notes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
        for loaded in (False, True):
            for workers in (1, 2):
                rows.append(measure(folder, "local", workers, loaded))
        reason = namespace_unavailable()
        if reason is None:
            for workers in (1, 2):
                with RayNamespace(cpus=workers) as ns:
                    rows.append(measure(folder, "ray", workers, False, ns))
        else:
            notes["ray"] = f"skipped: {reason}"
    result = {"sweep": SWEEP, "cpus": os.cpu_count(), "rows": rows, **notes,
              "scaling_efficiency": {"local_idle": efficiency(rows, "local", False),
                                     "local_loaded": efficiency(rows, "local", True),
                                     "ray_idle": efficiency(rows, "ray", False)}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"scaling efficiency {result['scaling_efficiency']}; wrote {args.out}")


if __name__ == "__main__":
    main()
