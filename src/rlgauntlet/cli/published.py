"""``rlgauntlet published list`` (the catalogue of the field's published robust agents) and
``rlgauntlet published fetch`` (the clones it reads them from)."""

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


@published_app.command("fetch")
def published_fetch(
    run: bool = typer.Option(False, "--run", help="run the clones (git, network) instead of printing them, then check every file's sha256. Example: --run"),
) -> None:
    """Print the `git clone` (and `git checkout` of the catalogued commit) of every repository the
    catalogue names that $RLGAUNTLET_RELEASES lacks; with --run, run them and check every release
    file against the catalogue's sha256. Clones already there are left as they are.

    Example: rlgauntlet published fetch --run
    """
    from rlgauntlet.published import fetch, fetch_plan, releases_root

    plan = fetch_plan()
    if not run:
        for row in plan:
            if row["state"] == "missing":
                out_console.print(" && ".join(" ".join(c for c in command if c != "--quiet")
                                              for command in row["commands"]), soft_wrap=True)
            else:
                out_console.print(f"# {row['repository']}: {row['folder']} {row['state']}", soft_wrap=True)
        return
    checked = fetch()
    bad = [row for row in checked if not row["ok"]]
    out_console.print(f"{len(checked) - len(bad)} of {len(checked)} released files in {releases_root()} match the "
                      "catalogue's sha256", soft_wrap=True)
    for row in bad:
        out_console.print(f"published:{row['name']}: {row['problem']}", soft_wrap=True)
    if bad:
        raise typer.Exit(1)
