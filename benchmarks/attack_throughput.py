"""PGD-10 evaluation throughput: 8 envs batched vs one env at a time (as research code runs it).

Same agent, same episodes, same seeds, one run. The agent is an SB3 PPO CnnPolicy on the
Atari preset (Nature CNN, 4×84×84 input, the network the papers attack) and the zoo
CartPole DQN (MLP). Episodes are capped at 200 agent steps so both settings do equal work.
Writes benchmarks/results/attack_throughput.json.

Run: python benchmarks/attack_throughput.py [--episodes 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import gymnasium as gym
import torch

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import load_victim

OUT = Path(__file__).resolve().parent / "results" / "attack_throughput.json"


def atari_cnn_agent(tmp: Path) -> str:
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from rlgauntlet.envs.presets import _register_ale

    _register_ale()
    env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0), 4)
    path = tmp / "pong_cnn.zip"
    sb3.PPO("CnnPolicy", env, seed=0, device="cpu").save(path)
    return f"sb3:{path}"


def measure(agent: str, env_id: str, spec: str, episodes: int, cap: int) -> dict:
    victim = load_victim(agent)
    threat = parse_threat(spec)

    def env_fn() -> gym.Env:
        return gym.wrappers.TimeLimit(make_env(env_id), max_episode_steps=cap)

    result = {"agent": agent.split("/")[-1], "env": env_id, "threat": spec, "episodes": episodes, "step_cap": cap}
    returns = {}
    for n_envs in (episodes, 1):
        start = time.perf_counter()
        records = evaluate_episodes(env_fn, victim, threat, range(episodes), seed=0, n_envs=n_envs)
        wall = time.perf_counter() - start
        steps = sum(r.length for r in records)
        returns[n_envs] = sorted((r.episode, r.episode_return) for r in records)
        result[f"n_envs_{n_envs}"] = {"steps": steps, "wall_seconds": round(wall, 3), "steps_per_second": round(steps / wall, 2)}
    result["speedup"] = round(result[f"n_envs_{episodes}"]["steps_per_second"] / result["n_envs_1"]["steps_per_second"], 2)
    result["same_returns"] = returns[episodes] == returns[1]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        results = [
            measure(atari_cnn_agent(Path(tmp)), "PongNoFrameskip-v4", "pgd:eps=1/255,steps=10", args.episodes, 100),
            measure("zoo:cartpole-dqn", "CartPole-v1", "pgd:eps=0.1,steps=10", args.episodes, 200),
        ]
    report = {
        "benchmark": "attack_throughput",
        "target_speedup": 3.0,
        "torch_threads": args.threads,
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": torch.get_num_threads()},
        "torch": torch.__version__,
        "results": results,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
