"""The model-based attack paper's Tables 1–3 on our agents: the attack against rand-U, rand-B
and flip on the same 10 runs, total loss to the unsafe state and total reward.

    python benchmarks/model_based_tables.py --task dmc-cartpole-obs
    python benchmarks/model_based_tables.py --task dmc-cartpole-obs --horizons 1,2,5,10   # Table 3 analog
    python benchmarks/model_based_tables.py --task dmc-cartpole-obs --samples-curve 10000,30000,100000
    python benchmarks/model_based_tables.py --task dmc-cartpole-action --init flip --lr-search 0.005,0.015,0.05,0.15,0.5,1.5

Each task names its agent, env, dynamics model (trained first if its folder has none, with
the recorded command), unsafe target and ε (the paper gives none: ours are stated here and
in docs/reproduction.md). Results go to benchmarks/results/model_based_<task>.json, written
after every method, and a re-run skips the methods already there (same spec).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: per task: agent, env, target, ε, dynamics-model settings, the attack and its baselines
TASKS = {
    "dmc-cartpole-obs": dict(
        agent="zoo:dmc-cartpole-balance-sac", env="dm_control/cartpole-balance-v0", place="observation",
        target="position[1]:-1|position[2]:0", eps=0.3, horizon=20, replan=5, samples=100_000,
        note="unsafe state: the pole pointing down (cos θ = −1, sin θ = 0), the paper's 'pole angle 180°'. At ε = 0.1 "
             "the agent holds (model_based_dmc-cartpole-obs_eps0.1.json: every attack within 5% of clean)"),
    "dmc-cartpole-action": dict(
        agent="zoo:dmc-cartpole-balance-sac", env="dm_control/cartpole-balance-v0", place="action",
        target="position[1]:-1|position[2]:0", eps=0.5, horizon=20, replan=5, samples=100_000,
        note="the same model as dmc-cartpole-obs; ε in action units (the action space is [−1, 1]); at ε = 0.3 the "
             "attack left the agent at its clean return (2 runs)"),
    "dmc-cartpole-swingup-obs": dict(
        agent="zoo:dmc-cartpole-swingup-sac", env="dm_control/cartpole-swingup-v0", place="observation",
        target="position[1]:-1|position[2]:0", eps=0.3, horizon=20, replan=5, samples=100_000,
        note="the pole starts hanging down and the agent swings it up; the unsafe state keeps it down (the "
             "paper's 'pole angle 180°'); ε and the attack's settings as on balance"),
    "dmc-walker-obs": dict(
        agent="zoo:dmc-walker-stand-sac", env="dm_control/walker-stand-v0", place="observation",
        target="height:0", eps=0.1, horizon=5, replan=1, samples=200_000,
        note="unsafe state: torso height 0 (fallen), the paper's 'head height 0'"),
    "dmc-walker-walk-obs": dict(
        agent="zoo:dmc-walker-walk-sac", env="dm_control/walker-walk-v0", place="observation",
        target="height:0", eps=0.3, horizon=1, replan=1, samples=200_000,
        note="unsafe state: torso height 0 (fallen), as on stand; T = 1, the paper's best horizon on walk (and ours on "
             "stand, where our inaccurate walker model favours the shortest plan); ε as on stand's table"),
    "dmc-fish-action": dict(
        agent="zoo:dmc-fish-upright-sac", env="dm_control/fish-upright-v0", place="action",
        target="upright:0", eps=0.5, horizon=20, replan=5, samples=100_000,
        note="unsafe state: 'not upright', the torso's z-axis projection 0 (the paper's target); ε in action units "
             "(the 5 fin and tail actions are in [−1, 1]), as on the cart-pole action table; T = 20, the paper's "
             "longer horizon for cart-pole and fish"),
    "dmc-fish-action-inverted": dict(
        agent="zoo:dmc-fish-upright-sac", env="dm_control/fish-upright-v0", place="action",
        target="upright:-1", eps=0.5, horizon=20, replan=5, samples=100_000,
        note="our second target for fish: upside down (upright = −1). The paper's target, 0 (on its side), "
             "scores an inverted fish as far from unsafe as an upright one, though its reward is 0; the same model "
             "and settings as dmc-fish-action"),
    "walker2d-obs": dict(
        agent="zoo:walker2d-td3", env="Walker2d-v5", place="observation", target="height:0", eps=0.3, horizon=5,
        replan=1, samples=200_000,
        note="Gymnasium MuJoCo (no [dmc] extra), the TD3 walker in raw observation units; episodes end when the "
             "walker falls (torso below 0.8), so a fallen walker keeps its last state's loss: compare returns first"),
    "hopper-obs": dict(
        agent="zoo:hopper-ppo", env="Hopper-v5", place="observation", target="height:0", eps=0.15, horizon=5,
        replan=1, samples=200_000,
        note="Gymnasium MuJoCo (no [dmc] extra); ε on the VecNormalize-normalised observation. Episodes end when "
             "the hopper falls, so a fallen hopper stops adding loss: compare returns first"),
}
DYNAMICS = dict(hidden=256, layers=4, epochs=30)


def model_dir(task: dict, samples: int) -> Path:
    """The model's folder relative to the repository (the script runs there), so that specs
    and results name no machine's paths."""
    short = task["env"].replace("dm_control/", "dmc-").replace("/", "-")
    return Path("runs") / f"dyn-{short}-{samples // 1000}k"


