"""Wall time of natural-suite evaluations vs the clean evaluation on the same episodes.

8 envs, Atari preset (PongNoFrameskip-v4), the zoo Pong agent when it exists (else an
untrained SB3 PPO CnnPolicy: the same network and cost), episodes capped at 300 agent
steps so that every threat runs the same steps. Per-step costs: the time to build the envs
and reset them is the same for every threat and is left out. Target: every natural threat ≤ 1.3× clean.
Writes benchmarks/results/natural_overhead.json.

Run: python benchmarks/natural_overhead.py [--episodes 8] [--cap 300] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.metrics.perceptual import PERCEPTUAL_EVERY, PerceptualMeter
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


class _Kept(gym.Wrapper):
    """An env of the benchmark's pool: the engine's close() leaves it open for the next run."""

    def close(self) -> None:
        pass


#: the settings timed for every threat: (name, action_change_every, perceptual_every)
SETTINGS = (("defaults", 1, PERCEPTUAL_EVERY), ("action_change_every_10", 10, PERCEPTUAL_EVERY),
            ("action_change_every_10_no_perceptual", 10, 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--cap", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        agent = pong_agent(Path(tmp))
        victim = load_victim(agent)
        pool = itertools.cycle([gym.wrappers.TimeLimit(make_env(ENV), max_episode_steps=args.cap)
                                for _ in range(args.episodes)])

        def timed(threat, every: int = 1, perceptual_every: int = PERCEPTUAL_EVERY) -> float:
            """Seconds per agent step of the rollout after its first batched step: env
            construction and the seeded resets (about 0.45 s per Pong env, the same for every
            threat) are left out, so the ratio is one of per-step costs."""
            marks: list[float] = []
            batch_sizes: list[int] = []

            def on_step(n_active: int) -> None:
                marks.append(time.perf_counter())
                batch_sizes.append(n_active)

            evaluate_episodes(lambda: _Kept(next(pool)), victim, threat, range(args.episodes), seed=0,
                              n_envs=args.episodes, action_change_every=every, on_step=on_step,
                              perceptual=PerceptualMeter(every=perceptual_every))
            return (time.perf_counter() - marks[0]) / sum(batch_sizes[1:])

        timed(None)  # warm-up: kernels, caches
        rows, clean_runs = [], []
        for spec in NATURAL_IMAGE:
            ratios: dict[str, list[float]] = {name: [] for name, _, _ in SETTINGS}
            for _ in range(args.repeats):
                # a clean run beside every repeat: this machine's speed drifts within a run
                clean = timed(None)
                clean_runs.append(clean)
                for name, every, perceptual_every in SETTINGS:
                    ratios[name].append(timed(parse_threat(spec), every, perceptual_every) / clean)
            row = {"threat": spec}
            for name, values in ratios.items():
                row[f"ratio_{name}"] = round(statistics.median(values), 3)
                row[f"ratio_{name}_runs"] = [round(v, 3) for v in values]
            rows.append(row)
            print(json.dumps(row), flush=True)
    report = {
        "benchmark": "natural_overhead",
        "agent": agent.split("/")[-1],
        "env": ENV,
        "n_envs": args.episodes,
        "step_cap": args.cap,
        "repeats": args.repeats,
        "torch_threads": args.threads,
        "target_ratio": 1.3,
        "clean_ms_per_agent_step": round(1000 * statistics.median(clean_runs), 3),
        "clean_ms_per_agent_step_runs": [round(1000 * c, 3) for c in clean_runs],
        "threats": rows,
    }
    for name, _, _ in SETTINGS:
        report[f"max_ratio_{name}"] = max(r[f"ratio_{name}"] for r in rows)
        report[f"suite_ratio_{name}"] = round(statistics.mean(r[f"ratio_{name}"] for r in rows), 3)
    report["note"] = ("ratio = seconds per agent step under the threat / the clean run of the same repeat (median "
                      "of the repeats), env construction and seeded resets left out; exact action-change rates "
                      "need a second network call on every perturbed row (--action-change-every 10 samples "
                      "them); SSIM on every 10th step is the other fixed cost (--perceptual-every 0 turns it off)")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
