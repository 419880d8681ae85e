"""``rlgauntlet published list``: the catalogue of the field's published robust agents."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from rlgauntlet.cli.common import out_console, published_app


@published_app.command("list")
def published_list(
    as_json: bool = typer.Option(False, "--json", help="print the catalogue as JSON. Example: --json"),
) -> None:
    """List the published agents: name (use it as published:NAME), repository, method, policy,
    the env it runs on here, the paper's ε, the README's natural and strongest-attack returns, and
    whether your local clone holds it ($RLGAUNTLET_RELEASES).

    Example: rlgauntlet published list
    """
    from rlgauntlet.published import catalogue, local_problem, releases, releases_root

    def local(entry: dict) -> str:
        problem = local_problem(entry)
        return "yes" if problem is None else f"no: {problem[0]}"

    if as_json:
        out_console.print_json(json.dumps(catalogue()))
        return
    table = Table(title=f"published agents (policy_gradients release format); clones looked for in {releases_root()}")
    for col in ("name", "repository", "method", "policy", "env (trained on)", "ε", "README natural / strongest",
                "authors' attacker", "local"):
        table.add_column(col)
    for e in releases():
        readme = e.get("readme")
        table.add_row(e["name"], e["repository"], e["method"], e["policy"], f"{e['env']} ({e['trained_on']})",
                      f"{e['eps']:g}", f"{readme['natural']:g} / {readme['strongest_attack']:g}" if readme else "–",
                      "yes" if e.get("attacker") else "–", local(e))
    out_console.print(table)
