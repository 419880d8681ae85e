"""The ``rlgauntlet`` command line.

Every command reports bad input as one line on stderr and exits with status 2.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

import rlgauntlet
from rlgauntlet.common.outputs import check_output, check_run_dir, write_json
from rlgauntlet.errors import UserError


def _finite_number(value: Optional[float]) -> Optional[float]:
    """Every number option is finite: a NaN passes a range check (comparisons with NaN are
    false) and would become a silently wrong number. Given to every float option as its callback."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value!r} is not a finite number")
    return value


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Put trained deep-RL agents through the gauntlet.\n\nExample: rlgauntlet evaluate --agent zoo:cartpole-ppo --env CartPole-v1 --threat gaussian_noise:std=0.1",
)
zoo_app = typer.Typer(no_args_is_help=True, help="Reference agents trained by this project.")
app.add_typer(zoo_app, name="zoo")
ood_app = typer.Typer(no_args_is_help=True, help="Out-of-distribution detection benchmark (shift grids, AUROC).")
app.add_typer(ood_app, name="ood")
console = Console(stderr=True)
# Piped output (logs, CI) gets a wide table rather than one cropped to 80 columns.
out_console = Console() if sys.stdout.isatty() else Console(width=160)

DEFAULT_STORE_NAME = "rlgauntlet-results.sqlite"


def _fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def print_table(report: dict) -> None:
    agent = report["agent"].get("name") or report["agent"].get("path", "")
    spaces = sorted({ev["budget_space"] for ev in report["evaluations"]})
    table = Table(title=f"{agent} on {report['env']['id']}; budgets and ℓ∞/ℓ2 in {'/'.join(spaces)} units, "
                        f"{report['evaluations'][0]['episodes']} episodes")
    evals = report["evaluations"]
    with_impact = any(ev.get("impact") is not None or ev.get("generalized_impact") is not None for ev in evals)
    with_ssim = any(ev.get("ssim_mean") is not None for ev in evals)
    table.add_column("threat", overflow="fold", min_width=22)
    columns = ["return", "±sem"] + (["impact"] if with_impact else []) + ["perturbed", "Δaction", "ℓ∞", "ℓ2"]
    with_lpips = any(ev.get("lpips_mean") is not None for ev in evals)
    columns += (["SSIM", "PSNR"] if with_ssim else []) + (["LPIPS"] if with_lpips else []) + ["seconds"]
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
    for ev in evals:
        imp = ev.get("impact") if ev.get("impact") is not None else ev.get("generalized_impact")
        row = [ev["spec"], _fmt(ev["return_mean"]), _fmt(ev["return_sem"])]
        row += ([_fmt(imp) if imp is not None else "-"] if with_impact else [])
        row += [f"{ev['perturbed_fraction']:.0%}", f"{ev['action_change_rate']:.0%}", _fmt(ev["linf_mean"]), _fmt(ev["l2_mean"])]
        if with_ssim:
            row += [_fmt(ev["ssim_mean"]) if ev.get("ssim_mean") is not None else "-",
                    _fmt(ev["psnr_mean"]) if ev.get("psnr_mean") is not None else "-"]
        if with_lpips:
            row += [_fmt(ev["lpips_mean"]) if ev.get("lpips_mean") is not None else "-"]
        table.add_row(*row, f"{ev['wall_seconds']:.1f}")
    if report.get("score_min") is not None:
        table.caption = f"impact = (clean − threat) / (clean − argmin agent {report['score_min']:.4g})"
    elif report.get("min_score_fixed") is not None:
        table.caption = f"impact: generalized, minimum score {report['min_score_fixed']:.4g}"
    out_console.print(table)


def print_report(report: dict) -> None:
    """An evaluation report: its table, then one line per strongest-of row."""
    print_table(report)
    for row in report.get("strongest_of", []):
        budget = "" if row["eps"] is None else f" at eps {row['eps']:g}"
        console.print(f"strongest of {len(row['attacks'])}{budget}: {row['return_mean']:.4g} ± {row['return_sem']:.2g} "
                      f"by {row['winner']}")


# -- agent options, shared by every command that loads an agent (one definition each) ------------
_PRESET = typer.Option(None, help="override the env preset: atari, classic, mujoco, dm_control, none. Example: --preset none")
_KIND = typer.Option(None, help="TorchScript output kind: q, categorical, gaussian, deterministic. Example: --kind q")
_VECNORMALIZE = typer.Option(None, help="SB3 VecNormalize statistics saved with the agent (.pkl, read as data). Example: --vecnormalize vecnormalize.pkl")
_INPUT_SPACE = typer.Option(None, help="unit of the network input for TorchScript agents: pixel01, normalized, raw. Example: --input-space raw")
_PRECISION = typer.Option("auto", help="network precision: auto (float64 for vector inputs, float32 for images), float32, float64. Example: --precision float32")
_DEVICE = typer.Option("cpu", help="torch device: cpu or cuda. Example: --device cuda")
_ALLOW_PICKLE = typer.Option(False, "--allow-pickle", help="unpickle the SB3 agent file as SB3 does: runs code stored in it, so only for files you trust (needed for custom policy classes or activation functions). Example: --allow-pickle")
_THREADS = typer.Option(None, min=1, help="torch CPU threads for the networks (default $RLGAUNTLET_THREADS or 1: safe on a busy machine; 2 may speed up image agents on an idle one). Example: --threads 2")


def _agent_spec(agent: str, preset: Optional[str] = None, kind: Optional[str] = None,
                vecnormalize: Optional[Path] = None, input_space: Optional[str] = None, precision: str = "auto",
                device: str = "cpu", allow_pickle: bool = False):
    """The one agent description the library's jobs take, from the shared agent options."""
    from pydantic import ValidationError

    from rlgauntlet.experiments.agents import AgentSpec

    try:
        return AgentSpec(agent=agent, preset=preset, kind=kind, vecnormalize=None if vecnormalize is None else str(vecnormalize),
                         input_space=input_space, precision=precision, device=device, allow_pickle=allow_pickle)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UserError(f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}") from None


def _load_for_env(agent: str, env: str, preset: Optional[str], device: str, kind: Optional[str],
                  vecnormalize: Optional[Path], input_space: Optional[str] = None, precision: str = "auto",
                  allow_pickle: bool = False):
    """Load the agent, check it fits the env with its preset: (victim, preset name)."""
    from rlgauntlet.experiments.agents import load_for_env

    return load_for_env(agent, env, preset, device, kind, vecnormalize, input_space, precision, allow_pickle)


