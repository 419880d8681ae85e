"""What an exact resume costs per checkpoint: the size of ``run_state.npz`` and the time to write it.

Each run is stopped by its time budget at its first rollout's end, where the run state is largest
(the rollout waits for its update, so the rollout buffer is in it). Runs: the CartPole PPO zoo
recipe (8 envs), a PA-AD director with the official MuJoCo settings against the zoo's Hopper
agent (one env), a PA-AD director against the zoo's Pong agent (8 envs of 84×84×4 frames), and the
MinAtar Breakout DQN recipe (its replay buffer is saved beside the run state, compressed: its
size and time are given too, for a buffer still mostly empty). Writes
benchmarks/results/run_state_cost.json.

Run: python benchmarks/run_state_cost.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent / "results" / "run_state_cost.json"


def measure(name: str, train) -> dict:
    """Run ``train(folder)`` (stopped at its first rollout's end) and read what it wrote."""
    import rlgauntlet.training.kit as kit
    from rlgauntlet.training.run_state import RUN_STATE

    seconds: dict[str, list[float]] = {"save_run_state": [], "save_replay_buffer": []}
    originals = {function: getattr(kit, function) for function in seconds}

    def timed(function: str):
        def call(*args, **kwargs):
            started = time.perf_counter()
            originals[function](*args, **kwargs)
            seconds[function].append(time.perf_counter() - started)
        return call

    for function in seconds:
        setattr(kit, function, timed(function))
    try:
        with tempfile.TemporaryDirectory() as folder:
            ckpt = train(Path(folder))
            files = {p.name: p.stat().st_size for p in ckpt.iterdir() if p.is_file()}
    finally:
        for function, original in originals.items():
            setattr(kit, function, original)
    row = {"run": name, "run_state_bytes": files[RUN_STATE], "write_seconds": round(max(seconds["save_run_state"]), 4),
           "checkpoint_bytes": sum(files.values())}
    if "replay_buffer.npz" in files:  # a buffer at its first rollout's end: mostly zeros still
        row["replay_buffer_bytes"] = files["replay_buffer.npz"]
        row["replay_buffer_write_seconds"] = round(max(seconds["save_replay_buffer"]), 4)
    print(row, flush=True)
    return row


def main() -> None:
    from rlgauntlet.common.outputs import write_json
    from rlgauntlet.experiments.attacker_job import train_attacker
    from rlgauntlet.training.sb3_train import train_preset

    torch.set_num_threads(1)
    quiet = {"log": lambda _: None}

    def preset(name: str):
        return lambda folder: train_preset(name, folder, deadline=time.monotonic(), stop_at_target=False, **quiet)

    def director(agent: str, env: str, eps: float, setting: str):
        def run(folder: Path) -> Path:
            train_attacker(agent, env, "paad", eps=eps, steps=1_000_000, run_dir=folder, eval_episodes=0, threads=1,
                           setting=setting, deadline=time.monotonic(), **quiet)
            return folder / "checkpoint"
        return run

    rows = [measure("cartpole-ppo (train)", preset("cartpole-ppo")),
            measure("paad official director, zoo:hopper-ppo",
                    director("zoo:hopper-ppo", "Hopper-v5", 0.075, "official")),
            measure("paad director, zoo:pong-ppo", director("zoo:pong-ppo", "PongNoFrameskip-v4", 0.0005, "default")),
            measure("minatar-breakout-dqn (train)", preset("minatar-breakout-dqn"))]
    write_json(OUT, {"what": "run_state.npz at a first rollout's end (its largest): bytes and seconds to write",
                     "rows": rows}, kind="benchmark")


if __name__ == "__main__":
    main()
