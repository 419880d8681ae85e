"""Does stepping Atari emulators in a worker process, overlapped with the batched network in
the main process, pay on 2 cores? (issue: CPU efficiency, "env-worker overlap").

Workload: the zoo Pong agent acting greedily on 8 Pong envs (the preset's wrappers), agent
steps per second over a fixed number of batched steps, one torch thread.

* ``inline``: the engine's way: one batched forward on the 8 observations, then the 8 envs
  step one after the other, in one process.
* ``overlap``: the 8 envs live in one worker process, in two halves of 4; the main process
  runs the forward of one half while the worker steps the other (a two-stage pipeline).

Each mode runs on an idle machine and again beside one competing CPU-bound process (started
and stopped here), as benchmarks/contention.py does. Writes benchmarks/results/env_overlap.json.

Run: python benchmarks/env_overlap.py [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import torch

ENV_ID, N_ENVS = "PongNoFrameskip-v4", 8
OUT = Path(__file__).resolve().parent / "results" / "env_overlap.json"


def _make_envs(n: int, seed: int):
    from rlgauntlet.envs import make_env

    envs = [make_env(ENV_ID) for _ in range(n)]
    return envs, [env.reset(seed=seed + k)[0] for k, env in enumerate(envs)]


def _step(envs, obs, actions, seed):
    for k, (env, a) in enumerate(zip(envs, actions)):
        o, _, term, trunc, _ = env.step(int(a))
        obs[k] = env.reset(seed=seed + k)[0] if (term or trunc) else o


def _worker(conn, seed: int) -> None:
    torch.set_num_threads(1)
    envs, obs = _make_envs(N_ENVS, seed)
    halves = [slice(0, N_ENVS // 2), slice(N_ENVS // 2, N_ENVS)]
    conn.send([np.stack(obs[h]) for h in halves])
    while True:
        msg = conn.recv()
        if msg is None:
            break
        half, actions = msg
        part = obs[halves[half]]
        _step(envs[halves[half]], part, actions, seed)
        obs[halves[half]] = part
        conn.send(np.stack(part))


def inline(victim, steps: int) -> float:
    envs, obs = _make_envs(N_ENVS, 0)
    start = time.perf_counter()
    for _ in range(steps):
        with torch.no_grad():
            actions = victim.actions(victim.forward(victim.preprocess(np.stack(obs)))).numpy()
        _step(envs, obs, actions, 0)
    return steps * N_ENVS / (time.perf_counter() - start)


def overlap(victim, steps: int) -> float:
    parent, child = mp.Pipe()
    proc = mp.get_context("fork").Process(target=_worker, args=(child, 0), daemon=True)
    proc.start()
    first = parent.recv()
    act = lambda o: victim.actions(victim.forward(victim.preprocess(o))).numpy()  # noqa: E731
    start = time.perf_counter()
    with torch.no_grad():
        parent.send((0, act(first[0])))  # the worker steps half 0 ...
        pending_obs = first[1]
        for i in range(steps * 2 - 1):
            half = (i + 1) % 2
            actions = act(pending_obs)  # ... while the main process runs the other half's forward
            pending_obs = parent.recv()  # the stepped half's new observations
            parent.send((half, actions))
        parent.recv()
    rate = steps * N_ENVS / (time.perf_counter() - start)
    parent.send(None)
    proc.join(timeout=10)
    return rate


def _burn() -> None:
    x = 0.0
    while True:
        x = (x * 1.000001 + 1.0) % 1e9


def main() -> None:
    from rlgauntlet.victims import load_victim

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="batched steps per measurement")
    args = parser.parse_args()
    torch.set_num_threads(1)
    victim = load_victim("zoo:pong-ppo")
    rows = []
    for load in ("idle", "loaded"):
        hog = None
        if load == "loaded":
            hog = mp.get_context("fork").Process(target=_burn, daemon=True)
            hog.start()
        try:
            for name, fn in (("inline", inline), ("overlap", overlap)):
                rate = fn(victim, args.steps)
                rows.append({"mode": name, "machine": load, "agent_steps_per_second": round(rate, 1)})
                print(f"{load:7s} {name:8s} {rate:8.1f} agent steps/s", flush=True)
        finally:
            if hog is not None:
                hog.terminate()
                hog.join()
    rate = {(r["mode"], r["machine"]): r["agent_steps_per_second"] for r in rows}
    result = {"benchmark": "env_overlap", "env": ENV_ID, "n_envs": N_ENVS, "agent": "zoo:pong-ppo",
              "torch_threads": 1, "steps": args.steps, "rows": rows,
              "speedup_idle": round(rate[("overlap", "idle")] / rate[("inline", "idle")], 2),
              "speedup_loaded": round(rate[("overlap", "loaded")] / rate[("inline", "loaded")], 2)}
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("speedup_idle", "speedup_loaded")}))


if __name__ == "__main__":
    main()
