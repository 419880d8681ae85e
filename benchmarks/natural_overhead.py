"""Wall time of natural-suite evaluations vs the clean evaluation on the same episodes.

8 envs, Atari preset (PongNoFrameskip-v4), the zoo Pong agent when it exists (else an
untrained SB3 PPO CnnPolicy: the same network and cost), episodes capped at 300 agent
steps so that every threat runs the same steps. Target: every natural threat ≤ 1.3× clean.
Writes benchmarks/results/natural_overhead.json.

Run: python benchmarks/natural_overhead.py [--episodes 8] [--cap 300] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.threats import parse_threat
from rlgauntlet.threats.suites import NATURAL_IMAGE
from rlgauntlet.victims import load_victim
from rlgauntlet.zoo import load_manifest

OUT = Path(__file__).resolve().parent / "results" / "natural_overhead.json"
ENV = "PongNoFrameskip-v4"


def pong_agent(tmp: Path) -> str:
    if "pong-ppo" in load_manifest():
        return "zoo:pong-ppo"
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from rlgauntlet.envs.presets import _register_ale

    _register_ale()
    path = tmp / "pong_cnn.zip"
    sb3.PPO("CnnPolicy", VecFrameStack(make_atari_env(ENV, n_envs=1, seed=0), 4), seed=0, device="cpu").save(path)
    return f"sb3:{path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--cap", type=int, default=300)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        agent = pong_agent(Path(tmp))
        victim = load_victim(agent)

        def env_fn() -> gym.Env:
            return gym.wrappers.TimeLimit(make_env(ENV), max_episode_steps=args.cap)

        def timed(threat, every: int = 1) -> tuple[float, int]:
            start = time.perf_counter()
            recs = evaluate_episodes(env_fn, victim, threat, range(args.episodes), seed=0, n_envs=args.episodes,
                                     action_change_every=every)
            return time.perf_counter() - start, sum(r.length for r in recs)

        timed(None)  # warm-up: env construction, kernels
        clean_wall, clean_steps = timed(None)
        rows = []
        for spec in NATURAL_IMAGE:
            wall, steps = timed(parse_threat(spec))
            wall10, steps10 = timed(parse_threat(spec), every=10)
            rows.append({"threat": spec, "wall_seconds": round(wall, 3), "steps": steps,
                         "ratio_to_clean": round((wall / steps) / (clean_wall / clean_steps), 3),
                         "ratio_to_clean_action_change_every_10": round((wall10 / steps10) / (clean_wall / clean_steps), 3)})
    report = {
        "benchmark": "natural_overhead",
        "agent": agent.split("/")[-1],
        "env": ENV,
        "n_envs": args.episodes,
        "step_cap": args.cap,
        "torch_threads": args.threads,
        "target_ratio": 1.3,
        "clean": {"wall_seconds": round(clean_wall, 3), "steps": clean_steps},
        "threats": rows,
        "max_ratio": max(r["ratio_to_clean"] for r in rows),
        "suite_ratio": round(sum(r["ratio_to_clean"] for r in rows) / len(rows), 3),
        "suite_ratio_action_change_every_10": round(
            sum(r["ratio_to_clean_action_change_every_10"] for r in rows) / len(rows), 3),
        "note": "ratio = seconds per agent step under the threat / clean; exact action-change rates need a "
                "second network call on every perturbed row, --action-change-every 10 samples them",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