@app.command()
def evaluate(
    agent: str = typer.Option(..., help="zoo:NAME | sb3:PATH.zip[:ALGO] | torchscript:PATH. Example: --agent zoo:cartpole-ppo"),
    env: str = typer.Option(..., help="Gymnasium id; the preset follows from it. Example: --env PongNoFrameskip-v4"),
    threat: List[str] = typer.Option([], help="threat spec, repeatable. Example: --threat uniform_noise:eps=1/255,p=0.5"),
    episodes: int = typer.Option(10, min=1, help="episodes per evaluation; episode k uses seed SEED+k. Example: --episodes 20"),
    seed: int = typer.Option(0, min=0, help="evaluation seed. Example: --seed 100"),
    n_envs: int = typer.Option(4, "--n-envs", min=1, help="envs stepped side by side (results do not depend on it). Example: --n-envs 8"),
    device: str = _DEVICE,
    out: Optional[Path] = typer.Option(None, help="write the JSON report here. Example: --out results/pong.json"),
    store: Optional[Path] = typer.Option(None, help=f"SQLite results store (default {DEFAULT_STORE_NAME} beside --out, or here). Example: --store runs.sqlite"),
    resume: bool = typer.Option(False, help="continue the latest matching runs in the store, running only missing episodes. Example: --resume"),
    preset: Optional[str] = _PRESET,
    kind: Optional[str] = _KIND,
    vecnormalize: Optional[Path] = _VECNORMALIZE,
    input_space: Optional[str] = _INPUT_SPACE,
    stochastic: bool = typer.Option(False, help="sample actions instead of acting greedily. Example: --stochastic"),
    precision: str = _PRECISION,
    suite: List[str] = typer.Option([], help="add a named threat suite: natural (Daylight perturbations and common corruptions at default severities) adversarial (Random, FGSM, PGD-10, Momentum, MinQ, MaxDiff at --eps), certified (GWC at --eps) or an OOD shift grid (ood-cartpole, ood-pendulum, ood-pong). Example: --suite natural"),
    eps: Optional[str] = typer.Option(None, help="budget of --suite, in the agent's budget space (fractions allowed). Example: --eps 2/255"),
    eps_grid: Optional[str] = typer.Option(None, "--eps-grid", help="evaluate every threat without eps (and every suite) at each budget. Example: --eps-grid 0,1/255,2/255,3/255 --threat pgd:objective=minbest"),
    impact: bool = typer.Option(True, help="compute impact against the argmin agent (discrete agents; cached in the store). Example: --no-impact"),
    min_score: Optional[float] = typer.Option(None, callback=_finite_number, help="fixed minimum score for the generalized impact (default: -21 Pong, 0 other Atari). Example: --min-score 0"),
    action_change_every: int = typer.Option(1, min=1, help="compare with the clean action on every k-th step only (saves a network call per perturbed step; the rate becomes an estimate). Example: --action-change-every 10"),
    perceptual_every: int = typer.Option(10, min=0, help="measure SSIM/PSNR (and LPIPS) of image perturbations on every k-th step of an episode; 0 never (SSIM of 8 Pong frame stacks costs about two clean batched steps). Example: --perceptual-every 0"),
    lpips_weights: Optional[Path] = typer.Option(None, help="LPIPS (AlexNet) weights to add LPIPS to SSIM/PSNR for image agents; nothing is downloaded. Example: --lpips-weights lpips_alex.pt"),
    threads: Optional[int] = _THREADS,
    allow_pickle: bool = _ALLOW_PICKLE,
    strongest_of: List[str] = typer.Option([], "--strongest-of", help="attacks whose lowest mean return per budget is reported with the attack that achieved it (comma-separated specs; with --eps-grid, each at every budget). Example: --strongest-of random,maxdiff,paad:attacker=runs/paad --eps-grid 0.1"),
) -> None:
    """Evaluate an agent clean and under every --threat; print a table, store episodes, write JSON.

    Example: rlgauntlet evaluate --agent zoo:cartpole-ppo --env CartPole-v1 --threat uniform_noise:eps=0.1 --episodes 20 --out cartpole.json
    """
    from rlgauntlet.experiments.evaluate import evaluate as run
    from rlgauntlet.threats.spec import split_spec_list

    strongest = [spec for text in strongest_of for spec in split_spec_list(text)]
    store_path = store or ((out.parent if out else Path(".")) / DEFAULT_STORE_NAME)
    _check_outputs(out, store=store_path)
    _KEPT["note"] = (f"finished episodes are kept in {store_path}; run the same command with --resume to run "
                     "only the missing ones")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict = {}
        report = run(
            agent, env, threat, suite, eps, episodes, seed, n_envs, store_path, eps_grid=eps_grid, resume=resume,
            preset=preset, device=device, kind=kind, vecnormalize=vecnormalize, input_space=input_space,
            precision=precision, deterministic=not stochastic, impact=impact, min_score=min_score,
            action_change_every=action_change_every, perceptual_every=perceptual_every, lpips_weights=lpips_weights,
            on_start=lambda label, total: tasks.__setitem__(label, progress.add_task(label, total=total)),
            on_episode=lambda label, rec: progress.advance(tasks[label]), threads=threads, allow_pickle=allow_pickle,
            strongest_of=strongest,
        )
        for task in tasks.values():
            progress.update(task, completed=episodes)
    data = report.to_dict()
    print_report(data)
    _write_json(out, data, store_path)


