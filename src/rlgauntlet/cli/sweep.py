"""``rlgauntlet sweep``: agents × envs × threats × budgets × seeds in resumable episode chunks."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rlgauntlet.cli.common import (app, console, out_console, print_report, KEPT, check_outputs)
from rlgauntlet.common.outputs import write_json
from rlgauntlet.errors import UserError


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
    check_outputs(out, store=store)
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
    KEPT["note"] = (f"finished episodes are kept in {store}; run the same command again to run only the missing ones")
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
