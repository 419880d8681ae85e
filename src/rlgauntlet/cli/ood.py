"""``rlgauntlet ood scan`` and ``ood bench``: the OOD detection benchmark (paper 002's protocol)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rlgauntlet.cli.common import (agent_help, ood_app, console, out_console, DEFAULT_STORE_NAME, fmt, PRESET, KIND, VECNORMALIZE,
                                   INPUT_SPACE, PRECISION, DEVICE, ALLOW_PICKLE, OTHER_ENV, THREADS, agent_spec, write_result,
                                   KEPT, check_outputs, check_png, finite_number)
from rlgauntlet.errors import UserError


def _ood_progress():
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True)


def _ood_callbacks(progress):
    tasks: dict = {}
    return (lambda label, total: tasks.__setitem__(label, progress.add_task(label, total=total)),
            lambda label, rec: progress.advance(tasks[label]))


def _ood_common(out: Optional[Path], store: Optional[Path], kind: str) -> Path:
    store_path = store or ((out.parent if out else Path(".")) / DEFAULT_STORE_NAME)
    check_outputs(out, store=store_path, kind=kind)
    KEPT["note"] = (f"finished episodes are kept in {store_path}; run the same command with --resume to run "
                     "only the missing ones")
    return store_path


_OOD_AGENT = typer.Option(..., help=agent_help("zoo:cartpole-dqn-ensemble"))
_OOD_ENV = typer.Option(..., help="Gymnasium id. Example: --env CartPole-v1")
_OOD_SUITE = typer.Option(None, help="shift grid: ood-cartpole, ood-pendulum, ood-pong or ood-minatar. Example: --suite ood-cartpole")
_OOD_SHIFT = typer.Option([], help="a shift (threat spec), repeatable, instead of or beside --suite. Example: --shift physics:param=length,scale=4")
_OOD_EPISODES = typer.Option(10, min=1, help="episodes per set; episode k uses seed SEED+k. Example: --episodes 20")
_OOD_SEED = typer.Option(0, min=0, help="evaluation seed. Example: --seed 100")
_OOD_NENVS = typer.Option(4, "--n-envs", min=1, help="envs stepped side by side (the same episodes to the last bits of a batched forward pass; a chaotic env can amplify those, so reproduce a number with the n-envs that made it). Example: --n-envs 8")
_OOD_FAIL = typer.Option(0.5, callback=finite_number, help="a shift fails when (R − R_random)/(R_clean − R_random) is below this. Example: --fail-below 0.3")
_OOD_OUT = typer.Option(None, help="write the JSON result here. Example: --out results/ood.json")
_OOD_STORE = typer.Option(None, help=f"SQLite results store (default {DEFAULT_STORE_NAME} beside --out, or here). Example: --store runs.sqlite")
_OOD_RESUME = typer.Option(False, help="continue the latest matching runs in the store. Example: --resume")


@ood_app.command("scan")
def ood_scan_command(
    agent: str = _OOD_AGENT, env: str = _OOD_ENV, suite: Optional[str] = _OOD_SUITE, shift: List[str] = _OOD_SHIFT,
    episodes: int = _OOD_EPISODES, seed: int = _OOD_SEED, n_envs: int = _OOD_NENVS, fail_below: float = _OOD_FAIL,
    out: Optional[Path] = _OOD_OUT, store: Optional[Path] = _OOD_STORE, resume: bool = _OOD_RESUME,
    threads: Optional[int] = THREADS, preset: Optional[str] = PRESET, kind: Optional[str] = KIND,
    vecnormalize: Optional[Path] = VECNORMALIZE, input_space: Optional[str] = INPUT_SPACE,
    precision: str = PRECISION, device: str = DEVICE, allow_pickle: bool = ALLOW_PICKLE, other_env: bool = OTHER_ENV,
) -> None:
    """Evaluate an agent over a shift grid and mark the shifts where it fails (step 1 of the protocol).

    Example: rlgauntlet ood scan --agent zoo:cartpole-dqn --env CartPole-v1 --suite ood-cartpole
    """
    from rlgauntlet.experiments.ood_benchmark import ood_scan

    store_path = _ood_common(out, store, "ood scan")
    with _ood_progress() as progress:
        on_start, on_episode = _ood_callbacks(progress)
        spec = agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle, other_env)
        result = ood_scan(spec, env, suite, shift, episodes, seed, n_envs, store_path, resume=resume,
                          fail_below=fail_below, threads=threads, on_start=on_start, on_episode=on_episode)
    table = Table(title=f"{agent} on {env}: clean {result['clean']['return_mean']:.4g}, random policy "
                        f"{result['random_policy']['return_mean']:.4g}, fails below {fail_below:g} normalised")
    for col in ("shift", "return", "±sem", "normalised", "fails"):
        table.add_column(col, justify="left" if col == "shift" else "right")
    for row in result["rows"]:
        norm = row["normalised_return"]
        table.add_row(row["spec"], fmt(row["return_mean"]), fmt(row["return_sem"]),
                      "-" if norm is None else f"{norm:.2f}", "FAILS" if row["fails"] else "")
    out_console.print(table)
    console.print(f"{len(result['failing'])} of {len(result['rows'])} shifts fail")
    write_result(out, result, store_path, kind="ood scan")


@ood_app.command("bench")
def ood_bench_command(
    agent: str = _OOD_AGENT, env: str = _OOD_ENV, suite: Optional[str] = _OOD_SUITE, shift: List[str] = _OOD_SHIFT,
    trials: int = typer.Option(5, min=1, help="trials per shift (fresh episodes each). Example: --trials 5"),
    episodes: int = _OOD_EPISODES, seed: int = _OOD_SEED, n_envs: int = _OOD_NENVS,
    reduce: str = typer.Option("mean", help="per-step score over actions: mean or max of the per-action std. Example: --reduce max"),
    score_of: str = typer.Option("policy", "--score-of", help="what the spread is measured on: policy (the agent's output: Q-values, action) or critic (TD3/DDPG/SAC: the critic's value of the action taken). Example: --score-of critic"),
    fail_below: Optional[float] = typer.Option(None, callback=finite_number, help="with --suite: a shift is benchmarked when (R − R_random)/(R_clean − R_random) is below this (default 0.5). Example: --fail-below 0.3"),
    out: Optional[Path] = _OOD_OUT, store: Optional[Path] = _OOD_STORE,
    resume: bool = _OOD_RESUME, threads: Optional[int] = THREADS,
    plot: Optional[Path] = typer.Option(None, help="write the per-step score plot (PNG) here. Example: --plot results/ood.png"),
    preset: Optional[str] = PRESET, kind: Optional[str] = KIND, vecnormalize: Optional[Path] = VECNORMALIZE,
    input_space: Optional[str] = INPUT_SPACE, precision: str = PRECISION, device: str = DEVICE,
    allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
) -> None:
    """AUROC and FPR at 95% TPR of the agent's own uncertainty, nominal against each failing shift.

    Example: rlgauntlet ood bench --agent zoo:cartpole-dqn-ensemble --env CartPole-v1 --suite ood-cartpole --trials 5
    """
    from rlgauntlet.experiments.ood_benchmark import FAIL_BELOW, ood_bench

    if shift and fail_below is not None:
        raise UserError("--fail-below chooses which shifts of --suite are benchmarked; with --shift every given "
                        "shift is: drop --fail-below")
    store_path = _ood_common(out, store, "ood benchmark")
    check_png(plot, store, option="--plot", kind="ood scores")
    with _ood_progress() as progress:
        on_start, on_episode = _ood_callbacks(progress)
        spec = agent_spec(agent, preset, kind, vecnormalize, input_space, precision, device, allow_pickle, other_env)
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
                      fmt(sum(row["return_mean"]) / len(row["return_mean"])))
    out_console.print(table)
    if not result["rows"]:
        console.print("the agent failed none of the shifts: nothing to detect")
    if plot is not None and result["rows"]:
        from rlgauntlet.report.ood_plots import plot_ood_scores

        console.print(f"wrote {plot_ood_scores(result, plot)}")
    write_result(out, result, store_path, kind="ood benchmark")