def ensure_model(task: dict, samples: int, victim, env_fn, log=print) -> dict:
    from rlgauntlet.training.attackers.dynamics import learn_dynamics

    folder = model_dir(task, samples)
    manifest_path = folder / "manifest.json"
    if manifest_path.exists():
        return json.loads(manifest_path.read_text())
    log(f"training the dynamics model {folder} ({samples} transitions)")
    return learn_dynamics(victim, task["env"], env_fn, samples, folder, log=log, **DYNAMICS)


def specs(task: dict, model: Path, m: int, horizon: int | None = None, lr: float | None = None) -> dict[str, str]:
    eps, target = task["eps"], task["target"]
    horizon = horizon or task["horizon"]
    replan = min(task["replan"], horizon)
    suffix = "" if task["place"] == "observation" else "_action"
    attack = "model_obs" if task["place"] == "observation" else "model_action"
    init = ",init=flip" if task.get("init") == "flip" else ""
    rate = f",lr={lr:g}" if lr is not None else ""
    return {
        f"ours (T={horizon}{init.replace(',init=', ', init ')}{f', lr {lr:g}' if lr is not None else ''})":
            f"{attack}:eps={eps},horizon={horizon},replan={replan}{init}{rate},model={model},target={target}",
        "rand-U": f"rand_u{suffix}:eps={eps},m={m},target={target}",
        "rand-B": f"rand_b{suffix}:eps={eps},m={m},target={target}",
        "flip": f"flip{suffix}:eps={eps}",
    }


def result_files(task: str | None) -> list[Path]:
    """The task's result files: model_based_TASK.json and its variants model_based_TASK_*.json
    (not another task whose name starts with this one's)."""
    if task is None:
        return sorted(RESULTS.glob("model_based_*.json"))
    return sorted([*RESULTS.glob(f"model_based_{task}.json"), *RESULTS.glob(f"model_based_{task}_*.json")])