@app.command()
def train(
    preset: str = typer.Option(..., help="zoo preset to train. Example: --preset cartpole-ppo"),
    run_dir: Optional[Path] = typer.Option(None, help="checkpoint folder (default runs/PRESET); resumed if it holds one. Example: --run-dir runs/pong"),
    device: str = typer.Option("cpu", help="torch device for training. Example: --device cuda"),
    steps: Optional[int] = typer.Option(None, min=1, help="override the preset's training budget (agent steps). Example: --steps 200000"),
    threads: int = typer.Option(1, min=1, help="torch CPU threads (1 is safe on a busy machine). Example: --threads 2"),
    stop_at_target: bool = typer.Option(True, help="stop when recent training episodes beat the target return. Example: --no-stop-at-target"),
    register: bool = typer.Option(True, help="copy the result into zoo/ and write its manifest entry (20-episode clean return). Example: --no-register"),
    seed: Optional[int] = typer.Option(None, help="override the preset's seed. Example: --seed 3"),
    init_from: Optional[str] = typer.Option(None, "--init-from", help="fine-tune from this agent's weights (zoo:NAME or sb3:PATH.zip). Example: --init-from zoo:cartpole-ppo"),
    threat: Optional[str] = typer.Option(None, help="train under this observation threat, applied after VecNormalize (ε as in evaluation). Example: --threat uniform_noise:eps=0.05"),
    zoo_name: Optional[str] = typer.Option(None, "--zoo-name", help="zoo name of the result (required with --seed, --init-from or --threat). Example: --zoo-name cartpole-ppo-noise"),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="resume from a pickled replay buffer of an earlier version: runs code stored in it, so only for files you trust. Example: --allow-pickle"),
) -> None:
    """Train a zoo agent with its fixed recipe (SB3), with resumable checkpoints.

    Example: rlgauntlet train --preset cartpole-ppo
    """
    from rlgauntlet.training.job import plan_training, train as run_training

    plan = plan_training(preset, run_dir, register, seed, init_from, threat, zoo_name)
    _KEPT["note"] = f"the last checkpoint in {plan.run_dir} is kept; run the same command to resume from it"
    result = run_training(preset, plan=plan, register=register, seed=seed, init_from=init_from, threat=threat,
                          zoo_name=zoo_name, device=device, steps=steps, threads=threads, stop_at_target=stop_at_target,
                          allow_pickle=allow_pickle, log=lambda s: console.print(s), show_progress=console.is_terminal)
    entry = result["zoo_entry"]
    if entry is not None:
        kind = "ensemble" if plan.ensemble else "agent"
        console.print(f"zoo {kind} {result['zoo_name']}: clean return {entry['clean_return']['mean']:.1f} ± "
                      f"{entry['clean_return']['std']:.1f} over 20 episodes")


@app.command("attack-train")
def attack_train(
    method: str = typer.Option(..., help="paad (PA-AD director + gradient actor), sarl (the perturbation learned directly) or robust-sarsa (a smoothed Q function of a continuous-action agent, attacked with MinQ). Example: --method paad"),
    agent: str = typer.Option(..., help="the victim (frozen). Example: --agent zoo:cartpole-dqn"),
    env: str = typer.Option(..., help="Gymnasium id the victim plays. Example: --env CartPole-v1"),
    eps: str = typer.Option(..., help="l-inf budget in the victim's budget space (number or fraction); for robust-sarsa the budget of the final strength check. Example: --eps 0.1"),
    steps: int = typer.Option(..., min=1, help="director training steps (agent steps over all envs); for robust-sarsa the agent transitions Q learns from. Example: --steps 100000"),
    run_dir: Path = typer.Option(..., help="attacker folder (checkpoints, attacker.zip, manifest.json); resumed if it holds a checkpoint. Example: --run-dir runs/paad-cartpole"),
    seed: int = typer.Option(0, help="training seed; also the seed of the final evaluation. Example: --seed 3"),
    variant: Optional[str] = typer.Option(None, help="PA-AD variant: stochastic or deterministic (discrete agents), directional or continuous (continuous agents). Example: --variant deterministic"),
    actor_steps: int = typer.Option(1, min=1, help="PA-AD actor gradient steps (1 = FGSM, the paper's default). Example: --actor-steps 30"),
    lam: float = typer.Option(1.0, min=0.0, callback=_finite_number, help="PA-AD lambda of the cosine term. Example: --lam 0.5"),
    loss: str = typer.Option("hinge", help="deterministic PA-AD actor loss: hinge or ce. Example: --loss ce"),
    eval_episodes: int = typer.Option(20, min=1, help="episodes of the final strength evaluation. Example: --eval-episodes 50"),
    vecnormalize: Optional[Path] = typer.Option(None, help="the victim's VecNormalize statistics file. Example: --vecnormalize agent.vecnormalize.pkl"),
    device: str = typer.Option("cpu", help="torch device. Example: --device cuda"),
    threads: Optional[int] = typer.Option(None, min=1, help="torch CPU threads (default: the thread policy). Example: --threads 2"),
    sarsa_eps: float = typer.Option(0.02, min=0.0, callback=_finite_number, help="robust-sarsa: radius of the robustness regulariser on [x, a]. Example: --sarsa-eps 0.05"),
    sarsa_reg: float = typer.Option(0.1, min=0.0, callback=_finite_number, help="robust-sarsa: weight of the robustness regulariser. Example: --sarsa-reg 1.0"),
    checkpoint_every: Optional[int] = typer.Option(None, min=1, help="director steps between resumable checkpoints (default: a tenth of --steps, at least 10000). Example: --checkpoint-every 20000"),
    allow_pickle: bool = _ALLOW_PICKLE,
) -> None:
    """Train a learned attacker (PA-AD, SA-RL, Robust Sarsa) against an agent and measure it.

    Example: rlgauntlet attack-train --method paad --agent zoo:cartpole-dqn --env CartPole-v1 --eps 0.1 --steps 50000 --run-dir runs/paad-dqn
    """
    from rlgauntlet.experiments.attackers import train_attacker
    from rlgauntlet.threats.spec import parse_value

    budget = parse_value(eps, f"eps={eps}", "eps")  # a number or a fraction; the library checks the rest
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise UserError(f"--eps {eps}: give a positive number or fraction, e.g. --eps 0.1 or --eps 1/255")
    check_run_dir(run_dir)
    _KEPT["note"] = f"the last checkpoint in {run_dir} is kept; run the same command to resume from it"
    manifest = train_attacker(agent, env, method, budget, steps, run_dir, seed=seed, variant=variant,
                              actor_steps=actor_steps, lam=lam, loss=loss, eval_episodes=eval_episodes, device=device,
                              vecnormalize=vecnormalize, threads=threads, log=lambda s: console.print(s),
                              show_progress=console.is_terminal, sarsa_eps=sarsa_eps, sarsa_reg=sarsa_reg,
                              checkpoint_every=checkpoint_every, allow_pickle=allow_pickle)
    spec = f"robust_sarsa:q={run_dir},eps={eps}" if method == "robust-sarsa" else f"{method}:attacker={run_dir},eps={eps}"
    console.print(f"wrote {run_dir}; use it with --threat {spec}  (strength: {manifest['strength']['attacked_mean']:.1f})")


