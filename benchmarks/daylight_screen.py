"""Where a natural perturbation is applied changes what it does: Daylight's photometric and
filtering changes (brightness & contrast, median blur, JPEG) at the paper's Pong settings, once on
the agent's input (the grey 84×84 frame stack, as ``rlgauntlet daylight`` applies them) and once on
the game's screen (the 210×160 RGB frame the emulator renders, before the frame skip's max, the grey
conversion and the resize), on the same agent, episodes and seeds.

Our zoo Pong agent loses 0.17–0.54 of its score to these changes on its input where the paper's
agent lost 0.96–1.0 (docs/reproduction.md); this measures whether the stage explains it. The
perturbation is the library's own transform in both cases (the same pixel operation on a tensor in
[0, 1]); only where it acts differs.

Writes benchmarks/results/daylight_screen.json and prints the table for docs/reproduction.md.

Run: python benchmarks/daylight_screen.py [--episodes 5] [--agent zoo:pong-ppo]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "daylight_screen.json"
ENV = "PongNoFrameskip-v4"
PERTURBATIONS = ("brightness_contrast", "median_blur", "jpeg")
ARGMIN_SCORE = -21.0  # Pong's floor, the impact's Score_min (metrics.impact)


class ScreenPerturbation(gym.ObservationWrapper):
    """The threat's transform on every RGB screen the emulator gives (H, W, 3) uint8, as a
    (1, 3, H, W) tensor in [0, 1], rounded back to uint8 (a screen has 8-bit pixels)."""

    def __init__(self, env: gym.Env, threat) -> None:
        super().__init__(env)
        self.threat = threat

    def observation(self, observation: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(observation)).permute(2, 0, 1)[None].float() / 255.0
        y = self.threat.transform(x).clamp(0, 1)
        return (y[0].permute(1, 2, 0) * 255.0).round().to(torch.uint8).numpy()


def make_pong(screen_threat=None) -> gym.Env:
    """Pong as the gauntlet makes it, with every screen perturbed under the Atari wrappers when
    ``screen_threat`` is given."""
    from rlgauntlet.envs import make_env

    return make_env(ENV, under=None if screen_threat is None else lambda env: ScreenPerturbation(env, screen_threat))


def play(victim, episodes: int, screen_threat=None, input_threat=None) -> list[float]:
    """Returns of ``episodes`` games (env seeds 0..episodes−1, greedy), all stepped side by side."""
    envs = [make_pong(screen_threat) for _ in range(episodes)]
    obs = np.stack([env.reset(seed=k)[0] for k, env in enumerate(envs)])
    returns, done = [0.0] * episodes, [False] * episodes
    while not all(done):
        with torch.no_grad():
            x = victim.preprocess(obs)
            if input_threat is not None:
                x = input_threat.transform(x).clamp(0, 1)
            actions = victim.actions(victim.forward(x)).cpu().numpy()
        for k, env in enumerate(envs):
            if done[k]:
                continue
            step_obs, _, terminated, truncated, info = env.step(int(actions[k]))
            if info["real_done"]:
                returns[k], done[k] = info["raw_return"], True
                continue
            if terminated or truncated:  # a lost life (Pong has one): the soft reset
                step_obs, _ = env.reset()
            obs[k] = step_obs
    for env in envs:
        env.close()
    return returns


def main() -> None:
    from _common import zoo_victim_or_exit

    from rlgauntlet.experiments.daylight import PAPER
    from rlgauntlet.metrics.impact import impact
    from rlgauntlet.threats import parse_threat

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--agent", default="pong-ppo", help="a zoo agent playing PongNoFrameskip-v4")
    args = parser.parse_args()
    torch.set_num_threads(1)
    victim = zoo_victim_or_exit(args.agent, "daylight_screen")
    started = time.perf_counter()
    clean = play(victim, args.episodes)
    rows = []
    for name in PERTURBATIONS:
        paper = PAPER["Pong"][name]
        threat = parse_threat(paper.spec)
        on_input = play(victim, args.episodes, input_threat=threat)
        on_screen = play(victim, args.episodes, screen_threat=threat)
        rows.append({"perturbation": name, "spec": paper.spec, "paper_impact": paper.impact,
                     "input_returns": on_input, "screen_returns": on_screen,
                     "impact_input": impact(float(np.mean(clean)), float(np.mean(on_input)), ARGMIN_SCORE),
                     "impact_screen": impact(float(np.mean(clean)), float(np.mean(on_screen)), ARGMIN_SCORE)})
        print(f"{name}: input {np.mean(on_input):.1f}, screen {np.mean(on_screen):.1f}", flush=True)
    report = {"agent": f"zoo:{args.agent}", "env": ENV, "episodes": args.episodes, "seeds": list(range(args.episodes)),
              "clean_returns": clean, "argmin_score": ARGMIN_SCORE, "rows": rows,
              "seconds": round(time.perf_counter() - started, 1)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"clean {np.mean(clean):.1f} over {args.episodes} games\n")
    print("| perturbation (paper's Pong setting) | impact, paper | on the agent's input | on the screen |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['spec']} | {r['paper_impact']} | {r['impact_input']:.3f} | {r['impact_screen']:.3f} |")


if __name__ == "__main__":
    main()