def markdown(result: dict) -> str:
    """The stored results as Markdown: per method total loss and return, mean (std) and median
    / min / max over the runs, then ratios and wins when the comparison is there."""
    lines = [f"**{result['task']}** ({result['agent']}, {result['env']}, target `{result['target']}`, ε = {result['eps']}, "
             f"{result['episodes']} runs)", "",
             "| method | total loss: mean (std) | med / min / max | total reward: mean (std) | med / min / max |",
             "|---|---|---|---|---|"]
    from rlgauntlet.experiments.model_based import run_stats

    def cell(values: list[float]) -> tuple[str, str]:
        st = run_stats(values)
        return f"{st['mean']:.0f} ({st['std']:.0f})", f"{st['median']:.0f} / {st['min']:.0f} / {st['max']:.0f}"

    for name, method in result["methods"].items():
        loss = cell([r["loss"] for r in method["runs"]])
        ret = cell([r["return"] for r in method["runs"]])
        lines.append(f"| {name} | {' | '.join(loss)} | {' | '.join(ret)} |")
    comparison = result.get("comparison")
    if comparison:
        ours = next(n for n in comparison["wins"] if n.startswith("ours"))
        lines += ["", "| ours / baseline | loss ratio | reward ratio |", "|---|---|---|"]
        for name, ratio in comparison["ratios"].items():
            lines.append(f"| {name} | {ratio['loss']:.2f} | {ratio['return']:.2f} |")
        wins = ", ".join(f"{n} {w}/{comparison['runs']}" for n, w in comparison["wins"].items())
        lines += ["", f"Best attack (lowest total loss per run; ties count for each): {wins}. ({ours})"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), default=None,
                        help="the task (default: every task's main table in turn, skipping stored methods)")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--m", type=int, default=20, help="rollouts per run of rand-U / rand-B (the paper: 1000)")
    parser.add_argument("--horizons", default=None, help="Table 3: only the attack, at these T (comma-separated)")
    parser.add_argument("--samples-curve", default=None, help="attack strength vs the model's samples (comma-separated)")
    parser.add_argument("--n-envs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--init", choices=["zero", "flip"], default="zero", help="where the attack's δ starts")
    parser.add_argument("--eps", type=float, default=None, help="another ε than the task's (results file *_epsE.json)")
    parser.add_argument("--lr-search", default=None,
                        help="the paper's per-run search: the attack at each of these learning rates (comma-separated), "
                             "each run keeping its lowest-loss rate, against the baselines (results file *_lrsearch.json)")
    parser.add_argument("--markdown", action="store_true", help="print the stored results as Markdown tables and stop")
    args = parser.parse_args()
    os.chdir(ROOT)
    if args.markdown:
        for path in result_files(args.task):
            print(markdown(json.loads(path.read_text())))
        return 0
    if args.task is None:
        from rlgauntlet.zoo import load_manifest

        codes = []
        for name, task in TASKS.items():
            if task["agent"].removeprefix("zoo:") not in load_manifest():
                print(f"{name}: {task['agent']} is not in the zoo (rlgauntlet train --preset "
                      f"{task['agent'].removeprefix('zoo:')}); skipped")
                continue
            print(f"== {name}", flush=True)
            codes.append(subprocess.call([sys.executable, __file__, "--task", name, "--threads", str(args.threads)]))
        return max(codes, default=0)

    import torch

    from rlgauntlet.envs import make_env
    from rlgauntlet.envs.presets import observation_layout
    from rlgauntlet.experiments.agents import load_for_env
    from rlgauntlet.experiments.model_based import attack_runs, compare
    from rlgauntlet.threats.model_based.target import parse_target

    torch.set_num_threads(args.threads)
    task = dict(TASKS[args.task], init=args.init)
    if args.eps is not None:
        task["eps"] = args.eps
    victim, preset = load_for_env(task["agent"], task["env"])
    env_fn = lambda: make_env(task["env"], preset)  # noqa: E731
    probe = env_fn()
    target = parse_target(task["target"].split("|"), observation_layout(probe), probe.observation_space.shape[0])
    probe.close()
    suffix = "" if not args.horizons else "_horizon"
    suffix = "_samples" if args.samples_curve else suffix
    suffix = "_lrsearch" if args.lr_search else suffix
    suffix += f"_eps{args.eps:g}" if args.eps is not None else ""
    suffix += "_initflip" if args.init == "flip" else ""
    out = RESULTS / f"model_based_{args.task}{suffix}.json"
    result = json.loads(out.read_text()) if out.exists() else {}
    result.update({"task": args.task, **{k: v for k, v in task.items()}, "episodes": args.episodes,
                   "agent_sha256": victim.description.get("sha256"), "dynamics": DYNAMICS})
    result.setdefault("methods", {})

    def stored(spec: str | None) -> dict | None:
        """A method with this spec already run for this task (in any of its result files, with the
        same agent and target: a run's loss is measured to the target)."""
        for path in result_files(args.task):
            other = result if path == out else json.loads(path.read_text())
            if (other.get("agent"), other.get("target")) != (task["agent"], task["target"]):
                continue
            for method in other.get("methods", {}).values():
                if method["spec"] == spec and len(method["runs"]) == args.episodes:
                    return method
        return None

    def run(name: str, spec: str | None, extra: dict | None = None) -> list[dict]:
        done = stored(spec)
        if done is not None:
            result["methods"][name] = {**done, **(extra or {})}
            return done["runs"]
        started = time.perf_counter()
        runs = attack_runs(victim, env_fn, task["env"], spec, target, args.episodes, seed=0, n_envs=args.n_envs)
        result["methods"][name] = {"spec": spec, "runs": runs, "seconds": round(time.perf_counter() - started, 1),
                                   **(extra or {})}
        out.write_text(json.dumps(result, indent=1))
        loss = [r["loss"] for r in runs]
        ret = [r["return"] for r in runs]
        print(f"{name}: loss {sum(loss) / len(loss):.1f}, return {sum(ret) / len(ret):.1f} "
              f"({result['methods'][name]['seconds']} s)", flush=True)
        return runs

    run("clean", None)
    if args.samples_curve:
        for samples in [int(s) for s in args.samples_curve.split(",")]:
            manifest = ensure_model(task, samples, victim, env_fn)
            spec = specs(task, model_dir(task, samples), args.m)
            name = f"ours, f from {samples} samples"
            run(name, next(iter(spec.values())), {"samples": samples, "test_one_step_mse": manifest["test_one_step_mse"],
                                                  "k_step_error": manifest["k_step_error"]})
    elif args.horizons:
        ensure_model(task, task["samples"], victim, env_fn)
        for horizon in [int(h) for h in args.horizons.split(",")]:
            spec = specs(task, model_dir(task, task["samples"]), args.m, horizon)
            name, attack = next(iter(spec.items()))
            run(name, attack)
    elif args.lr_search:
        ensure_model(task, task["samples"], victim, env_fn)
        searched = []
        for lr in [float(v) for v in args.lr_search.split(",")]:
            name, attack = next(iter(specs(task, model_dir(task, task["samples"]), args.m, lr=lr).items()))
            searched.append(run(name, attack))
        # per run, the rate whose attack came closest to the unsafe state (judged in the true env, as the
        # paper's choice among its 6 rates is: an advantage like the baselines' best-of-m)
        best = [min(per_run, key=lambda r: r["loss"]) for per_run in zip(*searched)]
        ours = f"ours (best of {len(searched)} learning rates per run)"
        result["methods"][ours] = {"spec": f"best of lr {args.lr_search}", "runs": best,
                                   "derived": "lowest-loss learning rate per run"}
        baselines = dict(list(specs(task, model_dir(task, task["samples"]), args.m).items())[1:])
        for name, spec in baselines.items():
            run(name, spec)
        result["comparison"] = compare({ours: best, **{n: result["methods"][n]["runs"] for n in baselines}}, ours=ours)
    else:
        table = specs(task, model_dir(task, task["samples"]), args.m)
        if "model" not in result or any(stored(spec) is None for spec in table.values()):
            manifest = ensure_model(task, task["samples"], victim, env_fn)  # trained only when something runs
            result["model"] = {k: manifest[k] for k in ("samples", "hidden", "layers", "epochs", "test_one_step_mse",
                                                        "k_step_error", "model_sha256")}
        ours = None
        for name, spec in specs(task, model_dir(task, task["samples"]), args.m).items():
            ours = ours or name
            run(name, spec)
        runs = {name: result["methods"][name]["runs"] for name in specs(task, model_dir(task, task["samples"]), args.m)}
        result["comparison"] = compare(runs, ours=ours)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
