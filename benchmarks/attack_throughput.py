"""PGD-10 evaluation throughput: 8 envs batched vs one env at a time (as research code runs it).

Same agent, same episodes, same seeds, one run. The agent is an SB3 PPO CnnPolicy on the
Atari preset (Nature CNN, 4×84×84 input, the network the papers attack) and the zoo
CartPole DQN (MLP). Episodes are capped (``--atari-cap`` agent steps for Pong, 200 for
CartPole) so both settings do equal work.

Steps per second count every agent step of the evaluation, the seeded reset that starts
every episode included (an ALE seeded reset reloads the ROM: about 0.1 s, paid once per
episode in both settings). Building the envs is set-up and is timed apart
(``setup_seconds``): about 0.1 s per ALE env, a one-off cost that 8 envs pay 8 times and
one env once. The two settings run ``--repeats`` times in alternation and the median is
reported, because a shared 2-core machine's timings wander by ±15% between runs.
Writes benchmarks/results/attack_throughput.json.

Run: python benchmarks/attack_throughput.py [--episodes 8] [--threads 2] [--repeats 3] [--atari-cap 100] [--out F]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
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


def timed_run(env_fn, victim, threat, episodes: int, n_envs: int) -> dict:
    """One evaluation of episodes 0..episodes-1 with ``n_envs`` envs built beforehand."""
    start = time.perf_counter()
    envs = [env_fn() for _ in range(min(n_envs, episodes))]
    setup = time.perf_counter() - start
    start = time.perf_counter()
    records = evaluate_episodes(lambda: envs.pop(), victim, threat, range(episodes), seed=0, n_envs=n_envs)
    wall = time.perf_counter() - start
    steps = sum(r.length for r in records)
    return {
        "steps": steps,
        "setup_seconds": round(setup, 3),
        "wall_seconds": round(wall, 3),
        "steps_per_second": round(steps / wall, 2),
        "returns": sorted((r.episode, r.episode_return) for r in records),
    }


def measure(agent: str, env_id: str, spec: str, episodes: int, cap: int, repeats: int) -> dict:
    victim = load_victim(agent)
    threat = parse_threat(spec)

    def env_fn() -> gym.Env:
        return gym.wrappers.TimeLimit(make_env(env_id), max_episode_steps=cap)

    result = {"agent": agent.split("/")[-1], "env": env_id, "threat": spec, "episodes": episodes, "step_cap": cap}
    runs: dict[int, list[dict]] = {episodes: [], 1: []}
    for _ in range(repeats):
        for n_envs in runs:
            runs[n_envs].append(timed_run(env_fn, victim, threat, episodes, n_envs))
    for n_envs, done in runs.items():
        rates = [r["steps_per_second"] for r in done]
        result[f"n_envs_{n_envs}"] = {
            "steps": done[0]["steps"],
            "setup_seconds": statistics.median(r["setup_seconds"] for r in done),
            "steps_per_second": statistics.median(rates),
            "steps_per_second_runs": rates,
        }
    result["speedup"] = round(result[f"n_envs_{episodes}"]["steps_per_second"] / result["n_envs_1"]["steps_per_second"], 2)
    result["same_returns"] = runs[episodes][0]["returns"] == runs[1][0]["returns"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--atari-cap", type=int, default=100, help="agent steps per Pong episode")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        results = [
            measure(atari_cnn_agent(Path(tmp)), "PongNoFrameskip-v4", "pgd:eps=1/255,steps=10", args.episodes, args.atari_cap, args.repeats),
            measure("zoo:cartpole-dqn", "CartPole-v1", "pgd:eps=0.1,steps=10", args.episodes, 200, args.repeats),
        ]
    report = {
        "benchmark": "attack_throughput",
        "target_speedup": 3.0,
        "torch_threads": args.threads,
        "machine": {"processor": platform.processor() or platform.machine(), "cpus": torch.get_num_threads()},
        "torch": torch.__version__,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
