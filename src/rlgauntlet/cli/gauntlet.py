"""``rlgauntlet gauntlet`` and ``leaderboard``: the whole protocol on one agent, and the ranking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rlgauntlet.cli.common import (agent_help, ALLOW_PICKLE, OTHER_ENV, INPUT_SPACE, KEPT, KIND, VECNORMALIZE, agent_spec, app,
                                   console, out_console)
from rlgauntlet.common.outputs import check_output, check_run_dir, write_json
from rlgauntlet.errors import UserError


def _list_protocols(as_json: bool) -> None:
    from rlgauntlet.gauntlet.protocols import PROTOCOLS, get_protocol, runnable_tags

    # each protocol by name at its default version, then every other version it runs by its tag
    defaults = {name: get_protocol(name) for name in PROTOCOLS}
    listed = {**defaults, **{tag: get_protocol(tag) for tag in runnable_tags()
                             if tag not in {p.tag for p in defaults.values()}}}
    if as_json:
        out_console.print_json(json.dumps({key: p.describe() for key, p in listed.items()}))
        return
    table = Table(title="gauntlet protocols (docs/protocols.md); --protocol NAME runs its default, NAME@vN that version")
    for col in ("protocol", "version", "env families", "ε grid (headline)", "learned attackers", "levels"):
        table.add_column(col)
    for key, p in listed.items():
        levels = "; ".join(f"{k}: {v.episodes} ep, {v.attacker_steps // 1000}k steps at {v.learned_at}"
                           for k, v in p.levels.items())
        table.add_row(key, str(p.version), ", ".join(p.families),
                      f"{', '.join(p.eps_grid)} ({p.headline_eps}), {p.unit}"
                      + "".join(f"; {k}: {', '.join(g)} ({h})" for k, (g, h) in p.env_budgets.items()),
                      ", ".join(p.learned + p.learned_continuous)
                      + "".join(f"; {'/'.join(m)}@{k} ({', '.join(f'{lv} {n // 1000}k' for lv, n in st.items())})"
                                for k, (m, st) in p.extra_directors.items())
                      + "".join(f"; LSTM directors at {lv}: " + ", ".join(f"{t} {n // 1000}k" for t, n in st.items())
                                for lv, st in p.recurrent_steps.items())
                      + (f"; {'/'.join(p.curriculum_methods)}@curriculum (first at "
                         + ", ".join(f"{m:g} × ε on {t}" for t, m in p.curriculum.items()) + ")"
                         if p.curriculum and p.curriculum_methods else ""), levels)
    out_console.print(table)


@app.command()
def gauntlet(
    agent: Optional[str] = typer.Option(None, help=agent_help("zoo:cartpole-dqn")),
    agents_file: Optional[Path] = typer.Option(None, "--agents", help="a board file (YAML: agents, envs, level): every agent's gauntlet as one plan, one store and a leaderboard. Example: --agents boards/hopper.yaml"),
    env: Optional[str] = typer.Option(None, help="Gymnasium id; its family picks the protocol. Example: --env CartPole-v1"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="folder for gauntlet.json and report.html (and the store, by default). Example: --out runs/gauntlet-dqn"),
    protocol: Optional[str] = typer.Option(None, help="protocol name (default: the env family's; see --list). Example: --protocol classic"),
    level: Optional[str] = typer.Option(None, help="quick (minutes), standard (the default) or paper (the papers' budgets). Example: --level quick"),
    seeds: List[int] = typer.Option([], "--seeds", help="evaluation seeds, repeatable (default: the level's). Example: --seeds 0 --seeds 1"),
    store: Optional[Path] = typer.Option(None, help="results store (default OUT/gauntlet.sqlite); learned attackers are cached beside it. Example: --store runs/gauntlet.sqlite"),
    executor: str = typer.Option("local", help="local (worker processes here) or ray. Example: --executor ray"),
    workers: int = typer.Option(1, min=1, help="worker processes (local) or CPUs of the local Ray head. Example: --workers 2"),
    address: Optional[str] = typer.Option(None, help="address of a running Ray cluster. Example: --address 10.0.0.5:6379"),
    method: Optional[str] = typer.Option(None, help="the name the leaderboard groups this agent under (several training seeds of one method). Example: --method sa-ppo"),
    exhaustive: bool = typer.Option(False, "--exhaustive", help="run every heuristic attack in full instead of racing them (slower; a check of the race). Example: --exhaustive"),
    lstm_directors: bool = typer.Option(False, "--lstm-directors", help="also train LSTM directors (PA-AD, SA-RL with a memory of the episode) against an agent without one (the protocol trains them against recurrent agents). Example: --lstm-directors"),
    kind: Optional[str] = KIND,
    vecnormalize: Optional[Path] = VECNORMALIZE,
    input_space: Optional[str] = INPUT_SPACE,
    precision: Optional[str] = typer.Option(None, help="network precision: auto (the default: float64 for vector inputs, float32 for images), float32, float64. Example: --precision float32"),
    device: Optional[str] = typer.Option(None, help="torch device: cpu (the default) or cuda. Example: --device cuda"),
    allow_pickle: bool = ALLOW_PICKLE,
    other_env: bool = OTHER_ENV,
    confirm_episodes: int = typer.Option(0, "--confirm-episodes", min=0, help="also run clean and the headline worst case's attack on to this many episodes per seed (a paper's sample size; most MuJoCo papers average 50), reported beside the protocol's numbers as `confirmed`; more than the level's episodes. Example: --confirm-episodes 50"),
    plan_only: bool = typer.Option(False, "--plan", help="print what this gauntlet (or board) will run and the attacker training it still needs, estimated from the attackers its store already trained, and exit: nothing is trained, run or written. Example: --plan"),
    list_protocols: bool = typer.Option(False, "--list", help="list the protocols and exit. Example: --list"),
    as_json: bool = typer.Option(False, "--json", help="with --list: print the protocols as JSON. Example: --list --json"),
) -> None:
    """Run an env family's whole evaluation protocol on one agent: heuristic and learned attacks
    (trained against it, cached), strongest-of per ε, natural and shift suites, certification and
    false-robustness checks; write gauntlet.json and report.html.

    Example: rlgauntlet gauntlet --agent zoo:cartpole-dqn --env CartPole-v1 --level quick --out runs/dqn --workers 2
    """
    from rlgauntlet.common.executors import check_executor
    from rlgauntlet.gauntlet import plan_gauntlet, run_gauntlet
    from rlgauntlet.gauntlet.protocols import protocol_fitting
    from rlgauntlet.experiments.store import check_store_location
    from rlgauntlet.report.html import REPORT_KIND, render_report

    if list_protocols:
        _list_protocols(as_json)
        return
    if agents_file is not None:
        _refuse_board_options(agents_file, {
            "--agent": (agent is not None, "agents:"), "--env": (env is not None, "envs:"),
            "--protocol": (protocol is not None, "protocol:"), "--level": (level is not None, "level:"),
            "--seeds": (bool(seeds), "seeds:"), "--method": (method is not None, "method: (on each agent)"),
            "--kind": (kind is not None, "kind: (on each agent)"),
            "--vecnormalize": (vecnormalize is not None, "vecnormalize: (on each agent)"),
            "--input-space": (input_space is not None, "input_space: (on each agent)"),
            "--precision": (precision is not None, "precision: (on each agent)"),
            "--device": (device is not None, "device: (on each agent)"),
            "--other-env": (other_env, "other_env: true (on each agent)"),
            "--lstm-directors": (lstm_directors, "lstm_directors: true (on each agent)")})
        if out_dir is None:
            raise UserError("--agents needs --out DIR (the store, one result per agent and the leaderboard go there)")
        _board(agents_file, out_dir, store, executor, workers, address, exhaustive, allow_pickle, plan_only,
               confirm_episodes)
        return
    if agent is None or env is None or out_dir is None:
        missing = [name for name, v in (("--agent", agent), ("--env", env), ("--out", out_dir)) if v is None]
        raise UserError(f"gauntlet needs {', '.join(missing)}; e.g. rlgauntlet gauntlet --agent zoo:cartpole-dqn "
                        "--env CartPole-v1 --out runs/dqn (or --list for the protocols)")
    level, precision, device = level or "standard", precision or "auto", device or "cpu"
    chosen = protocol_fitting(protocol, env)
    _check_confirm(confirm_episodes, chosen.level(level).episodes, level)
    check_executor(executor, workers, address)
    check_run_dir(out_dir, "--out")
    store_path = check_store_location(store or out_dir / "gauntlet.sqlite")
    json_path, html_path = out_dir / "gauntlet.json", out_dir / "report.html"
    check_output(json_path, "--out", protect=[store_path], kind="gauntlet result", given=out_dir)
    check_output(html_path, "--out", protect=[store_path], kind=REPORT_KIND, given=out_dir)
    spec = agent_spec(agent, None, kind, vecnormalize, input_space, precision, device, allow_pickle, other_env)
    plan = plan_gauntlet(spec, env, protocol=chosen.tag, level=level, seeds=seeds or None, store=store_path,
                         exhaustive=exhaustive, lstm_directors=lstm_directors)
    if plan_only:
        _print_previews([plan.preview()], workers)
        return
    KEPT["note"] = (f"finished episodes are kept in {store_path} and trained attackers (with their checkpoints) "
                    f"beside it; run the same command again to go on from there")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        stage, advance = _progress_callbacks(progress, f"{chosen.tag} {level}")
        result = run_gauntlet(agent, env, executor=executor, workers=workers, address=address, method=method,
                              on_stage=stage, on_advance=advance, plan=plan, confirm_episodes=confirm_episodes)
    write_json(json_path, result, kind="gauntlet result")
    render_report([store_path], html_path, agents=None, title=f"rlgauntlet gauntlet: {agent} on {env}",
                  gauntlet=result)
    table = Table(title=f"{agent} on {env}: {chosen.tag}, level {level} ({result['budget_space']} budgets)")
    for col in ("ε", "worst-case return", "strongest attack"):
        table.add_column(col, justify="left" if col == "strongest attack" else "right")
    table.add_row("0 (clean)", f"{result['clean']['return_mean']:.4g} ± {result['clean']['return_sem']:.2g}", "")
    for row in result["worst_case"]:
        table.add_row(row["eps"], f"{row['return_mean']:.4g} ± {row['return_sem']:.2g}", row["attack"])
    out_console.print(table)
    _print_confirmed(result)
    for warning in result["warnings"]:
        console.print(f"[bold red]warning[/] ({warning['check']}): {warning['message']}")
    _print_inexact_resumes(result)
    race = result["race"]
    if race["raced"]:
        console.print(f"race: {race['finalists']} heuristic attacks ran in full, {race['dropped']} dropped on "
                      f"selection episodes (gauntlet.json: race)")
    console.print(f"{len(result['warnings'])} false-robustness warning(s); wrote {json_path} and {html_path} "
                  f"in {result['seconds']:.0f} s (store {store_path})")


def _refuse_board_options(path: Path, given: dict[str, tuple[bool, str]]) -> None:
    """With --agents the board file decides these: refuse each one given, naming the key to set."""
    for option, (is_given, key) in given.items():
        if is_given:
            raise UserError(f"{option}: with --agents the board file decides it; set {key} in {path} instead "
                            f"and drop {option}")


def _progress_callbacks(progress, label: str):
    """A progress bar per stage (the finished ones kept), and the advance of the current one."""
    current = {"task": None}

    def stage(name: str, done: int, total: int) -> None:
        current["task"] = progress.add_task(f"{label}: {name}", total=total, completed=done)

    def advance(n: int) -> None:
        if current["task"] is not None:
            progress.advance(current["task"], n)

    return stage, advance


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _print_inexact_resumes(result: dict) -> None:
    """One line where some member's director was resumed along another trajectory (its numbers are
    one sample of that director: gauntlet.json, directors_resumed_inexactly)."""
    resumed = result.get("directors_resumed_inexactly")
    if resumed:
        console.print(f"{result['agent'].get('spec', '')}: {len(resumed)} director(s) resumed along another trajectory "
                      f"than their uninterrupted training ({', '.join(r['member'] for r in resumed)}): their members are "
                      "one sample of that director (gauntlet.json: directors_resumed_inexactly)")


def _print_previews(previews: list[dict], workers: int) -> None:
    """``--plan``: one gauntlet's learned attackers in full, or a board's one row an agent; then
    the training left, in worker-seconds where every untrained attacker has been measured."""
    if len(previews) == 1:
        p = previews[0]
        table = Table(title=f"{p['agent']} on {p['env']}: {p['protocol']}, level {p['level']}: learned attackers")
        for col in ("attacker", "steps", "status"):
            table.add_column(col)
        for row in p["learned_attackers"]:
            status = ("trained (cached)" if row["trained"] else "to train, " + (
                f"{row['steps_done']:,} steps done, " if row.get("steps_done") else "") + (
                f"about {_hours(row['estimated_seconds'])}" if row["estimated_seconds"] is not None else "not measured yet"))
            table.add_row(row["attacker"], f"{row['steps']:,}", status)
        out_console.print(table)
        out_console.print(f"members: {p['heuristic_members']} heuristic ({'raced' if p['raced'] else 'all in full'}), "
                          f"{p['natural']} natural, {p['shifts']} shifts, {p['authors_attack']} authors' attacker; "
                          f"{p['episodes_per_seed']} episodes a seed on seeds {p['seeds']}; "
                          f"{p['skipped']} {'entry does' if p['skipped'] == 1 else 'entries do'} not fit this agent "
                          "and env (gauntlet.json: skipped, with the reason)")
    else:
        table = Table(title=f"board: {len(previews)} gauntlets")
        for col in ("agent", "env", "learned attackers trained", "steps to train", "training left"):
            table.add_column(col)
        for p in previews:
            done = sum(r["trained"] for r in p["learned_attackers"])
            left = p["training_left_seconds"]
            table.add_row(p["agent"], p["env"], f"{done} of {len(p['learned_attackers'])}", f"{p['training_left_steps']:,}",
                          "–" if not p["training_left_steps"] else _hours(left) if left is not None else "not measured yet")
        out_console.print(table)
    steps = sum(p["training_left_steps"] for p in previews)
    if not steps:
        out_console.print("training left: none (every learned attacker is in the store's cache)")
        return
    unmeasured = sum(p["unmeasured"] for p in previews)
    if unmeasured:
        out_console.print(f"training left: {steps:,} steps; {unmeasured} of the attackers to train "
                          f"{'was' if unmeasured == 1 else 'were'} never trained against another agent on this env in "
                          "this store, so no total time is estimated (the measured ones: see the rows)")
        return
    seconds = sum(p["training_left_seconds"] for p in previews)
    out_console.print(f"training left: {steps:,} steps, about {seconds:,.0f} worker-seconds ({_hours(seconds)} of "
                      f"one worker; {_hours(seconds / workers)} on {workers} if every worker stays busy), from the same "
                      "attackers trained against other agents here; episodes come on top")


def _check_confirm(confirm_episodes: int, level_episodes: int, level: str) -> None:
    """``--confirm-episodes`` must ask for more than the level runs anyway; the refusal suggests
    a count that the level accepts (five times its episodes, at least 50)."""
    if 0 < confirm_episodes <= level_episodes:
        raise UserError(f"--confirm-episodes {confirm_episodes}: the {level} level already runs {level_episodes} "
                        f"episodes per seed; give more (e.g. --confirm-episodes {max(50, 5 * level_episodes)}) "
                        "or leave it out")


def _print_confirmed(result: dict) -> None:
    """The headline worst case's attack and clean at ``--confirm-episodes``, when they ran."""
    confirmed = result.get("confirmed")
    if confirmed:
        worst, clean = confirmed["worst_case"], confirmed["clean"]
        console.print(f"{result['agent']['spec']} at {confirmed['episodes_per_seed']} episodes per seed: clean "
                      f"{clean['return_mean']:.4g} ± {clean['return_sem']:.2g}, {worst['attack']} "
                      f"{worst['return_mean']:.4g} ± {worst['return_sem']:.2g} (gauntlet.json: confirmed)")


