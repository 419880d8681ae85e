"""Cost of interval bound propagation against a forward pass (zoo MLPs and the Nature CNN,
batch 64, one torch thread), and of one RADIAL training step against a standard one
(DQN and PPO on CartPole's recipe). Target: IBP ≤ 2× a forward pass (a centre pass and a
radius pass). Writes benchmarks/results/ibp_cost.json.

Run: python benchmarks/ibp_cost.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from rlgauntlet.bounds import ibp
from rlgauntlet.envs import make_env
from rlgauntlet.victims import load_victim

OUT = Path(__file__).resolve().parent / "results" / "ibp_cost.json"
AGENTS = [("cartpole-dqn", "CartPole-v1", 0.05), ("cartpole-ppo", "CartPole-v1", 0.05),
          ("hopper-ppo", "Hopper-v5", 0.05), ("pendulum-td3", "Pendulum-v1", 0.05),
          ("pong-ppo", "PongNoFrameskip-v4", 1 / 255)]


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def network_costs(repeats: int) -> list[dict]:
    rows = []
    for name, env_id, eps in AGENTS:
        victim = load_victim(f"zoo:{name}", precision="float32")
        env = make_env(env_id)
        obs = [env.reset(seed=k)[0] for k in range(64)]
        x = victim.preprocess(np.stack(obs))
        with torch.no_grad():
            forward = median_seconds(lambda: victim.forward(x), repeats)
            bounds = median_seconds(lambda: ibp(victim, x, eps), repeats)
        rows.append({"agent": name, "batch": 64, "dtype": "float32", "forward_ms": round(forward * 1e3, 3),
                     "ibp_ms": round(bounds * 1e3, 3), "ratio": round(bounds / forward, 2)})
        print(f"{name:14s} forward {forward * 1e3:8.3f} ms   IBP {bounds * 1e3:8.3f} ms   ratio {bounds / forward:.2f}")
    return rows


def training_step_costs(repeats: int) -> list[dict]:
    import stable_baselines3 as sb3

    from rlgauntlet.training.defences.radial import RadialDQN, RadialPPO

    rows = []
    dqn_kwargs = dict(learning_starts=1000, train_freq=(10_000, "step"), batch_size=64, seed=0,
                      policy_kwargs=dict(net_arch=[256, 256]))
    ppo_kwargs = dict(n_steps=256, batch_size=256, n_epochs=1, seed=0)
    for label, standard, radial, kwargs, steps in (
        ("dqn", sb3.DQN, RadialDQN, dqn_kwargs, 1100), ("ppo", sb3.PPO, RadialPPO, ppo_kwargs, 256),
    ):
        timings = {}
        for name, cls in (("standard", standard), ("radial", radial)):
            extra = {"radial_eps": 0.1} if cls in (RadialDQN, RadialPPO) else {}
            model = cls("MlpPolicy", "CartPole-v1", **kwargs, **extra)
            model.learn(steps)
            model._current_progress_remaining = 0.0  # the full ε and κ of the end of the ramp
            step = (lambda m=model: m.train(gradient_steps=10, batch_size=64)) if label == "dqn" else \
                (lambda m=model: m.train())
            timings[name] = median_seconds(step, max(3, repeats // 5))
        rows.append({"algorithm": label, "standard_ms": round(timings["standard"] * 1e3, 2),
                     "radial_ms": round(timings["radial"] * 1e3, 2),
                     "ratio": round(timings["radial"] / timings["standard"], 2),
                     "unit": "10 gradient steps of batch 64" if label == "dqn" else "one PPO epoch over 256 steps"})
        print(f"{label}: standard {timings['standard'] * 1e3:.1f} ms, RADIAL {timings['radial'] * 1e3:.1f} ms, "
              f"ratio {timings['radial'] / timings['standard']:.2f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    report = {"benchmark": "ibp_cost", "target_ratio": 2.0, "torch_threads": 1, "torch": torch.__version__,
              "networks": network_costs(args.repeats), "training_steps": training_step_costs(args.repeats)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