@app.command("dynamics-train")
def dynamics_train(
    agent: str = typer.Option(..., help="the victim whose behaviour half the data comes from (continuous actions). Example: --agent zoo:dmc-walker-stand-sac"),
    env: str = typer.Option(..., help="Gymnasium id. Example: --env dm_control/walker-stand-v0"),
    samples: int = typer.Option(..., min=1, help="transitions (s, a, s') to learn from, half from the agent and half from a uniform random policy. Example: --samples 200000"),
    run_dir: Path = typer.Option(..., help="model folder (data.npz, checkpoint.pt, model.pt, manifest.json); resumed if it holds a run with the same settings. Example: --run-dir runs/dyn-walker"),
    epochs: int = typer.Option(30, min=1, help="passes over the training transitions. Example: --epochs 50"),
    hidden: int = typer.Option(1000, min=1, help="units per hidden layer (the paper's 1000). Example: --hidden 256"),
    layers: int = typer.Option(4, min=1, help="hidden layers (the paper's 4). Example: --layers 3"),
    seed: int = typer.Option(0, help="seed of the data episodes (seed + k) and of training. Example: --seed 1"),
    n_envs: int = typer.Option(4, min=1, help="envs stepped side by side while collecting. Example: --n-envs 8"),
    vecnormalize: Optional[Path] = typer.Option(None, help="the agent's VecNormalize statistics file. Example: --vecnormalize agent.vecnormalize.pkl"),
    threads: Optional[int] = typer.Option(None, min=1, help="torch CPU threads (default: the thread policy). Example: --threads 2"),
    allow_pickle: bool = _ALLOW_PICKLE,
) -> None:
    """Learn the one-step dynamics model f(s, a) -> s' that model_obs / model_action plan with.

    Example: rlgauntlet dynamics-train --agent zoo:dmc-cartpole-balance-sac --env dm_control/cartpole-balance-v0 --samples 100000 --run-dir runs/dyn-cartpole
    """
    from rlgauntlet.common.threads import thread_policy
    from rlgauntlet.envs import make_env
    from rlgauntlet.training.dynamics import learn_dynamics

    check_run_dir(run_dir)
    victim, preset = _load_for_env(agent, env, None, "cpu", None, vecnormalize, allow_pickle=allow_pickle)
    _KEPT["note"] = f"the collected data and the last epoch's checkpoint in {run_dir} are kept; run the same command to resume"
    with thread_policy(threads):
        manifest = learn_dynamics(victim, env, lambda: make_env(env, preset), samples, run_dir, seed=seed, hidden=hidden,
                                  layers=layers, epochs=epochs, n_envs=n_envs, log=lambda s: console.print(s))
    errors = ", ".join(f"{k}-step {v['mse']:.3g}" for k, v in manifest["k_step_error"].items() if v)
    console.print(f"wrote {run_dir}: test MSE {errors}; use it with --threat model_obs:model={run_dir},eps=...,target=...")


@app.command()
def plot(
    store: Path = typer.Option(Path(DEFAULT_STORE_NAME), help="results store to read. Example: --store results/rlgauntlet-results.sqlite"),
    out: Path = typer.Option(Path("reward_vs_eps.png"), help="PNG to write (the curve data go beside it as JSON). Example: --out curves.png"),
    env: Optional[str] = typer.Option(None, help="only this env id. Example: --env CartPole-v1"),
    agent: Optional[str] = typer.Option(None, help="only agents whose name contains this. Example: --agent cartpole-dqn"),
) -> None:
    """Draw reward-vs-ε curves from the store (one curve per threat, one panel per agent and env).

    Example: rlgauntlet plot --store results/rlgauntlet-results.sqlite --out curves.png
    """
    from rlgauntlet.experiments.store import ResultsStore
    from rlgauntlet.report.curves import budget_curves, plot_curves

    if not store.is_file():
        what = "is a directory" if store.is_dir() else "not found"
        raise UserError(f"results store {store} {what}; give --store the file that rlgauntlet evaluate wrote")
    _check_png(out, store)
    curves = budget_curves(ResultsStore(store), env=env, agent=agent)
    path = plot_curves(curves, out)
    data = [{"agent": a, "env": e, "clean": g["clean"], "curves": {t: [dict(zip(("eps", "return_mean", "return_sem", "episodes"), p)) for p in pts] for t, pts in g["curves"].items()}}
            for (a, e), g in sorted(curves.items())]
    write_json(path.with_suffix(".json"), {"curves": data})
    console.print(f"wrote {path} and {path.with_suffix('.json')}")


@app.command()
def spectrum(
    agent: str = typer.Option(..., help="the agent whose visited states are analysed. Example: --agent zoo:pong-ppo"),
    env: str = typer.Option(..., help="Gymnasium id (an image env). Example: --env PongNoFrameskip-v4"),
    threat: List[str] = typer.Option(..., help="threat spec, repeatable. Example: --threat rotation:degrees=3"),
    steps: int = typer.Option(256, min=1, help="clean agent steps whose observations are analysed. Example: --steps 512"),
    seed: int = typer.Option(0, min=0, help="episode seed. Example: --seed 1"),
    out: Path = typer.Option(Path("spectrum.png"), help="PNG to write; the numbers go beside it as JSON. Example: --out pong_spectrum.png"),
    preset: Optional[str] = _PRESET, device: str = _DEVICE, kind: Optional[str] = _KIND,
    vecnormalize: Optional[Path] = _VECNORMALIZE, input_space: Optional[str] = _INPUT_SPACE,
    precision: str = _PRECISION, threads: Optional[int] = _THREADS, allow_pickle: bool = _ALLOW_PICKLE,
) -> None:
    """Power spectrum of clean vs perturbed observations and the energy change per frequency band.

    As the Daylight paper's Figure 1, on the newest frame of the states the clean agent visits.

    Example: rlgauntlet spectrum --agent zoo:pong-ppo --env PongNoFrameskip-v4 --threat rotation:degrees=3 --threat jpeg:quality=10
    """
    from rlgauntlet.experiments.spectrum import spectrum as run_spectrum
    from rlgauntlet.metrics.spectrum import plot_spectrum

    _check_png(out)
    agent_spec = _agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle)
    report = run_spectrum(agent_spec, env, threat, steps, seed, threads=threads)
    plot_spectrum(report, out)
    write_json(out.with_suffix(".json"), report)
    table = Table(title=f"energy change vs original, {report['steps']} states")
    for col in ("threat", "DC", "low", "mid", "high"):
        table.add_column(col, justify="left" if col == "threat" else "right")
    for spec, t in report["threats"].items():
        rc = t["relative_change"]
        table.add_row(spec, *[f"{rc[b]:+.1%}" if rc[b] is not None else "-" for b in ("dc", "low", "mid", "high")])
    out_console.print(table)
    console.print(f"wrote {out} and {out.with_suffix('.json')}")


