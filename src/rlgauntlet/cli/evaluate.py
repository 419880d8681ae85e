"""``rlgauntlet evaluate``, ``plot`` and ``report``: evaluations and what is drawn from the store."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from rlgauntlet.cli.common import (agent_help, app, console, DEFAULT_STORE_NAME, print_report, PRESET, KIND, VECNORMALIZE,
                                   INPUT_SPACE, PRECISION, DEVICE, ALLOW_PICKLE, OTHER_ENV, THREADS, write_result, KEPT,
                                   check_outputs, check_png, finite_number, agent_spec)
from rlgauntlet.common.outputs import write_json
from rlgauntlet.errors import UserError


@app.command()
def evaluate(
    agent: str = typer.Option(..., help=agent_help("zoo:cartpole-ppo")),
    env: str = typer.Option(..., help="Gymnasium id; the preset follows from it. Example: --env PongNoFrameskip-v4"),
    threat: List[str] = typer.Option([], help="threat spec, repeatable. Example: --threat uniform_noise:eps=1/255,p=0.5"),
    episodes: int = typer.Option(10, min=1, help="episodes per evaluation; episode k uses seed SEED+k. Example: --episodes 20"),
    seed: int = typer.Option(0, min=0, help="evaluation seed. Example: --seed 100"),
    n_envs: int = typer.Option(4, "--n-envs", min=1, help="envs stepped side by side (the same episodes to the last bits of a batched forward pass; a chaotic env can amplify those, so reproduce a number with the n-envs that made it, and a board's with --chunked --n-envs 5). Example: --n-envs 8"),
    chunked: bool = typer.Option(False, "--chunked", help="run the episodes --n-envs at a time, each group to its end before the next starts, as the gauntlet runs its chunks (with --n-envs 5): a board's episodes to the last bit. Example: --chunked --n-envs 5"),
    device: str = DEVICE,
    out: Optional[Path] = typer.Option(None, help="write the JSON report here. Example: --out results/pong.json"),
    store: Optional[Path] = typer.Option(None, help=f"SQLite results store (default {DEFAULT_STORE_NAME} beside --out, or here). Example: --store runs.sqlite"),
    resume: bool = typer.Option(False, help="continue the latest matching runs in the store, running only missing episodes. Example: --resume"),
    preset: Optional[str] = PRESET,
    kind: Optional[str] = KIND,
    vecnormalize: Optional[Path] = VECNORMALIZE,
    input_space: Optional[str] = INPUT_SPACE,
    stochastic: bool = typer.Option(False, help="sample actions instead of acting greedily. Example: --stochastic"),
    precision: str = PRECISION,
    suite: List[str] = typer.Option([], help="add a named threat suite: natural (Daylight perturbations and common corruptions at default severities) adversarial (Random, FGSM, PGD-10, Momentum, MinQ, MaxDiff at --eps), certified (GWC at --eps) or an OOD shift grid (ood-cartpole, ood-pendulum, ood-pong, ood-minatar). Example: --suite natural"),
    eps: Optional[str] = typer.Option(None, help="budget of --suite, in the agent's budget space (fractions allowed). Example: --eps 2/255"),
    eps_grid: Optional[str] = typer.Option(None, "--eps-grid", help="evaluate every threat without eps (and every suite) at each budget. Example: --eps-grid 0,1/255,2/255,3/255 --threat pgd:objective=minbest"),
    impact: bool = typer.Option(True, help="compute impact against the argmin agent (discrete agents; cached in the store). Example: --no-impact"),
    min_score: Optional[float] = typer.Option(None, callback=finite_number, help="fixed minimum score for the generalized impact (default: -21 Pong, 0 other Atari). Example: --min-score 0"),
    action_change_every: int = typer.Option(1, min=1, help="compare with the clean action on every k-th step only (saves a network call per perturbed step; the rate becomes an estimate). Example: --action-change-every 10"),
    perceptual_every: int = typer.Option(10, min=0, help="measure SSIM/PSNR (and LPIPS) of image perturbations on every k-th step of an episode; 0 never (SSIM of 8 Pong frame stacks costs about two clean batched steps). Example: --perceptual-every 0"),
    lpips_weights: Optional[Path] = typer.Option(None, help="LPIPS (AlexNet) weights to add LPIPS to SSIM/PSNR for image agents; nothing is downloaded. Example: --lpips-weights lpips_alex.pt"),
    threads: Optional[int] = THREADS,
    allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
    strongest_of: List[str] = typer.Option([], "--strongest-of", help="attacks whose lowest mean return per budget is reported with the attack that achieved it (comma-separated specs; with --eps-grid, each at every budget). Example: --strongest-of random,maxdiff,paad:attacker=runs/paad --eps-grid 0.1"),
) -> None:
    """Evaluate an agent clean and under every --threat; print a table, store episodes, write JSON.

    Example: rlgauntlet evaluate --agent zoo:cartpole-ppo --env CartPole-v1 --threat uniform_noise:eps=0.1 --episodes 20 --out cartpole.json
    """
    from rlgauntlet.experiments.evaluate import evaluate as run
    from rlgauntlet.threats.spec import split_spec_list

    strongest = [spec for text in strongest_of for spec in split_spec_list(text)]
    store_path = store or ((out.parent if out else Path(".")) / DEFAULT_STORE_NAME)
    check_outputs(out, store=store_path, kind="evaluation")
    KEPT["note"] = (f"finished episodes are kept in {store_path}; run the same command with --resume to run "
                     "only the missing ones")
    spec = agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle, other_env)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict = {}
        report = run(
            spec, env, threat, suite, eps, episodes, seed, n_envs, store_path, eps_grid=eps_grid, resume=resume,
            deterministic=not stochastic, impact=impact, min_score=min_score,
            action_change_every=action_change_every, perceptual_every=perceptual_every, lpips_weights=lpips_weights,
            on_start=lambda label, total: tasks.__setitem__(label, progress.add_task(label, total=total)),
            on_episode=lambda label, rec: progress.advance(tasks[label]), threads=threads, strongest_of=strongest,
            chunked=chunked,
        )
        for task in tasks.values():
            progress.update(task, completed=episodes)
    data = report.to_dict()
    print_report(data)
    write_result(out, data, store_path, kind="evaluation")


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
    from rlgauntlet.experiments.store import open_existing_store
    from rlgauntlet.report.curves import budget_curves, plot_curves

    if not store.is_file():
        what = "is a directory" if store.is_dir() else "not found"
        raise UserError(f"results store {store} {what}; give --store the file that rlgauntlet evaluate wrote")
    check_png(out, store, kind="reward-vs-budget")
    results = open_existing_store(store)
    try:
        curves = budget_curves(results, env=env, agent=agent)
    finally:
        results.close()  # a read leaves no -wal/-shm files behind, refused or not
    path = plot_curves(curves, out)
    data = [{"agent": a, "env": e, "clean": g["clean"], "curves": {t: [dict(zip(("eps", "return_mean", "return_sem", "episodes"), p)) for p in pts] for t, pts in g["curves"].items()}}
            for (a, e), g in sorted(curves.items())]
    write_json(path.with_suffix(".json"), {"curves": data}, kind="reward-vs-budget numbers")
    console.print(f"wrote {path} and {path.with_suffix('.json')}")


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
        check_outputs(out, store=one, kind="report")
    KEPT["note"] = "no report was written"
    path = render_report(store, out, agents=agent or None, title=title)
    console.print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
