"""PA-AD against SA-RL: the attacked return against the attacker's training steps (the PA-AD
paper's Figures 12 and 15: PA-AD converges faster), the same agent, budget, director settings
and seeds for both, several seeds each.

Each attacker trains once, without a break, with a checkpoint every ``--steps / --points`` steps;
its learning curve is the victim's mean return over the training episodes before each checkpoint
(the director's sampled actions: what the paper's Figures 12 and 15 plot), and its final director
(greedy) is evaluated on ``--episodes`` episodes of seeds seed + k. Per method and seed it reports
the curve, the final damage (clean − the last point) and the first steps from which the damage
stays at or above 50% and 90% of that final damage. (Training in chunks and evaluating each
chunk's director instead restarts the training envs at every chunk, which changes the run: one
SA-RL seed reached 30 after 51k steps in 25k chunks and stayed at 500 in 5k chunks.) Writes
benchmarks/results/attacker_convergence_<env>_eps<ε>_<steps>k.json and a PNG chart beside it.

A finished run in ``--runs`` (its manifest: same agent, method, ε, seed, at least ``--steps``
steps, evaluated on the same episodes) is read, not trained again; a run killed before its end
is refused (a curve is one run from its start: delete its folder). So the curves of a long env
can be trained in separate processes side by side (``--methods paad`` and ``--methods sarl``, or
one seed each) into one ``--runs`` folder, then put together by a last call with every method.

Run: python benchmarks/attacker_convergence.py --agent zoo:cartpole-ppo --env CartPole-v1 --eps 0.1 \
    --steps 100000 --points 20 --seeds 0 1 2 [--methods paad sarl] [--runs runs/convergence]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from rlgauntlet.common.outputs import save_figure, write_json
from rlgauntlet.experiments.attacker_job import train_attacker
from rlgauntlet.threats.learned.base import MANIFEST

HERE = Path(__file__).resolve().parent


def steps_to(fraction: float, steps: list[int], damage: list[float]) -> int | None:
    """The first point from which the damage stays at or above ``fraction`` of the last point's
    (a single early dip that the director then loses does not count); None: no damage at all.

    Example:
        >>> steps_to(0.5, [10, 20, 30, 40], [70.0, 0.0, 60.0, 100.0]), steps_to(0.9, [10, 20, 30, 40], [0.0, 60.0, 95.0, 100.0])
        (30, 30)
    """
    final = damage[-1]
    if final <= 0:
        return None
    reached = None
    for s, d in zip(steps, damage):
        if d >= fraction * final:
            reached = s if reached is None else reached
        else:
            reached = None
    return reached


def finished_run(folder: Path, agent: str, method: str, eps: float, seed: int, steps: int,
                 episodes: int) -> dict | None:
    """The manifest of a finished run of exactly this curve in ``folder``; None where the folder
    is empty or absent. A run of another configuration, or one killed before its end (a
    checkpoint, no manifest), is refused: resuming it would restart its training envs and change
    the curve."""
    manifest_file = folder / MANIFEST
    if not manifest_file.exists():
        if folder.exists() and any(folder.iterdir()):
            raise SystemExit(f"{folder}: a run stopped before its end (a curve is one run from its start); "
                             "delete the folder and run again")
        return None
    manifest = json.loads(manifest_file.read_text())
    strength = manifest.get("strength") or {}
    wanted = {"agent": agent, "method": method, "eps": eps, "seed": seed, "episodes": episodes}
    found = {"agent": manifest.get("victim", {}).get("agent"), "method": manifest.get("method"),
             "eps": manifest.get("eps"), "seed": manifest.get("seed"), "episodes": strength.get("episodes")}
    if found != wanted or manifest.get("steps", 0) < steps:
        raise SystemExit(f"{folder} holds another run ({found}, {manifest.get('steps')} steps) than this curve "
                         f"({wanted}, {steps} steps); give another --runs")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="zoo:cartpole-ppo")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--methods", nargs="+", choices=("paad", "sarl"), default=["paad", "sarl"])
    parser.add_argument("--variant", default=None, help="PA-AD variant (default: the agent's)")
    parser.add_argument("--runs", type=Path, default=None,
                        help="a new folder for the attackers (default: a temporary one); a curve needs fresh runs")
    args = parser.parse_args()
    if args.runs is None:
        import tempfile

        args.runs = Path(tempfile.mkdtemp(prefix="attacker-convergence-"))
    chunk = args.steps // args.points
    name = args.env.split("/")[-1].split("-")[0].lower()
    curves: dict[str, dict[int, dict]] = {}
    clean = None
    for method in args.methods:
        for seed in args.seeds:
            folder = args.runs / name / f"{method}-eps{args.eps:g}-seed{seed}"
            manifest = finished_run(folder, args.agent, method, args.eps, seed, args.steps, args.episodes)
            if manifest is None:
                manifest = train_attacker(args.agent, args.env, method, eps=args.eps, steps=args.steps, run_dir=folder,
                                          seed=seed, eval_episodes=args.episodes, checkpoint_every=chunk,
                                          variant=args.variant if method == "paad" else None, log=lambda line: None)
            strength = manifest["strength"]
            clean = strength["clean_mean"]
            points = [{"steps": p["steps"], "attacked_mean": p["recent_return"]} for p in manifest["learning_curve"]]
            steps = [p["steps"] for p in points]
            damage = [clean - p["attacked_mean"] for p in points]
            returns = strength["attacked_returns"]
            curves.setdefault(method, {})[seed] = {
                "points": points, "final_damage": damage[-1], "steps_to_50": steps_to(0.5, steps, damage),
                "steps_to_90": steps_to(0.9, steps, damage), "train_seconds": manifest["train_seconds"],
                "greedy_final": {"attacked_mean": strength["attacked_mean"],
                                 "attacked_sem": float(np.std(returns, ddof=1) / np.sqrt(len(returns)))}}
            print(f"{method} seed {seed}: {[round(p['attacked_mean']) for p in points]}, greedy final "
                  f"{strength['attacked_mean']:.1f}", flush=True)
    summary = {}
    for method, by_seed in curves.items():
        finals = [c["greedy_final"]["attacked_mean"] for c in by_seed.values()]
        summary[method] = {"greedy_final_mean": float(np.mean(finals)),
                           "steps_to_50": [c["steps_to_50"] for c in by_seed.values()],
                           "steps_to_90": [c["steps_to_90"] for c in by_seed.values()]}
    out = HERE / "results" / f"attacker_convergence_{name}_eps{args.eps:g}_{args.steps // 1000}k.json"
    write_json(out, {"agent": args.agent, "env": args.env, "eps": args.eps, "steps": args.steps, "points": args.points,
                     "episodes": args.episodes, "seeds": args.seeds, "clean": clean, "curves": curves,
                     "summary": summary}, kind="benchmark")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, color in (("paad", "tab:red"), ("sarl", "tab:blue")):
        if method not in curves:
            continue
        runs = np.array([[p["attacked_mean"] for p in c["points"]] for c in curves[method].values()])
        steps = [p["steps"] for p in next(iter(curves[method].values()))["points"]]
        ax.plot(steps, runs.mean(axis=0), color=color, label=f"{'PA-AD' if method == 'paad' else 'SA-RL'} "
                f"(mean of {len(runs)} seeds)")
        ax.fill_between(steps, runs.min(axis=0), runs.max(axis=0), color=color, alpha=0.2)
    ax.axhline(clean, color="grey", linestyle="--", label="clean")
    ax.set_xlabel("attacker training steps")
    ax.set_ylabel("victim return in the attacker's training episodes")
    ax.set_title(f"{args.agent} on {args.env}, ε = {args.eps:g}")
    ax.legend()
    save_figure(fig, out.with_suffix(".png"), kind="benchmark", dpi=120, bbox_inches="tight")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