@app.command()
def calibrate(
    agent: str = typer.Option(..., help="the agent to calibrate against. Example: --agent zoo:pong-ppo"),
    env: str = typer.Option(..., help="Gymnasium id. Example: --env PongNoFrameskip-v4"),
    threat: str = typer.Option(..., help="threat (spec without the searched parameter). Example: --threat rotation"),
    target_impact: float = typer.Option(..., callback=_finite_number, help="impact to reach, in (0, 1]. Example: --target-impact 0.9"),
    param: Optional[str] = typer.Option(None, help="parameter to search (default: the threat's severity). Example: --param degrees"),
    low: Optional[float] = typer.Option(None, callback=_finite_number, help="harmless end of the range. Example: --low 0"),
    high: Optional[float] = typer.Option(None, callback=_finite_number, help="strongest end of the range. Example: --high 30"),
    iterations: int = typer.Option(8, min=1, help="bisection steps. Example: --iterations 10"),
    episodes: int = typer.Option(10, min=2, help="episodes per probe. Example: --episodes 20"),
    seed: int = typer.Option(0, min=0, help="evaluation seed. Example: --seed 1"),
    n_envs: int = typer.Option(4, "--n-envs", min=1, help="envs side by side. Example: --n-envs 8"),
    store: Path = typer.Option(Path(DEFAULT_STORE_NAME), help="results store (probes are cached there). Example: --store runs.sqlite"),
    out: Optional[Path] = typer.Option(None, help="write the search as JSON. Example: --out rotation_calibration.json"),
    preset: Optional[str] = _PRESET, device: str = _DEVICE, kind: Optional[str] = _KIND,
    vecnormalize: Optional[Path] = _VECNORMALIZE, input_space: Optional[str] = _INPUT_SPACE,
    precision: str = _PRECISION, threads: Optional[int] = _THREADS, allow_pickle: bool = _ALLOW_PICKLE,
) -> None:
    """Find the smallest severity of a threat that reaches a target impact.

    Bisection over the threat's severity, with a 95% confidence check on each decision.

    Example: rlgauntlet calibrate --agent zoo:pong-ppo --env PongNoFrameskip-v4 --threat rotation --target-impact 0.9
    """
    from rlgauntlet.experiments.calibrate import calibrate_agent, search_space

    if not 0 < target_impact <= 1:
        raise UserError(f"--target-impact {target_impact} must be in (0, 1]")
    _check_outputs(out, store=store)
    _KEPT["note"] = f"finished probes are kept in {store}; run the same command again to reuse them"
    name = threat.partition(":")[0]
    space = search_space(threat, param, low, high)
    agent_spec = _agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle)
    result = calibrate_agent(
        agent_spec, env, threat, target_impact, store, space, iterations, episodes, seed, n_envs, threads=threads,
        on_probe=lambda s: console.print(f"  {s['spec']}: return {s['return_mean']:.4g} ± {s['return_sem']:.2g}"),
    )
    table = Table(title=f"{name}: impact per probe (target {target_impact})")
    for col in ("value", "return", "impact", "± 95%"):
        table.add_column(col, justify="right")
    for p in sorted(result["probes"], key=lambda p: p["value"]):
        table.add_row(str(p["value"]), _fmt(p["return_mean"]), f"{p['impact']:.3f}", f"{1.96 * p['impact_se']:.3f}")
    out_console.print(table)
    if result["reached"]:
        out_console.print(f"smallest {result['param']} reaching impact {target_impact}: {result['severity']} "
                          f"(impact {result['impact']:.3f}, 95% [{result['ci95'][0]:.3f}, {result['ci95'][1]:.3f}]); {result['message']}")
    else:
        out_console.print(result["message"])
    if out is not None:
        write_json(out, result)


