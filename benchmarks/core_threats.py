"""Threats on actions, on the world and with memory, on the zoo agents: the evidence tables of
docs/reproduction.md ("Changed physics, actuator noise, delays").

* physics: cartpole-dqn over the pole half-length × the OOD benchmark's 18 CartPole
  multipliers (1/10 … 1/2, 2 … 10); hopper-ppo over body_mass and geom_friction scales;
* actuator noise: action_noise std 0.1, 0.3, 0.5 on hopper-ppo and pendulum-td3;
* random actions: random_action p 0.1, 0.25, 0.5 on cartpole-ppo and cartpole-dqn;
* observation delay: obs_delay 1, 2, 3 on every zoo agent (``--skip-pong`` leaves out Pong).

For each physics grid: the first scale, going away from 1 in each direction, where the mean
return drops below 50% of clean. Writes benchmarks/results/core_threats.json (resumes from
benchmarks/results/core_threats.sqlite).

Run: python benchmarks/core_threats.py [--episodes 20] [--hopper-episodes 10] [--pong-episodes 5] [--skip-pong]
"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path

from _common import zoo_victim_or_exit

from rlgauntlet import evaluate

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "core_threats.json"
CARTPOLE_MULTIPLIERS = [Fraction(1, k) for k in range(10, 1, -1)] + [Fraction(k) for k in range(2, 11)]
HOPPER_MASS = [0.5, 0.75, 1.25, 1.5, 2.0, 3.0]
HOPPER_FRICTION = [0.1, 0.25, 0.5, 2.0, 4.0]


def run(agent: str, env: str, specs: list[str], episodes: int, store: str, n_envs: int) -> list[dict]:
    zoo_victim_or_exit(agent.removeprefix("zoo:"), "core_threats")
    report = evaluate(agent, env, specs, episodes=episodes, n_envs=n_envs, store=store, resume=True, impact=False)
    for ev in report.evaluations:
        print(f"  {agent:18s} {ev['spec']:42s} {ev['return_mean']:9.1f} ± {ev['return_sem']:6.1f}  "
              f"Δaction {ev['action_change_rate']:.0%}  ℓ∞ {ev['linf_mean']:.3g} {ev['budget_space']}")
    return [{k: ev[k] for k in ("spec", "return_mean", "return_std", "return_sem", "episodes", "action_change_rate",
                                "linf_mean", "perturbed_fraction", "budget_space")} | {"world": ev.get("world")}
            for ev in report.evaluations]


def first_below_half(rows: list[dict], scales: list[float]) -> dict:
    """The first scale below and above 1 (moving away from 1) where the return < 50% of clean."""
    clean = rows[0]["return_mean"]
    by_scale = dict(zip(scales, [r["return_mean"] for r in rows[1:]]))
    out = {}
    for side, ordered in (("down", sorted((s for s in scales if s < 1), reverse=True)),
                          ("up", sorted(s for s in scales if s > 1))):
        out[side] = next((s for s in ordered if by_scale[s] < 0.5 * clean), None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--hopper-episodes", type=int, default=10)
    parser.add_argument("--pong-episodes", type=int, default=5)
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--skip-pong", action="store_true")
    parser.add_argument("--store", default=str(HERE / "results" / "core_threats.sqlite"))
    args = parser.parse_args()
    kw = dict(store=args.store, n_envs=args.n_envs)
    out: dict = {"episodes": args.episodes, "hopper_episodes": args.hopper_episodes, "seed": 0}

    specs = [f"physics:param=length,scale={m}" for m in CARTPOLE_MULTIPLIERS]
    rows = run("zoo:cartpole-dqn", "CartPole-v1", specs, args.episodes, **kw)
    out["cartpole_length"] = {"rows": rows, "below_half": first_below_half(rows, [float(m) for m in CARTPOLE_MULTIPLIERS])}
    for param, scales in (("body_mass", HOPPER_MASS), ("geom_friction", HOPPER_FRICTION)):
        rows = run("zoo:hopper-ppo", "Hopper-v5", [f"physics:param={param},scale={s}" for s in scales],
                   args.hopper_episodes, **kw)
        out[f"hopper_{param}"] = {"rows": rows, "below_half": first_below_half(rows, scales)}

    noise = [f"action_noise:std={s}" for s in (0.1, 0.3, 0.5)]
    out["action_noise"] = {"hopper-ppo": run("zoo:hopper-ppo", "Hopper-v5", noise, args.hopper_episodes, **kw),
                           "pendulum-td3": run("zoo:pendulum-td3", "Pendulum-v1", noise, args.episodes, **kw)}
    rand = [f"random_action:p={p}" for p in (0.1, 0.25, 0.5)]
    out["random_action"] = {a: run(f"zoo:{a}", "CartPole-v1", rand, args.episodes, **kw)
                            for a in ("cartpole-ppo", "cartpole-dqn")}
    delay = [f"obs_delay:steps={k}" for k in (1, 2, 3)]
    agents = [("cartpole-ppo", "CartPole-v1", args.episodes), ("cartpole-dqn", "CartPole-v1", args.episodes),
              ("pendulum-td3", "Pendulum-v1", args.episodes), ("hopper-ppo", "Hopper-v5", args.hopper_episodes)]
    if not args.skip_pong:
        agents.append(("pong-ppo", "PongNoFrameskip-v4", args.pong_episodes))
    out["obs_delay"] = {a: run(f"zoo:{a}", env, delay, n, **kw) for a, env, n in agents}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
