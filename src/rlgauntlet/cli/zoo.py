"""``rlgauntlet zoo list``, ``zoo export`` and ``version``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from rlgauntlet.version import __version__
from rlgauntlet.cli.common import app, console, out_console, zoo_app


@zoo_app.command("list")
def zoo_list() -> None:
    """List the zoo agents with their env, algorithm and clean return.

    Example: rlgauntlet zoo list
    """
    import os

    from rlgauntlet.errors import UserError
    from rlgauntlet.zoo import load_manifest, zoo_dir

    if not (zoo_dir() / "manifest.json").is_file() and os.environ.get("RLGAUNTLET_ZOO"):
        raise UserError(f"RLGAUNTLET_ZOO={os.environ['RLGAUNTLET_ZOO']} holds no manifest.json, so no agent; point it "
                        "at a zoo folder (one written by `rlgauntlet zoo export`), or unset it to use the installed zoo")
    table = Table(title="rlgauntlet zoo")
    for col in ("name", "env", "algorithm", "clean return (20 ep.)", "target", "steps", "file"):
        table.add_column(col)
    for name, e in load_manifest().items():  # an entry may lack a field (an attacker has no algorithm): shown as –
        cr = e.get("clean_return") if isinstance(e.get("clean_return"), dict) else {}
        clean = (f"{cr['mean']:.1f} ± {cr.get('std', 0.0):.1f}" if isinstance(cr.get("mean"), (int, float))
                 else "–")
        table.add_row(name, str(e.get("env", "–")), str(e.get("algorithm", e.get("kind", "–"))), clean,
                      str(cr.get("target", "")), str(e.get("total_timesteps", "")),
                      str(e.get("file") or f"{len(e.get('members', []))} members"))
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
def version() -> None:
    """Print the rlgauntlet version."""
    out_console.print(__version__)