@app.command()
def certify(
    agent: str = typer.Option(..., help="zoo:NAME | sb3:PATH.zip[:ALGO] | torchscript:PATH. Example: --agent zoo:cartpole-dqn"),
    env: str = typer.Option(..., help="Gymnasium id. Example: --env CartPole-v1"),
    eps: Optional[str] = typer.Option(None, help="ℓ∞ budget in the agent's budget space (fractions allowed). Example: --eps 1/255"),
    eps_grid: Optional[str] = typer.Option(None, "--eps-grid", help="several budgets. Example: --eps-grid 0.02,0.05,0.1"),
    episodes: int = typer.Option(20, min=1, help="episodes per budget (GWC and the clean trajectory for ACR). Example: --episodes 20"),
    seed: int = typer.Option(0, min=0, help="evaluation seed; episode k uses seed+k. Example: --seed 1"),
    n_envs: int = typer.Option(4, "--n-envs", min=1, help="envs side by side. Example: --n-envs 8"),
    awc_max_nodes: int = typer.Option(0, "--awc-max-nodes", min=0, help="also search the absolute worst case (AWC) with this many env steps per episode (0: no search). Example: --awc-max-nodes 5000"),
    awc_horizon: Optional[int] = typer.Option(None, "--awc-horizon", min=1, help="cap episodes at this many steps (for AWC and GWC alike). Example: --awc-horizon 10"),
    out: Optional[Path] = typer.Option(None, help="write the certification as JSON. Example: --out certified.json"),
    store: Path = typer.Option(Path(DEFAULT_STORE_NAME), help="results store (certification runs). Example: --store runs.sqlite"),
    preset: Optional[str] = _PRESET, device: str = _DEVICE, kind: Optional[str] = _KIND,
    vecnormalize: Optional[Path] = _VECNORMALIZE, input_space: Optional[str] = _INPUT_SPACE,
    precision: str = _PRECISION, threads: Optional[int] = _THREADS, allow_pickle: bool = _ALLOW_PICKLE,
) -> None:
    """Certified figures from interval bounds: Greedy Worst-Case Reward (GWC), action certification rate (ACR), optionally the Absolute Worst-Case Reward (AWC).

    Example: rlgauntlet certify --agent zoo:cartpole-dqn --env CartPole-v1 --eps-grid 0.02,0.05,0.1 --episodes 20
    """
    from rlgauntlet.experiments.certify import certify as run_certify

    _check_outputs(out, store=store)
    _KEPT["note"] = f"finished budgets are kept in {store}"
    agent_spec = _agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle)
    result = run_certify(agent_spec, env, eps, eps_grid, episodes, seed, n_envs, store, awc_max_nodes, awc_horizon,
                         threads=threads,
                         on_row=lambda r: console.print(f"  ε = {r['eps']}: done in {r['wall_seconds']:.1f} s"))
    table = Table(title=f"certified figures, {episodes} episodes, ε in {result['rows'][0]['budget_space']} units")
    discrete = "gwc" in result["rows"][0]
    columns = ["ε", "nominal"] + (["GWC", "±sem", "ACR", "score gap", "certified margin"] if discrete
                                  else ["certified action deviation"])
    columns += ["AWC (finished)"] if awc_max_nodes else []
    for col in columns:
        table.add_column(col, justify="right")
    for r in result["rows"]:
        row = [r["eps"], _fmt(r["nominal"])]
        row += [_fmt(r["gwc"]["return_mean"]), _fmt(r["gwc"]["return_sem"]), f"{r['acr']:.1%}",
                f"{r['score_gap_median']:.3g}", f"{r['certified_margin_median']:.3g}"] if discrete else \
            [_fmt(r["certified_action_deviation"])]
        if awc_max_nodes:
            awc = r["awc"]
            row.append(f"{'-' if awc['mean_finished'] is None else _fmt(awc['mean_finished'])} "
                       f"({sum(awc['finished'])}/{episodes})")
        table.add_row(*row)
    out_console.print(table)
    if out is not None:
        write_json(out, result)
        console.print(f"wrote {out} (runs stored in {store})")


def _ood_progress():
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True)


def _ood_callbacks(progress):
    tasks: dict = {}
    return (lambda label, total: tasks.__setitem__(label, progress.add_task(label, total=total)),
            lambda label, rec: progress.advance(tasks[label]))


def _ood_common(out: Optional[Path], store: Optional[Path]) -> Path:
    store_path = store or ((out.parent if out else Path(".")) / DEFAULT_STORE_NAME)
    _check_outputs(out, store=store_path)
    _KEPT["note"] = (f"finished episodes are kept in {store_path}; run the same command with --resume to run "
                     "only the missing ones")
    return store_path


def _write_json(out: Optional[Path], data: dict, store_path: Path) -> None:
    if out is not None:
        write_json(out, data)
        console.print(f"wrote {out} (episodes stored in {store_path})")


_OOD_AGENT = typer.Option(..., help="zoo:NAME | sb3:PATH.zip[:ALGO] | torchscript:PATH. Example: --agent zoo:cartpole-dqn-ensemble")
_OOD_ENV = typer.Option(..., help="Gymnasium id. Example: --env CartPole-v1")
_OOD_SUITE = typer.Option(None, help="shift grid: ood-cartpole, ood-pendulum or ood-pong. Example: --suite ood-cartpole")
_OOD_SHIFT = typer.Option([], help="a shift (threat spec), repeatable, instead of or beside --suite. Example: --shift physics:param=length,scale=4")
_OOD_EPISODES = typer.Option(10, min=1, help="episodes per set; episode k uses seed SEED+k. Example: --episodes 20")
_OOD_SEED = typer.Option(0, min=0, help="evaluation seed. Example: --seed 100")
_OOD_NENVS = typer.Option(4, "--n-envs", min=1, help="envs stepped side by side (results do not depend on it). Example: --n-envs 8")
_OOD_FAIL = typer.Option(0.5, callback=_finite_number, help="a shift fails when (R − R_random)/(R_clean − R_random) is below this. Example: --fail-below 0.3")
_OOD_OUT = typer.Option(None, help="write the JSON result here. Example: --out results/ood.json")
_OOD_STORE = typer.Option(None, help=f"SQLite results store (default {DEFAULT_STORE_NAME} beside --out, or here). Example: --store runs.sqlite")
_OOD_RESUME = typer.Option(False, help="continue the latest matching runs in the store. Example: --resume")


@ood_app.command("scan")
def ood_scan_command(
    agent: str = _OOD_AGENT, env: str = _OOD_ENV, suite: Optional[str] = _OOD_SUITE, shift: List[str] = _OOD_SHIFT,
    episodes: int = _OOD_EPISODES, seed: int = _OOD_SEED, n_envs: int = _OOD_NENVS, fail_below: float = _OOD_FAIL,
    out: Optional[Path] = _OOD_OUT, store: Optional[Path] = _OOD_STORE, resume: bool = _OOD_RESUME,
    threads: Optional[int] = _THREADS, preset: Optional[str] = _PRESET, kind: Optional[str] = _KIND,
    vecnormalize: Optional[Path] = _VECNORMALIZE, input_space: Optional[str] = _INPUT_SPACE,
    precision: str = _PRECISION, device: str = _DEVICE, allow_pickle: bool = _ALLOW_PICKLE,
) -> None:
    """Evaluate an agent over a shift grid and mark the shifts where it fails (step 1 of the protocol).

    Example: rlgauntlet ood scan --agent zoo:cartpole-dqn --env CartPole-v1 --suite ood-cartpole
    """
    from rlgauntlet.experiments.ood import ood_scan

    store_path = _ood_common(out, store)
    with _ood_progress() as progress:
        on_start, on_episode = _ood_callbacks(progress)
        spec = _agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle)
        result = ood_scan(spec, env, suite, shift, episodes, seed, n_envs, store_path, resume=resume,
                          fail_below=fail_below, threads=threads, on_start=on_start, on_episode=on_episode)
    table = Table(title=f"{agent} on {env}: clean {result['clean']['return_mean']:.4g}, random policy "
                        f"{result['random_policy']['return_mean']:.4g}, fails below {fail_below:g} normalised")
    for col in ("shift", "return", "±sem", "normalised", "fails"):
        table.add_column(col, justify="left" if col == "shift" else "right")
    for row in result["rows"]:
        norm = row["normalised_return"]
        table.add_row(row["spec"], _fmt(row["return_mean"]), _fmt(row["return_sem"]),
                      "-" if norm is None else f"{norm:.2f}", "FAILS" if row["fails"] else "")
    out_console.print(table)
    console.print(f"{len(result['failing'])} of {len(result['rows'])} shifts fail")
    _write_json(out, result, store_path)


