"""``rlgauntlet sweep``: agents × envs × threats × budgets × seeds in resumable episode chunks."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rlgauntlet.cli.common import (app, console, out_console, print_report, KEPT, check_outputs)
from rlgauntlet.common.outputs import write_json


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
    from rlgauntlet.experiments.sweep import load_sweep_file, preview_sweep, resolve_sweep, run_sweep

    from rlgauntlet.common.executors import check_executor
    from rlgauntlet.experiments.store import check_store_location

    check_executor(executor, workers, address)
    check_store_location(store)
    check_outputs(out, store=store, kind="sweep")
    sweep_spec = load_sweep_file(spec)
    if allow_pickle:
        sweep_spec.agents = [a.model_copy(update={"allow_pickle": True}) for a in sweep_spec.agents]
    if dry_run:
        plan = preview_sweep(sweep_spec, store)
        table = Table(title=f"sweep {sweep_spec.name} against {store} (dry run: nothing written)")
        rows = plan.pair_counts()
        certifying = any(row["certified"] for row in rows)
        columns = ["agent", "env", "seed", "runs", "episodes", "stored", "to run"] + (["certified ε"] if certifying else [])
        for col in columns:
            table.add_column(col, justify="left" if col in ("agent", "env", "certified ε") else "right")
        for row in rows:
            table.add_row(row["agent"], row["env"], str(row["seed"]), str(row["runs"]), str(row["episodes"]),
                          str(row["stored"]), str(row["missing"]), *([", ".join(row["certified"])] if certifying else []))
        out_console.print(table)
        extra = (f", then certification (GWC episodes and ACR) at {sum(len(r['certified']) for r in rows)} budget(s) "
                 "in the driver") if certifying else ""
        console.print(f"{plan.missing_episodes} of {plan.total_episodes} episodes to run in {len(plan.chunks)} chunks"
                      + extra)
        return
    resolved = resolve_sweep(sweep_spec)  # bad input is one line before any progress bar or file
    KEPT["note"] = (f"finished episodes are kept in {store}; run the same command again to run only the missing ones")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"sweep {sweep_spec.name}", total=None)

        def planned(plan) -> None:
            progress.update(task, total=plan.total_episodes, completed=plan.total_episodes - plan.missing_episodes)
            console.print(f"{len(plan.pairs)} agent/env/seed combinations, "
                          f"{sum(len(p.cells.cells) for p in plan.pairs)} runs, {plan.total_episodes} episodes, "
                          f"{plan.missing_episodes} still to run in {len(plan.chunks)} chunks ({executor}, "
                          f"{workers} worker{'s' if workers > 1 else ''})")

        result = run_sweep(sweep_spec, store, executor=executor, workers=workers, address=address, on_plan=planned,
                           on_chunk=lambda chunk, records: progress.advance(task, len(records)), resolved=resolved)
    for report in result["reports"]:
        print_report(report)
    certified = sum(len(row["evaluations"]) for row in result.get("certified", []))
    console.print(f"ran {result['ran']} of {result['episodes']} episodes in {result['seconds']:.1f} s"
                  + (f", and certified {certified} budget(s) (GWC, ACR)" if certified else "")
                  + f"; all stored in {store}")
    if out is not None:
        write_json(out, result, kind="sweep")
        console.print(f"wrote {out}")
