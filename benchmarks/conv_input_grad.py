"""The block input gradient of the Nature CNN's first layer against torch's own backward.

The zoo Pong agent (an untrained SB3 PPO CnnPolicy when the zoo has none: the same network),
one torch thread: (1) one input gradient of the policy logits' logsumexp (a PGD iteration's
work) at batch 1, 8 and 32, and (2) a PGD-10 evaluation of 8 Pong envs capped at ``--cap``
agent steps, each with the first layer as the loader leaves it (``BlockStridedConv2d``) and
switched back to ``nn.Conv2d``. Alternated ``--repeats`` times, medians reported.
Writes benchmarks/results/conv_input_grad.json.

Run: python benchmarks/conv_input_grad.py [--repeats 5] [--cap 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch
import torch.nn as nn

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import load_victim
from rlgauntlet.victims.conv_input_grad import BlockStridedConv2d

OUT = Path(__file__).resolve().parent / "results" / "conv_input_grad.json"
ENV = "PongNoFrameskip-v4"


def main() -> None:
    from natural_overhead import pong_agent  # the same agent choice

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cap", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        agent = pong_agent(Path(tmp))
        victim = load_victim(agent)
        swapped = [m for m in victim.policy.modules() if type(m) is BlockStridedConv2d]

        def use(block: bool) -> None:
            for m in swapped:
                m.__class__ = BlockStridedConv2d if block else nn.Conv2d

        def gradient_ms(batch: int, n: int = 20) -> float:
            x = torch.rand(batch, 4, 84, 84, generator=torch.Generator().manual_seed(0))
            start = time.perf_counter()
            for _ in range(n):
                xx = x.clone().requires_grad_(True)
                torch.autograd.grad(victim.forward(xx).logits.logsumexp(1).sum(), xx)
            return 1000 * (time.perf_counter() - start) / n

        def pgd_steps_per_second() -> tuple[float, list]:
            marks: list[float] = []
            records = evaluate_episodes(lambda: gym.wrappers.TimeLimit(make_env(ENV), args.cap), victim,
                                        parse_threat("pgd:eps=1/255,steps=10"), range(8), seed=0, n_envs=8,
                                        on_step=lambda n: marks.append(time.perf_counter()))
            steps = sum(r.length for r in records) - 8  # after the first batched step: no set-up
            return steps / (time.perf_counter() - marks[0]), sorted((r.episode, r.episode_return) for r in records)

        results: dict = {"gradient_ms": {}, "pgd10_steps_per_second": {}}
        for batch in (1, 8, 32):
            times: dict[str, list[float]] = {"block": [], "torch": []}
            for _ in range(args.repeats):
                for name in times:
                    use(name == "block")
                    gradient_ms(batch, 3)  # warm-up
                    times[name].append(gradient_ms(batch))
            results["gradient_ms"][f"batch_{batch}"] = {
                name: round(statistics.median(v), 3) for name, v in times.items()}
            results["gradient_ms"][f"batch_{batch}"]["speedup"] = round(
                statistics.median(times["torch"]) / statistics.median(times["block"]), 2)
            print(batch, results["gradient_ms"][f"batch_{batch}"], flush=True)
        rates: dict[str, list[float]] = {"block": [], "torch": []}
        returns = {}
        for _ in range(max(1, args.repeats // 2)):
            for name in rates:
                use(name == "block")
                rate, returns[name] = pgd_steps_per_second()
                rates[name].append(rate)
        use(True)
        results["pgd10_steps_per_second"] = {name: round(statistics.median(v), 2) for name, v in rates.items()}
        results["pgd10_steps_per_second"]["speedup"] = round(
            statistics.median(rates["block"]) / statistics.median(rates["torch"]), 2)
        results["pgd10_same_returns"] = returns["block"] == returns["torch"]
    report = {"benchmark": "conv_input_grad", "agent": agent.split("/")[-1], "env": ENV, "torch_threads": 1,
              "repeats": args.repeats, "pgd_step_cap": args.cap, **results}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