@ood_app.command("bench")
def ood_bench_command(
    agent: str = _OOD_AGENT, env: str = _OOD_ENV, suite: Optional[str] = _OOD_SUITE, shift: List[str] = _OOD_SHIFT,
    trials: int = typer.Option(5, min=1, help="trials per shift (fresh episodes each). Example: --trials 5"),
    episodes: int = _OOD_EPISODES, seed: int = _OOD_SEED, n_envs: int = _OOD_NENVS,
    reduce: str = typer.Option("mean", help="per-step score over actions: mean or max of the per-action std. Example: --reduce max"),
    score_of: str = typer.Option("policy", "--score-of", help="what the spread is measured on: policy (the agent's output: Q-values, action) or critic (TD3/DDPG/SAC: the critic's value of the action taken). Example: --score-of critic"),
    fail_below: Optional[float] = typer.Option(None, callback=_finite_number, help="with --suite: a shift is benchmarked when (R − R_random)/(R_clean − R_random) is below this (default 0.5). Example: --fail-below 0.3"),
    out: Optional[Path] = _OOD_OUT, store: Optional[Path] = _OOD_STORE,
    resume: bool = _OOD_RESUME, threads: Optional[int] = _THREADS,
    plot: Optional[Path] = typer.Option(None, help="write the per-step score plot (PNG) here. Example: --plot results/ood.png"),
    preset: Optional[str] = _PRESET, kind: Optional[str] = _KIND, vecnormalize: Optional[Path] = _VECNORMALIZE,
    input_space: Optional[str] = _INPUT_SPACE, precision: str = _PRECISION, device: str = _DEVICE,
    allow_pickle: bool = _ALLOW_PICKLE,
) -> None:
    """AUROC and FPR at 95% TPR of the agent's own uncertainty, nominal against each failing shift.

    Example: rlgauntlet ood bench --agent zoo:cartpole-dqn-ensemble --env CartPole-v1 --suite ood-cartpole --trials 5
    """
    from rlgauntlet.experiments.ood import FAIL_BELOW, ood_bench

    if shift and fail_below is not None:
        raise UserError("--fail-below chooses which shifts of --suite are benchmarked; with --shift every given "
                        "shift is: drop --fail-below")
    store_path = _ood_common(out, store)
    _check_png(plot, store)
    with _ood_progress() as progress:
        on_start, on_episode = _ood_callbacks(progress)
        spec = _agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle)
        result = ood_bench(spec, env, suite, shift, trials, episodes, seed, n_envs, store_path, reduce=reduce,
                           score_of=score_of, resume=resume,
                           fail_below=FAIL_BELOW if fail_below is None else fail_below, threads=threads,
                           on_start=on_start, on_episode=on_episode)
    table = Table(title=f"{agent} on {env}: {result['detector']} on the {score_of} ({result['reduce']} over actions), "
                        f"{trials} trials × {episodes} episodes")
    for col in ("shift", "AUROC mean ± std", "best", "FPR@95TPR", "OOD return"):
        table.add_column(col, justify="left" if col == "shift" else "right")
    for row in result["rows"]:
        a, f = row["auroc"], row["fpr95"]
        table.add_row(row["spec"], f"{a['mean']:.3f} ± {a['std']:.3f}", f"{a['best']:.3f}", f"{f['mean']:.3f}",
                      _fmt(sum(row["return_mean"]) / len(row["return_mean"])))
    out_console.print(table)
    if not result["rows"]:
        console.print("the agent failed none of the shifts: nothing to detect")
    if plot is not None and result["rows"]:
        from rlgauntlet.report.ood import plot_ood_scores

        console.print(f"wrote {plot_ood_scores(result, plot)}")
    _write_json(out, result, store_path)


@zoo_app.command("list")
def zoo_list() -> None:
    """List the zoo agents with their env, algorithm and clean return.

    Example: rlgauntlet zoo list
    """
    from rlgauntlet.zoo import load_manifest

    table = Table(title="rlgauntlet zoo")
    for col in ("name", "env", "algorithm", "clean return (20 ep.)", "target", "steps", "file"):
        table.add_column(col)
    for name, e in load_manifest().items():
        cr = e.get("clean_return", {})
        table.add_row(name, e["env"], e["algorithm"], f"{cr.get('mean', float('nan')):.1f} ± {cr.get('std', float('nan')):.1f}",
                      str(cr.get("target", "")), str(e.get("total_timesteps", "")),
                      e.get("file") or f"{len(e.get('members', []))} members")
    out_console.print(table)


@zoo_app.command("export")
def zoo_export(
    name: str = typer.Argument(..., help="zoo agent name (see `rlgauntlet zoo list`). Example: cartpole-ppo"),
    out: Path = typer.Option(..., help="the SB3 zip to write (never overwritten). Example: --out cartpole-ppo.zip"),
    member: Optional[int] = typer.Option(None, help="which member of an ensemble agent. Example: --member 0"),
) -> None:
    """Write a zoo agent as a zip that Stable-Baselines3's own load() reads (and its
    VecNormalize statistics as OUT.vecnormalize.pkl when it has them).

    Example: rlgauntlet zoo export cartpole-ppo --out cartpole-ppo.zip
    """
    from rlgauntlet.training.export import export_sb3

    for path in export_sb3(name, out, member):
        console.print(f"wrote {path}")


