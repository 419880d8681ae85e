"""Speed on a busy machine: each workload idle and while a competing CPU-bound process runs,
with torch's default threads (one per core) and with our thread policy (one thread); then
end to end, whole processes, our batched PGD-10 against a one-env loop written the way the
papers' code runs it (benchmarks/paper_style_pgd.py).

Workloads (zoo agents, capped episodes so that every setting does the same steps):
CartPole MLP PGD-10 (8 envs), Pong CNN clean (2 envs), Pong CNN PGD-10 (4 envs). The
competitor is a plain busy loop in another process, started and stopped here. Each rate is
the median of ``--repeats`` runs. Writes benchmarks/results/contention.json.

Run: python benchmarks/contention.py [--repeats 3] [--skip-e2e | --e2e-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch

from _common import Competitor

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import load_victim

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "contention.json"
WORKLOADS = {
    "cartpole_mlp_pgd10": dict(agent="zoo:cartpole-dqn", env="CartPole-v1", threat="pgd:eps=0.1,steps=10",
                               episodes=8, cap=50, n_envs=8),
    "pong_cnn_clean": dict(agent="zoo:pong-ppo", env="PongNoFrameskip-v4", threat=None, episodes=2, cap=150, n_envs=2),
    "pong_cnn_pgd10": dict(agent="zoo:pong-ppo", env="PongNoFrameskip-v4", threat="pgd:eps=1/255,steps=10",
                           episodes=4, cap=12, n_envs=4),
}
E2E = {
    "cartpole_mlp_pgd10": dict(agent="cartpole-dqn", env="CartPole-v1", eps="0.1", episodes=16, cap=100),
    "pong_cnn_pgd10": dict(agent="pong-ppo", env="PongNoFrameskip-v4", eps="0.00392156862745098", episodes=16, cap=8),
    # 8 steps per episode measure mostly env construction (0.45 s per Pong env, ours builds 16);
    # 100 steps measure the attack
    "pong_cnn_pgd10_cap100": dict(agent="pong-ppo", env="PongNoFrameskip-v4", eps="0.00392156862745098",
                                  episodes=16, cap=100),
}


def rate(w: dict, victim, threads: int) -> float:
    torch.set_num_threads(threads)
    envs = [gym.wrappers.TimeLimit(make_env(w["env"]), w["cap"]) for _ in range(w["n_envs"])]
    threat = parse_threat(w["threat"]) if w["threat"] else None
    start = time.perf_counter()
    records = evaluate_episodes(lambda: envs.pop(), victim, threat, range(w["episodes"]), 0, n_envs=w["n_envs"])
    return sum(r.length for r in records) / (time.perf_counter() - start)


def contention(repeats: int) -> dict:
    default_threads = torch.get_num_threads()
    out = {}
    for name, w in WORKLOADS.items():
        victim = load_victim(w["agent"])
        rate(w, victim, 1)  # warm-up
        row = {}
        for label, threads in (("torch_default", default_threads), ("policy", 1)):
            idle = statistics.median(rate(w, victim, threads) for _ in range(repeats))
            with Competitor():
                loaded = statistics.median(rate(w, victim, threads) for _ in range(repeats))
            row[label] = {"threads": threads, "idle_steps_per_second": round(idle, 1),
                          "loaded_steps_per_second": round(loaded, 1), "loaded_over_idle": round(loaded / idle, 3)}
            print(f"{name:20s} {label:13s} threads {threads}: idle {idle:8.1f}/s  loaded {loaded:8.1f}/s  "
                  f"ratio {loaded / idle:.2f}", flush=True)
        out[name] = {**w, **row}
    return out


OURS = """
import gymnasium as gym, json
from rlgauntlet.common.threads import thread_policy
from _common import Competitor

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import load_victim
with thread_policy():
    victim = load_victim("zoo:{agent}")
    records = evaluate_episodes(lambda: gym.wrappers.TimeLimit(make_env("{env}"), {cap}), victim,
                                parse_threat("pgd:eps={eps},steps=10"), range({episodes}), 0, n_envs={episodes})
print(json.dumps(sorted([r.episode, r.episode_return, r.length] for r in records)))
"""


def timed(cmd: list[str]) -> tuple[float, float, list]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(res.stdout.strip().splitlines()[-1])


def end_to_end() -> dict:
    out = {}
    for name, e in E2E.items():
        paper = timed([sys.executable, str(HERE / "paper_style_pgd.py"), "--agent", e["agent"], "--env", e["env"],
                       "--eps", e["eps"], "--episodes", str(e["episodes"]), "--cap", str(e["cap"])])
        ours = timed([sys.executable, "-c", OURS.format(**e)])
        steps = sum(r[2] for r in ours[2])
        out[name] = {**e, "steps": steps,
                     "paper_style": {"wall_seconds": round(paper[0], 2), "cpu_seconds": round(paper[1], 2)},
                     "rlgauntlet": {"wall_seconds": round(ours[0], 2), "cpu_seconds": round(ours[1], 2)},
                     "wall_speedup": round(paper[0] / ours[0], 2), "cpu_speedup": round(paper[1] / ours[1], 2),
                     "same_lengths": [r[2] for r in paper[2]] == [r[2] for r in ours[2]]}
        print(f"{name:20s} end to end: paper-style {paper[0]:.1f} s wall / {paper[1]:.1f} s CPU, "
              f"rlgauntlet {ours[0]:.1f} s / {ours[1]:.1f} s: {paper[0] / ours[0]:.2f}× wall, "
              f"{paper[1] / ours[1]:.2f}× CPU", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--e2e-only", action="store_true", help="re-run the end-to-end part, keep the stored workloads")
    args = parser.parse_args()
    report = {"benchmark": "contention", "target_loaded_over_idle": 0.5, "target_e2e_speedup": 5.0,
              "machine": {"processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()},
              "torch": torch.__version__}
    report["workloads"] = json.loads(OUT.read_text())["workloads"] if args.e2e_only else contention(args.repeats)
    if not args.skip_e2e:
        report["end_to_end"] = end_to_end()
    elif OUT.exists():  # keep the stored end-to-end part
        report["end_to_end"] = json.loads(OUT.read_text()).get("end_to_end")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