def _board(path: Path, out_dir: Path, store: Optional[Path], executor: str, workers: int, address: Optional[str],
           exhaustive: bool, allow_pickle: bool, plan_only: bool = False, confirm_episodes: int = 0) -> None:
    """``gauntlet --agents FILE``: plan every agent, run them as one plan, write each result and
    the board's leaderboard."""
    from rlgauntlet.common.executors import check_executor
    from rlgauntlet.experiments.store import check_store_location
    from rlgauntlet.gauntlet.board import load_board, plan_board
    from rlgauntlet.gauntlet.leaderboard import JSON_KIND, leaderboard as rank
    from rlgauntlet.gauntlet.cache import safe_name
    from rlgauntlet.gauntlet.run import run_plans
    from rlgauntlet.gauntlet.summary import headline_of
    from rlgauntlet.report.leaderboard import PAGE_KIND, render_leaderboard

    board = load_board(path)
    check_executor(executor, workers, address)
    check_run_dir(out_dir, "--out")
    store_path = check_store_location(store or out_dir / "gauntlet.sqlite")
    page, page_json = out_dir / "leaderboard.html", out_dir / "leaderboard.json"
    check_output(page, "--out", protect=[store_path], kind=PAGE_KIND, given=out_dir)
    check_output(page_json, "--out", protect=[store_path], kind=JSON_KIND, given=out_dir)
    plans, methods = plan_board(board, store_path, allow_pickle, exhaustive)
    _check_confirm(confirm_episodes, plans[0].settings.episodes, board.level)
    if plan_only:
        _print_previews([plan.preview() for plan in plans], workers)
        return
    names = [out_dir / "results" / f"{safe_name(p.spec.agent)}-{safe_name(p.env)}.json" for p in plans]
    for name in names:
        check_output(name, "--out", protect=[store_path], kind="gauntlet result", given=out_dir)
    KEPT["note"] = (f"finished episodes are kept in {store_path} and trained attackers beside it; run the same "
                    "command again to go on from there")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        stage, advance = _progress_callbacks(progress, f"board {board.name} ({len(plans)} gauntlets)")
        results = run_plans(plans, executor, workers, address, methods, stage, advance, confirm_episodes)
    table = Table(title=f"board {board.name}: {len(plans)} gauntlets, level {board.level}")
    for col in ("agent", "env", "method", "clean", "worst case at the headline ε", "strongest attack"):
        table.add_column(col)
    for plan, name, result in zip(plans, names, results):
        write_json(name, result, kind="gauntlet result")
        headline = headline_of(result)
        table.add_row(plan.spec.agent, plan.env, result["agent"]["method"], f"{result['clean']['return_mean']:.4g}",
                      f"{headline['return_mean']:.4g} ± {headline['return_sem']:.2g}" if headline else "–",
                      headline["attack"] if headline else "–")
    ranked = rank([store_path])
    render_leaderboard(ranked, page)
    write_json(page_json, ranked, kind=JSON_KIND)
    out_console.print(table)
    for result in results:
        _print_confirmed(result)
        _print_inexact_resumes(result)
    console.print(f"wrote {len(names)} results in {out_dir / 'results'}, {page} and {page_json} (store {store_path})")