@app.command()
def sweep(
    spec: Path = typer.Argument(..., help="YAML sweep file (see docs/sweeps.md). Example: sweeps/zoo.yaml"),
    store: Path = typer.Option(..., help="SQLite results store; re-running the same sweep on it runs only missing episodes. Example: --store sweep.sqlite"),
    executor: str = typer.Option("local", help="local (worker processes here) or ray (Ray tasks). Example: --executor ray"),
    address: Optional[str] = typer.Option(None, help="address of a running Ray cluster (default: start a local head with --workers CPUs). Example: --address 10.0.0.5:6379"),
    workers: int = typer.Option(1, min=1, help="worker processes (local) or CPUs of the local Ray head. Example: --workers 2"),
    out: Optional[Path] = typer.Option(None, help="write one report per agent, env and seed as JSON. Example: --out sweep.json"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would run (runs, episodes stored and missing) and write nothing. Example: --dry-run"),
    allow_pickle: bool = typer.Option(False, "--allow-pickle", help="unpickle the sweep's SB3 agent files as SB3 does: runs code stored in them, so only for files you trust. Example: --allow-pickle"),
) -> None:
    """Run a sweep (agents × envs × threats × budgets × seeds) in episode chunks; always resumes.

    Example: rlgauntlet sweep sweeps/zoo.yaml --store sweep.sqlite --workers 2
    """
    from rlgauntlet.experiments.sweep import load_sweep_file, preview_sweep, run_sweep

    from rlgauntlet.experiments.store import check_store_location
    from rlgauntlet.experiments.sweep import EXECUTORS

    if executor not in EXECUTORS:
        raise UserError(f"--executor {executor!r} is unknown; use one of {', '.join(EXECUTORS)}")
    check_store_location(store)
    _check_outputs(out, store=store)
    sweep_spec = load_sweep_file(spec)
    if allow_pickle:
        sweep_spec.agents = [a.model_copy(update={"allow_pickle": True}) for a in sweep_spec.agents]
    if dry_run:
        plan = preview_sweep(sweep_spec, store)
        table = Table(title=f"sweep {sweep_spec.name} against {store} (dry run: nothing written)")
        for col in ("agent", "env", "seed", "runs", "episodes", "stored", "to run"):
            table.add_column(col, justify="left" if col in ("agent", "env") else "right")
        for row in plan.pair_counts():
            table.add_row(row["agent"], row["env"], str(row["seed"]), str(row["runs"]), str(row["episodes"]),
                          str(row["stored"]), str(row["missing"]))
        out_console.print(table)
        console.print(f"{plan.missing_episodes} of {plan.total_episodes} episodes to run in {len(plan.chunks)} chunks")
        return
    _KEPT["note"] = (f"finished episodes are kept in {store}; run the same command again to run only the missing ones")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"sweep {sweep_spec.name}", total=None)

        def planned(plan) -> None:
            progress.update(task, total=plan.total_episodes, completed=plan.total_episodes - plan.missing_episodes)
            console.print(f"{len(plan.pairs)} agent/env/seed combinations, "
                          f"{sum(len(p.cells) for p in plan.pairs)} runs, {plan.total_episodes} episodes, "
                          f"{plan.missing_episodes} still to run in {len(plan.chunks)} chunks ({executor}, "
                          f"{workers} worker{'s' if workers > 1 else ''})")

        result = run_sweep(sweep_spec, store, executor=executor, workers=workers, address=address, on_plan=planned,
                           on_chunk=lambda chunk, records: progress.advance(task, len(records)))
    for report in result["reports"]:
        print_report(report)
    console.print(f"ran {result['ran']} of {result['episodes']} episodes in {result['seconds']:.1f} s; "
                  f"all stored in {store}")
    if out is not None:
        write_json(out, result)
        console.print(f"wrote {out}")


@app.command()
def report(
    store: List[Path] = typer.Option(..., help="results store(s) to report on, repeatable. Example: --store sweep.sqlite --store radial.sqlite"),
    out: Path = typer.Option(Path("rlgauntlet-report.html"), help="the HTML file to write (self-contained). Example: --out report.html"),
    agent: List[str] = typer.Option([], help="only agents whose name contains this text, repeatable. Example: --agent cartpole"),
    title: str = typer.Option("rlgauntlet robustness report", help="the page title. Example: --title 'CartPole agents'"),
) -> None:
    """Render a robustness report card (HTML, figures embedded) from results stores.

    Example: rlgauntlet report --store sweep.sqlite --out report.html
    """
    from rlgauntlet.report.html import render_report

    for one in store:
        _check_outputs(out, store=one)
    _KEPT["note"] = "no report was written"
    path = render_report(store, out, agents=agent or None, title=title)
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


@app.command()
def version() -> None:
    """Print the rlgauntlet version."""
    out_console.print(rlgauntlet.__version__)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (a BaseException, so that no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: what an interrupted command keeps and how to go on, set by the command once it knows
_KEPT = {"note": "nothing was written"}


def _on_signal(signum, frame) -> None:
    raise Interrupted(signum)


def _check_outputs(out: Optional[Path], store: Optional[Path] = None, option: str = "--out") -> None:
    """Refuse, before any work, an output that cannot be written, is the store, or is a file
    rlgauntlet did not write (see ``common.outputs``)."""
    check_output(out, option, protect=[store])


def _check_png(out: Optional[Path], store: Optional[Path] = None, option: str = "--out") -> None:
    """A plot: a .png, with its numbers going beside it as .json; both are checked."""
    if out is None:
        return
    if out.suffix.lower() != ".png":
        raise UserError(f"{option} {out}: plots are written as PNG; give a name ending in .png, "
                        f"e.g. {option} {out.with_suffix('.png').name}")
    check_output(out, option, protect=[store])
    check_output(out.with_suffix(".json"), f"{option} (its numbers, beside the plot)", protect=[store])


def main() -> None:
    """Entry point: run the app; user errors are one stderr line and exit status 2; SIGINT and
    SIGTERM exit 130 and 143 saying what was kept and how to resume."""
    import signal

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        rc = app(standalone_mode=False)
    except UserError as exc:
        print(f"rlgauntlet: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        name = signal.Signals(signum).name
        print(f"rlgauntlet: interrupted by {name}; {_KEPT['note']}", file=sys.stderr)
        sys.exit(128 + signum)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print(f"rlgauntlet: interrupted; {_KEPT['note']}", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: bad option value, missing option
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if not message.strip():  # a group called without a command: its help is printed above
            message = "give a command; they are listed above"
        print(f"rlgauntlet: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