@app.command()
def leaderboard(
    store: List[Path] = typer.Option([], help="results stores holding gauntlet results, repeatable (optional with --with-published: the field alone). Example: --store a.sqlite --store b.sqlite"),
    out: Path = typer.Option(..., help="the page (.html) or table (.md, .tex); the JSON goes beside it (same name, .json). Example: --out board.html"),
    format: str = typer.Option("html", "--format", help="html (a page with charts), markdown or latex (a table a paper can paste, the protocol version in its caption). Example: --format latex"),
    with_published: bool = typer.Option(False, "--with-published", help="rank your agents among the field: the published board's results (every catalogued release and the zoo's agents, numbers shipped with rlgauntlet) join your stores' under the same protocol version. Example: --with-published"),
) -> None:
    """Rank every agent the gauntlet evaluated by its worst case: one board per protocol version,
    level and env; IQM and 95% bootstrap intervals over a method's agents; P(X > Y) per pair.

    Example: rlgauntlet leaderboard --store runs/dqn/gauntlet.sqlite --store runs/ppo/gauntlet.sqlite --out board.html
    """
    from rlgauntlet.common.outputs import write_text
    from rlgauntlet.gauntlet.leaderboard import JSON_KIND, leaderboard as rank
    from rlgauntlet.report.leaderboard import PAGE_KIND, render_leaderboard
    from rlgauntlet.report.tables import board_latex, board_markdown

    suffixes = {"html": (".html", ".htm"), "markdown": (".md", ".markdown"), "latex": (".tex",)}
    if format not in suffixes:
        raise UserError(f"--format {format!r} is unknown; choose html, markdown or latex")
    if out.suffix.lower() not in suffixes[format]:
        raise UserError(f"--out {out}: a {format} leaderboard is written to a file ending in {suffixes[format][0]}; "
                        f"give e.g. --out {out.with_suffix(suffixes[format][0]).name}")
    kind = PAGE_KIND if format == "html" else "leaderboard table"
    json_path = out.with_suffix(".json")
    check_output(out, protect=store, kind=kind)
    check_output(json_path, protect=store, kind=JSON_KIND, given=out)
    if not store and not with_published:
        raise UserError("give --store FILE (a results store the gauntlet wrote), or --with-published for the field's "
                        "results alone")
    board = rank(list(store), published=with_published)
    for b in board["boards"]:  # asked for the field, and none of it ships for this board's version
        if "field_under" in b:
            where = (f"it ships under {' and '.join(b['field_under'])}: run the gauntlet with --protocol "
                     f"{b['field_under'][-1]} to be ranked among it") if b["field_under"] else \
                "no published agent ships on this env"
            console.print(f"{b['env']} under {b['protocol']} v{b['version']}: the field is not on this board; {where}",
                          soft_wrap=True)
    if format == "html":
        render_leaderboard(board, out)
    else:
        write_text(out, board_markdown(board) if format == "markdown" else board_latex(board), kind=kind,
                   syntax=format)
    write_json(json_path, board, kind=JSON_KIND)
