"""The published leaderboard: the gauntlet (``mujoco`` at ``standard``, the papers' ε per env) on
every released agent of the catalogue and the zoo's agents of the same env, board by board in
the issue's order (Hopper and Walker2d, then PA-ATLA on all four envs, then HalfCheetah and
Ant), in one store (an agent on two boards, such as PA-ATLA's Hopper, runs once), cached and
resumable: a killed run (or the end of a working session) loses no stored episode or trained
attacker, and the same command goes on from there.

Needs the releases' clones under ``$RLGAUNTLET_RELEASES`` (``rlgauntlet published list``).
Writes ``benchmarks/results/published_board.json`` (per agent: natural, worst case and its
attack, the authors' attacker, the README's numbers, worker-seconds; per board: wall seconds of
this command and worker-seconds of every part) and prints the
table docs/reproduction.md carries.

Run: python benchmarks/published_board.py [--boards published-hopper ...] [--out runs/published] [--workers 2]
     [--executor ray --address HOST:PORT] [--confirm 50]  (README agents' headline attack at the READMEs' 50 episodes)
     python benchmarks/published_board.py --table   (the tables of the finished boards, nothing run)
     python benchmarks/published_board.py --claims  (one claims table over the boards run under this version)
     python benchmarks/published_board.py --directors  (what each kind of attacker costs and buys on those boards)
     python benchmarks/published_board.py --plan --protocol mujoco@v8 --boards field-hopper  (director steps left)
     python benchmarks/published_board.py --against mujoco@v4 --protocol mujoco@v8 --boards published-hopper
         (each agent's worst case under both versions: is the newer never weaker?)
     python benchmarks/published_board.py --ship [--store S ...] [--fresh]   (the board's results, numbers only,
         into the package: src/rlgauntlet/published/results/mujoco-vN.json, for `leaderboard --with-published`;
         added to what already ships for that version unless --fresh)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

from rlgauntlet.errors import UserError

HERE = Path(__file__).resolve().parent
BOARDS = ("published-hopper", "published-walker2d", "published-pa-atla", "published-halfcheetah-ant",
          "published-readme-halfcheetah-ant", "published-wocar", "published-sa-ppo", "published-radial",
          "published-sa-dqn", "published-sa-ppo-humanoid", "field-hopper", "field-walker2d", "field-halfcheetah",
          "field-ant", "field-hopper-mujoco15", "field-walker2d-mujoco15", "field-halfcheetah-v5")
OUT = HERE / "results" / "published_board.json"


#: the episodes the releases' READMEs average over: the authors' test.py (SA_PPO, ATLA_robust_RL,
#: WocaR-PPO, paad_adv_rl's MuJoCo trainer) defaults ``--num-episodes`` to 50. A board runs each
#: README agent's clean return and headline worst case on to this many (``--confirm``), so that a
#: claim is checked at the README's sample size as well as at the protocol's 10 episodes.
README_EPISODES = 50
#: the stage those extra episodes are counted in: beside the protocol's cost, not in it
CONFIRMATION_STAGE = "confirmation at the README's episodes"

#: the learned attackers' threat names (their episodes are the learned stage's)
LEARNED_THREATS = ("paad:", "sarl:", "robust_sarsa:")


def stage_of(kind: str, spec: str) -> str:
    """The gauntlet stage a stored run belongs to, by its kind and threat spec."""
    if kind == "selection":
        return "transfer race" if "transfer=true" in spec else "race"
    if "transfer=true" in spec:
        return "transferred episodes"
    if spec.startswith(LEARNED_THREATS):
        return "learned attackers' episodes"
    if spec.startswith("released_attacker:"):
        return "authors' attacker"
    return "clean, finalists, natural and shifts"


def attacker_folder(spec: str) -> Path | None:
    """The trained attacker's folder a learned member's threat spec names (``attacker=`` for a
    director, ``q=`` for a Robust Sarsa Q function), resolved; None for any other threat."""
    if not spec.startswith(LEARNED_THREATS):
        return None
    for part in spec.split(":", 1)[1].split(","):
        key, _, value = part.partition("=")
        if key in ("attacker", "q"):
            return Path(value).resolve()
    return None


def portable_spec(spec: str) -> str:
    """``spec`` with the files it names cut to their names (``threats.spec.key_spec``); a label that
    is no threat spec (``clean``) as it is."""
    from rlgauntlet.errors import UserError
    from rlgauntlet.threats.spec import key_spec, parse_threat

    try:
        return key_spec(parse_threat(spec))
    except UserError:
        return spec


def stage_seconds(plan, board_folders: set[Path] | None = None) -> dict[str, float]:
    """What one agent's gauntlet cost in worker-seconds per stage, read back from what it stored
    (so a board resumed across sessions still counts every part): its evaluation and selection
    episodes, each run's in the gauntlet's chunks (``CHUNK_EPISODES`` side by side, so a chunk
    costs its longest episode), and the training time in the manifests of the attackers it plans
    (LSTM directors apart).

    Only this version's work counts: another version run in the same store leaves runs and
    directors this one never used. A run counts when its threat is one of the plan's members
    (clean, heuristic, natural, shift, the authors' attacker) or a learned attacker whose folder
    is one the board's plans train (``board_folders``: every plan's attacker folders, so that a
    director transferred from another agent of the board counts; the plan's own when None); a
    manifest counts when the plan trains that attacker."""
    from rlgauntlet.experiments.cells import chunk_seconds
    from rlgauntlet.experiments.store import store_of
    from rlgauntlet.gauntlet.cache import agent_cache
    from rlgauntlet.gauntlet.run import CHUNK_EPISODES

    planned = {Path(task.folder).resolve() for task in plan.tasks}
    folders = planned if board_folders is None else {Path(f).resolve() for f in board_folders}
    # a folder by its place in the cache (agent, env, attacker) and a file by its name, as the store
    # keys runs, so that a store moved since its runs were stored still counts them
    in_cache = {folder.parts[-3:] for folder in folders}
    members = {portable_spec(s) for s in ("clean", *plan.heuristics, *plan.natural, *plan.shifts, *plan.authors)}

    def used(spec: str) -> bool:
        folder = attacker_folder(spec)
        return folder.parts[-3:] in in_cache if folder is not None else portable_spec(spec) in members

    stages: dict[str, float] = {}
    with store_of(plan.store) as store:
        for kind in ("evaluation", "selection"):
            for run_id, meta in store.runs(kind):
                # evaluation and selection runs name the agent as a record (a gauntlet summary run
                # names it as a string and holds the driver's wall time, not a worker's)
                if not (isinstance(meta.get("agent"), dict) and meta["agent"].get("sha256") == plan.sha
                        and meta.get("env", {}).get("id") == plan.env and used(str(meta.get("spec", "")))):
                    continue
                records = sorted(store.episodes(run_id), key=lambda r: r.episode)
                # an evaluation's episodes past the level's are the README sample's (run_plans' confirmation)
                past = [] if kind != "evaluation" else [r for r in records if r.episode >= plan.settings.episodes]
                for stage, part in ((stage_of(kind, str(meta.get("spec", ""))), records[:len(records) - len(past)]),
                                    (CONFIRMATION_STAGE, past)):
                    if part:
                        stages[stage] = stages.get(stage, 0.0) + sum(
                            chunk_seconds(part[i:i + CHUNK_EPISODES], CHUNK_EPISODES)
                            for i in range(0, len(part), CHUNK_EPISODES))
    for path in agent_cache(plan.store, plan.sha, plan.env).glob("*/manifest.json"):
        if path.parent.resolve() not in planned:
            continue
        manifest = json.loads(path.read_text())
        stage = "LSTM director training" if manifest.get("recurrent") else "attacker training"
        stages[stage] = stages.get(stage, 0.0) + (manifest.get("train_seconds") or 0)
    return {stage: round(value, 1) for stage, value in sorted(stages.items())}


def director_cpu_seconds(plan) -> float | None:
    """The CPU seconds the plan's attackers took to train (their manifests' ``train_cpu_seconds``, the
    worker process's CPU time): the directors' cost on a machine that other work shares, where
    their wall time (``train_seconds``) is not. None when any of them went unmeasured (trained, or
    begun, before CPU time was recorded) or is not trained yet."""
    total = 0.0
    for task in plan.tasks:
        manifest = Path(task.folder) / "manifest.json"
        value = json.loads(manifest.read_text()).get("train_cpu_seconds") if manifest.exists() else None
        if value is None:
            return None
        total += value
    return round(total, 1)


def director_seconds(plan, key: str = "train_seconds") -> dict[str, float | None]:
    """Each learned attacker the plan trains, by the label results give it, and the seconds its
    training took (its manifest's ``train_seconds``, or with ``key="train_cpu_seconds"`` its CPU
    seconds, None where unmeasured; a plan of several seeds trains one a seed under one label, and
    their seconds add up)."""
    seconds: dict[str, float | None] = {}
    for spec in plan.learned:
        manifest = attacker_folder(spec) / "manifest.json"
        if manifest.exists():
            label = plan.labels[spec]
            value = json.loads(manifest.read_text()).get(key)
            if key == "train_seconds":
                value = value or 0
            before = seconds.get(label, 0.0)
            seconds[label] = None if value is None or before is None else round(before + value, 1)
    return seconds


def member_family(label: str) -> str:
    """The kind of attacker a worst-case member is, the unit a protocol adds or drops: a learned
    attacker's method and setting (``paad@official``; a transferred one counts with its kind, as it
    exists only if that kind is trained), or ``heuristic`` for every other member.

    Example:
        >>> member_family("sarl@official-attack:eps=0.15 (from published:ppo-ant)"), member_family("push:eps=0.15")
        ('sarl@official-attack', 'heuristic')
    """
    head = label.split(" (from ")[0].split(":")[0]
    return head if f"{head.split('@')[0]}:" in LEARNED_THREATS else "heuristic"


def director_value(rows: list[dict]) -> list[dict]:
    """What each kind of member buys on these agents, from their rows (``members`` and
    ``directors``): its training seconds (total and per agent), the worst cases it set, and the
    agents whose worst case would rise by more than one standard error without it (every member
    of that kind left out, transferred ones too; the rise is a lower bound, as the race could then
    admit other finalists). ``transferred`` leaves out every transferred member instead (its worst
    cases are counted under their kind as well).
    Kinds by training cost, largest first."""
    kinds: dict[str, dict] = {}

    def kind(name: str) -> dict:
        return kinds.setdefault(name, {"kind": name, "train_seconds": 0.0, "train_cpu_seconds": 0.0,
                                       "worst_cases_set": 0, "needed_by": []})

    for row in rows:
        for label, seconds in row.get("directors", {}).items():
            kind(member_family(label))["train_seconds"] += seconds
            cpu = (row.get("directors_cpu") or {}).get(label)  # rows from before CPU time was recorded: none
            before = kind(member_family(label))["train_cpu_seconds"]
            kind(member_family(label))["train_cpu_seconds"] = None if cpu is None or before is None else before + cpu
        members = row.get("members") or {}
        if not members:
            continue
        kind(member_family(row["worst_attack"]))["worst_cases_set"] += 1
        if " (from " in row["worst_attack"]:  # a transferred member's worst case counts under both rows
            kind("transferred")["worst_cases_set"] += 1
        leave_outs = {member_family(label) for label in members} | {"transferred"}
        for name in leave_outs:
            kind(name)
            rest = [v for label, v in members.items()
                    if (" (from " not in label if name == "transferred" else member_family(label) != name)]
            without = min(rest) if rest else None
            if without is None or without - row["worst_case"] > (row.get("worst_case_sem") or 0.0):
                kind(name)["needed_by"].append({"agent": row["agent"], "worst_case": row["worst_case"],
                                                "without": without})
    for value in kinds.values():
        value["train_seconds"] = round(value["train_seconds"], 1)
        value["train_seconds_per_agent"] = round(value["train_seconds"] / len(rows), 1) if rows else 0.0
        cpu = value["train_cpu_seconds"]  # None: some of this kind's training went unmeasured
        value["train_cpu_seconds"] = None if cpu is None else round(cpu, 1)
        value["train_cpu_seconds_per_agent"] = None if cpu is None or not rows else round(cpu / len(rows), 1)
    return sorted(kinds.values(), key=lambda k: (-k["train_seconds"], k["kind"]))


def director_table(rows: list[dict]) -> str:
    """:func:`director_value` as markdown, one line a kind."""
    lines = ["| member kind | training, worker-s an agent | CPU-s an agent | worst cases it sets | agents whose "
             "worst case rises > 1 SE without it (worst case → without) |", "|---|---|---|---|---|"]
    for k in director_value(rows):
        needed = "; ".join(f"{n['agent'].split(':', 1)[-1]} {n['worst_case']:.0f} → "
                           + ("–" if n["without"] is None else f"{n['without']:.0f}") for n in k["needed_by"])
        cpu = k["train_cpu_seconds_per_agent"]
        lines.append(f"| {k['kind']} | {k['train_seconds_per_agent']:.0f} | {'–' if cpu is None else f'{cpu:.0f}'} | "
                     f"{k['worst_cases_set']} | {len(k['needed_by'])}{': ' + needed if needed else ''} |")
    return "\n".join(lines)


def progress_lines(board: str, every_s: float = 300.0):
    """``on_stage`` and ``on_advance`` callbacks that print plain, flushed lines (a board runs for
    hours, mostly in the background with its output in a log, where a live bar shows nothing):
    one when a stage starts, and the work done within it every ``every_s`` seconds."""
    state = {"stage": "", "done": 0, "total": 0, "printed": time.perf_counter()}

    def say() -> None:
        print(f"{time.strftime('%H:%M:%S')} {board}: {state['stage']} {state['done']}/{state['total']}", flush=True)
        state["printed"] = time.perf_counter()

    def on_stage(stage: str, done: int, total: int) -> None:
        state.update(stage=stage, done=done, total=total)
        say()

    def on_advance(units: int) -> None:
        state["done"] += units
        if time.perf_counter() - state["printed"] >= every_s:
            say()

    return on_stage, on_advance


def readme_numbers(agent: str) -> dict | None:
    """A released agent's README numbers (natural, strongest attack) from the catalogue; None for
    any other agent."""
    if not agent.startswith("published:"):
        return None
    from rlgauntlet.published import release

    return release(agent.split(":", 1)[1]).get("readme")


def confirm_counts(papers: list[dict | None], confirm: int) -> list[int]:
    """How far each agent's clean return and headline worst case run (``run_plans``'
    ``confirm_episodes``): ``confirm`` episodes where the agent's README gives a strongest-attack
    number to judge, 0 (none past the level's) for every other agent, a README without an attack
    number and our own agents among them."""
    return [confirm if (paper or {}).get("strongest_attack") is not None else 0 for paper in papers]


def run_board(name: str, out: Path, executor: str, workers: int, address: str | None,
              protocol: str = "mujoco", confirm: int = README_EPISODES) -> dict:
    """One board, planned and run as one plan under ``protocol`` (a name or a tag, ``mujoco@v6``);
    the results per agent and the time it took. Each agent with a README strongest-attack number
    has its clean return and headline worst case run on to ``confirm`` episodes (0: none)."""
    from rlgauntlet.gauntlet.board import load_board, plan_board
    from rlgauntlet.gauntlet.run import run_plans
    from rlgauntlet.gauntlet.summary import headline_of

    board = load_board(HERE.parent / "boards" / f"{name}.yaml").model_copy(update={"protocol": protocol})
    plans, methods = plan_board(board, out / "gauntlet.sqlite")  # one store: an agent on two boards runs once
    papers = [readme_numbers(plan.spec.agent) for plan in plans]
    started = time.perf_counter()
    results = run_plans(plans, executor, workers, address, methods, *progress_lines(name),
                        confirm_episodes=confirm_counts(papers, confirm))
    seconds = time.perf_counter() - started
    board_folders = {Path(task.folder).resolve() for plan in plans for task in plan.tasks}
    stages = [stage_seconds(plan, board_folders) for plan in plans]
    rows = []
    for plan, result, stage, paper in zip(plans, results, stages, papers):
        headline = headline_of(result)
        authors = result.get("authors_attack") or []
        rows.append({"agent": plan.spec.agent, "method": result["agent"]["method"], "env": plan.env,
                     "eps": result["headline_eps"], "natural": result["clean"]["return_mean"],
                     "natural_sem": result["clean"]["return_sem"],
                     "worst_case": headline["return_mean"] if headline else None,
                     "worst_case_sem": headline["return_sem"] if headline else None,
                     "worst_attack": headline["attack"] if headline else None,
                     "authors_attack": authors[0]["return_mean"] if authors else None,
                     "authors_attack_sem": authors[0]["return_sem"] if authors else None,
                     # clean and the worst case's attack at the README's sample size (README agents only)
                     **({"confirmed": result["confirmed"]} if result.get("confirmed") else {}),
                     "warnings": sorted({w["check"] for w in result["warnings"]}),
                     "paper": paper,
                     "worker_seconds": round(sum(v for k, v in stage.items() if k != CONFIRMATION_STAGE), 1),
                     "stage_seconds": stage,
                     # the attacker-training stages in CPU seconds (None: some went unmeasured)
                     "director_cpu_seconds": director_cpu_seconds(plan),
                     # what each member reached at the headline ε, and what each own director's
                     # training cost: what --directors weighs
                     "members": {k: round(v, 1) for k, v in (headline["members"] if headline else {}).items()},
                     "directors": director_seconds(plan),
                     "directors_cpu": director_seconds(plan, "train_cpu_seconds"),
                     # how the returns were scored: a release's actions reach the env unclipped, as
                     # its authors' evaluation sends them (boards run before 2026-11-28 clipped them)
                     "actions": "clipped" if plan.victim.clip_actions else "unclipped",
                     # directors resumed along another trajectory (none where all trained without a stop
                     # or resumed exactly): their members are one sample of that director
                     **({"resumed_inexactly": [r["member"] for r in result["directors_resumed_inexactly"]]}
                        if result.get("directors_resumed_inexactly") else {})})
    # seconds: this command's wall time (the part a resumed board still had to do; main() keeps
    # every command's in invocations); worker_seconds: every part, from the store and manifests
    return {"board": name, "protocol": plans[0].protocol.tag, "agents": len(plans), "seconds": round(seconds, 1),
            "workers": workers, "worker_seconds": round(sum(r["worker_seconds"] for r in rows), 1), "rows": rows}


#: the protocol of the boards run before results named theirs (2026-11-27/28)
UNNAMED_PROTOCOL = "mujoco@v4"


def board_under(results: dict, name: str, protocol: str) -> dict | None:
    """``name``'s entry in published_board.json run under ``protocol``: the board's own key when its
    latest run was of that version, else the ``NAME (PROTOCOL)`` key a run of another version moved it to."""
    board = results.get(name)
    if board and board.get("protocol", UNNAMED_PROTOCOL) == protocol:
        return board
    return results.get(f"{name} ({protocol})")


def place_board(results: dict, name: str, protocol: str, result: dict, date: str) -> None:
    """Put ``result``, ``name``'s board just run under ``protocol`` (its ``seconds`` this command's wall
    time), into ``results`` (published_board.json as it is now) under the board's own key. The entry
    there of another version is kept under ``NAME (ITS VERSION)`` (a board re-run under a new version
    must not erase the numbers the old one measured); this version's earlier entry, under either
    key, is replaced, and every command's wall time in it is kept in ``invocations`` (a resumed or
    fully cached rerun must not erase the time the board's first runs measured).

    Example:
        >>> results = {"published-hopper": {"rows": [1], "seconds": 60.0}}
        >>> place_board(results, "published-hopper", "mujoco@v5", {"rows": [2], "seconds": 9.0}, "2026-12-01 20:00")
        >>> sorted(results), results["published-hopper"]["invocations"]
        (['published-hopper', 'published-hopper (mujoco@v4)'], [{'seconds': 9.0, 'date': '2026-12-01 20:00'}])
    """
    before = board_under(results, name, protocol) or {}
    results.pop(f"{name} ({protocol})", None)
    current = results.get(name)
    if current and current.get("protocol", UNNAMED_PROTOCOL) != protocol:
        results[f"{name} ({current.get('protocol', UNNAMED_PROTOCOL)})"] = current
    earlier = before.get("invocations") or ([{"seconds": before["seconds"]}] if "seconds" in before else [])
    results[name] = result | {"invocations": earlier + [{"seconds": result["seconds"], "date": date}]}


def table(rows: list[dict]) -> str:
    """The docs/reproduction.md table: one row per agent, then how many agents with a README
    number the gauntlet's worst case reaches (at or below the README's strongest attack)."""
    def num(value) -> str:
        return "–" if value is None else f"{value:.0f}"

    lines = ["| agent | env (ε) | natural: paper / here | strongest attack: paper / authors' attacker here / "
             "gauntlet here (attack) |", "|---|---|---|---|"]
    for r in rows:
        paper = r["paper"] or {}
        lines.append(f"| {r['method']} (`{r['agent']}`) | {r['env']} ({r['eps']}) | {num(paper.get('natural'))} / "
                     f"{num(r['natural'])} | {num(paper.get('strongest_attack'))} / {num(r['authors_attack'])} / "
                     f"**{num(r['worst_case'])}** ({r['worst_attack']}) |")
    judged = [r for r in rows if (r["paper"] or {}).get("strongest_attack") is not None and r["worst_case"] is not None]
    reached = sum(reaches_readme(r["worst_case"], r.get("worst_case_sem"), r["paper"]["strongest_attack"])
                  for r in judged)
    lines.append(f"\nThe gauntlet's worst case is at or below the README's strongest attack (one standard error "
                 f"counting as at) on {reached} of {len(judged)} agents with a README number.")
    return "\n".join(lines)


def reaches_readme(worst: float, sem: float | None, claimed: float) -> bool:
    """Whether the gauntlet's worst case reaches a README's strongest-attack return: at or below it,
    one standard error of the worst case counting as at (the stronger-gauntlet issue's target; the
    claim's own verdict, :func:`robust_verdict`, reads the same numbers from the README's side)."""
    return worst <= claimed + (sem or 0.0)


def robust_verdict(worst: float, sem: float, claimed: float, attack: str) -> str:
    """A README's strongest-attack return against a worst case: ``held`` when the worst case is at
    or above it, ``within one standard error`` when below by at most its SE, else ``not held``
    with the attack that broke it."""
    if worst >= claimed:
        return "held"
    if claimed - worst <= sem:
        return "within one standard error"
    return f"not held ({attack})".replace("|", ", ")  # no '|' to break a Markdown table


def claim_verdict(row: dict) -> dict | None:
    """One agent's README claims checked against the gauntlet: ``natural`` (within 15% of the
    README, or the gap) and ``robust`` (:func:`robust_verdict` on the gauntlet's worst case);
    where the board ran the README's sample size (``confirmed``), ``robust_confirmed`` is the same
    verdict on the worst case's attack over those episodes; None for an agent without README numbers."""
    paper = row.get("paper") or {}
    if paper.get("strongest_attack") is None or row.get("worst_case") is None:
        return None
    worst, sem, claimed = row["worst_case"], row.get("worst_case_sem") or 0.0, paper["strongest_attack"]

    def natural_gap(value: float | None) -> str | None:
        if paper.get("natural") is None or value is None:
            return None
        gap = (value - paper["natural"]) / abs(paper["natural"])
        return "within 15%" if abs(gap) <= 0.15 else f"{gap:+.1%}"

    verdict = {"agent": row["agent"], "env": row["env"], "natural": natural_gap(row.get("natural")),
               "robust": robust_verdict(worst, sem, claimed, row["worst_attack"]),
               "claimed": claimed, "worst_case": worst, "worst_case_sem": sem}
    confirmed = (row.get("confirmed") or {}).get("worst_case")
    if confirmed:
        verdict |= {"robust_confirmed": robust_verdict(confirmed["return_mean"], confirmed["return_sem"], claimed,
                                                       confirmed["attack"]),
                    "natural_confirmed": natural_gap(row["confirmed"]["clean"]["return_mean"]),
                    "confirmed": confirmed}
    return verdict


def claims_table(rows: list[dict]) -> str:
    """The claims table of docs/reproduction.md: every README number against the gauntlet, and
    against the worst case's attack over the README's episodes where the board ran them."""
    lines = ["| agent | env | natural: README vs here (README's episodes) | strongest attack: README / gauntlet | claim | "
             "the same attack, README's episodes | claim there |",
             "|---|---|---|---|---|---|---|"]
    for verdict in filter(None, map(claim_verdict, rows)):
        confirmed = verdict.get("confirmed")
        again = (f"{confirmed['return_mean']:.0f} ± {confirmed['return_sem']:.0f} ({confirmed['episodes']} episodes) | "
                 f"{verdict['robust_confirmed']}" if confirmed else "– | –")
        natural = verdict["natural"] or "–"
        if verdict.get("natural_confirmed"):
            natural += f" ({verdict['natural_confirmed']})"
        lines.append(f"| `{verdict['agent']}` | {verdict['env']} | {natural} | "
                     f"{verdict['claimed']:.0f} / {verdict['worst_case']:.0f} ± {verdict['worst_case_sem']:.0f} | "
                     f"{verdict['robust']} | {again} |")
    return "\n".join(lines)


def field_claims(results: dict, boards: list[str], protocol: str) -> tuple[list[dict], str]:
    """Every README claim of the finished ``boards`` run under ``protocol`` (an agent on two boards
    counted once, at its first), and a line counting held / within one SE / not held; boards run
    under another version, or not yet, are named as left out rather than mixed in.
    """
    rows, seen, used, left = [], set(), [], []
    for name in boards:
        board = board_under(results, name, protocol)
        if not board:
            left.append(name)
            continue
        used.append(name)
        for row in board["rows"]:
            if (row["agent"], row["env"]) not in seen and claim_verdict(row) is not None:
                seen.add((row["agent"], row["env"]))
                rows.append(row)
    verdicts = [claim_verdict(r) for r in rows]

    def counted(key: str) -> str:
        said = [v[key] for v in verdicts if key in v]
        held, within = said.count("held"), said.count("within one standard error")
        return f"{held} held, {within} within one standard error, {len(said) - held - within} not held"

    line = f"{len(rows)} README claims under {protocol} (boards {', '.join(used)}): {counted('robust')}"
    again = sum("robust_confirmed" in v for v in verdicts)
    if again:
        line += f"; at the README's episodes ({again} of them): {counted('robust_confirmed')}"
    above = [v for v in verdicts if not reaches_readme(v["worst_case"], v["worst_case_sem"], v["claimed"])]
    line += (f"; the gauntlet reaches {len(verdicts) - len(above)} of {len(verdicts)} (at or below, one standard "
             "error counting as at)")
    if above:
        line += " and stays above " + ", ".join(f"{v['agent']} on {v['env']} ({v['worst_case']:.0f} ± "
                                                f"{v['worst_case_sem']:.0f} against {v['claimed']:.0f})" for v in above)
    return rows, line + (f"; not run under {protocol}: {', '.join(left)}" if left else "")


def version_comparison(results: dict, boards: list[str], protocol: str, other: str) -> tuple[list[dict], str]:
    """Each agent's worst case on the ``boards`` run under both ``protocol`` and ``other`` (an agent on
    two boards compared once, at its first), and a line counting them: ``lower`` where ``protocol``'s
    is below ``other``'s by more than one standard error of the difference, ``higher`` (weaker) where
    above by more, else ``at``. The "never weaker" check of a new version against an old one.

    Example:
        >>> old = {"protocol": "mujoco@v4", "rows": [{"agent": "zoo:a", "env": "Hopper-v5", "worst_case": 700.0,
        ...                                            "worst_case_sem": 30.0, "worst_attack": "push"}]}
        >>> new = {"protocol": "mujoco@v8", "rows": [{"agent": "zoo:a", "env": "Hopper-v5", "worst_case": 600.0,
        ...                                            "worst_case_sem": 40.0, "worst_attack": "paad"}]}
        >>> rows, line = version_comparison({"b": new, "b (mujoco@v4)": old}, ["b"], "mujoco@v8", "mujoco@v4")
        >>> rows[0]["verdict"], line
        ('lower', '1 agents on boards run under mujoco@v8 and mujoco@v4 (b): 1 lower, 0 at (within one standard error of the difference), 0 higher')
    """
    rows, seen, used, left = [], set(), [], []
    for name in boards:
        now, then = board_under(results, name, protocol), board_under(results, name, other)
        if not (now and then):
            left.append(name)
            continue
        used.append(name)
        before = {(r["agent"], r["env"]): r for r in then["rows"] if r.get("worst_case") is not None}
        for row in now["rows"]:
            key = (row["agent"], row["env"])
            if key in seen or key not in before or row.get("worst_case") is None:
                continue
            seen.add(key)
            old = before[key]
            noise = math.hypot(row.get("worst_case_sem") or 0.0, old.get("worst_case_sem") or 0.0)
            change = row["worst_case"] - old["worst_case"]
            verdict = "lower" if change < -noise else "higher" if change > noise else "at"
            rows.append({"agent": row["agent"], "env": row["env"], "board": name, "verdict": verdict,
                         "worst_case": row["worst_case"], "worst_case_sem": row.get("worst_case_sem") or 0.0,
                         "attack": row["worst_attack"], "before": old["worst_case"],
                         "before_sem": old.get("worst_case_sem") or 0.0, "before_attack": old["worst_attack"]})
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("lower", "at", "higher")}
    line = (f"{len(rows)} agents on boards run under {protocol} and {other} ({', '.join(used) or 'none'}): "
            f"{counts['lower']} lower, {counts['at']} at (within one standard error of the difference), "
            f"{counts['higher']} higher")
    higher = [r["agent"] for r in rows if r["verdict"] == "higher"]
    if higher:
        line += f" ({', '.join(higher)})"
    return rows, line + (f"; not run under both: {', '.join(left)}" if left else "")


def comparison_table(rows: list[dict], protocol: str, other: str) -> str:
    """:func:`version_comparison`'s rows as the Markdown table docs/reproduction.md shows (an attack's
    ``|`` written as ``, `` so that it does not break the table)."""
    def worst(value: float, sem: float, attack: str) -> str:
        return f"{value:.0f} ± {sem:.0f} ({attack.replace('|', ', ')})"

    lines = [f"| agent | env | {other} worst case (attack) | {protocol} worst case (attack) | {protocol} is |",
             "|---|---|---|---|---|"]
    lines += [f"| `{r['agent']}` | {r['env']} | {worst(r['before'], r['before_sem'], r['before_attack'])} | "
              f"{worst(r['worst_case'], r['worst_case_sem'], r['attack'])} | {r['verdict']} |" for r in rows]
    return "\n".join(lines)


def missing_release(board: str) -> str | None:
    """Why a released agent of ``board`` cannot be read here (a clone or a file missing, or
    another version of it), or None."""
    from rlgauntlet.errors import UserError
    from rlgauntlet.gauntlet.board import load_board
    from rlgauntlet.published import local_file, release

    for agent in load_board(HERE.parent / "boards" / f"{board}.yaml").agents:
        if agent.agent.startswith("published:"):
            try:
                local_file(release(agent.agent.split(":", 1)[1]))
            except UserError as exc:
                return str(exc)
    return None


def stale_entries(entries: list[dict], results: dict, boards: list[str], protocol: str) -> list[str]:
    """The agents whose shipped worst case (the stores' latest result under ``protocol``) is not the
    row of the first of ``boards`` run under it that holds them: an agent's latest result wins in a
    store, so a repository board run after a field board would ship the agent's number without the
    field's transferred members."""
    shipped = {(e["agent"], e["env"]): e["score"] for e in entries}
    stale, seen = [], set()
    for name in boards:
        for row in (board_under(results, name, protocol) or {}).get("rows", []):
            key = (row["agent"], row["env"])
            if key in seen or key not in shipped:
                continue
            seen.add(key)
            if shipped[key] is None or row["worst_case"] is None or abs(shipped[key] - row["worst_case"]) > 1e-6:
                stale.append(f"{row['agent']} ({name})")
    return stale


def board_plans(names: list[str], out: Path, protocol: str = "mujoco") -> list[dict]:
    """``--plan``: what each board still has to train under ``protocol`` (a name or a tag), from the
    store at ``out``: its agents and envs, the director steps left and, where the store has trained
    the same attackers against other agents of the env, the worker-seconds they would take (None
    where any is unmeasured). ``shared_steps``: the part of a board's steps left that an earlier
    board of ``names`` trains too (an agent on two boards of one store has one set of directors,
    trained once), so the steps left in all are the sum of ``training_left_steps - shared_steps``.
    Nothing is trained, run or written; the board's agents are loaded."""
    from rlgauntlet.gauntlet.board import load_board, plan_board

    rows, earlier = [], set()  # the director folders an earlier board trains
    for name in names:
        board = load_board(HERE.parent / "boards" / f"{name}.yaml").model_copy(update={"protocol": protocol})
        plans = plan_board(board, out / "gauntlet.sqlite")[0]
        previews = [plan.preview() for plan in plans]
        seconds = [p["training_left_seconds"] for p in previews]
        left = {str(task.folder): task.steps - task.steps_done() for plan in plans for task in plan.tasks
                if not task.done()}
        rows.append({"board": name, "protocol": previews[0]["protocol"] if previews else protocol,
                     "agents": len(previews), "envs": sorted({p["env"] for p in previews}),
                     "training_left_steps": sum(p["training_left_steps"] for p in previews),
                     "shared_steps": sum(steps for folder, steps in left.items() if folder in earlier),
                     "training_left_seconds": None if None in seconds else round(sum(seconds), 1)})
        earlier |= set(left)
    return rows


def board_agents(names: list[str]) -> set[tuple[str, str]]:
    """The (agent spec, env id) pairs of the boards ``names``: what ``--ship`` takes from a store
    that other boards share."""
    from rlgauntlet.gauntlet.board import agent_envs, load_board

    pairs = set()
    for name in names:
        board = load_board(HERE.parent / "boards" / f"{name}.yaml")
        pairs |= {(agent.agent, env) for agent in board.agents for env in agent_envs(agent, board)}
    return pairs


def ship_results(stores: list[Path], boards: list[str], fresh: bool = False, protocol_name: str = "mujoco") -> None:
    """The published board's results under ``protocol_name``'s version, numbers only, into the
    package (``rlgauntlet.published.SHIPPED``), for ``rlgauntlet leaderboard --with-published``: the
    agents of ``boards`` only (a store the boards share holds others), added to the results already
    shipped for that version (a result the stores hold, the same agent file on the same env and
    level, replaces its shipped entry), or, with ``fresh``, replacing them."""
    from rlgauntlet.common.outputs import write_json
    from rlgauntlet.gauntlet.leaderboard import ship
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.published import SHIPPED, shipped_results

    protocol = get_protocol(protocol_name)
    previous = None if fresh else shipped_results(protocol.name, protocol.version)
    data = ship(stores, protocol.name, protocol.version, board=", ".join(boards), previous=previous,
                only=board_agents(boards))
    stale = stale_entries(data["entries"], json.loads(OUT.read_text()) if OUT.exists() else {}, boards, protocol.tag)
    if stale:  # nothing written
        print(f"published_board --ship: the stores' latest result of {', '.join(stale)} is not that board's row "
              "(another board ran the agent later); name first the board whose numbers should ship (the field "
              "boards), or run that board again (its runs are stored: it only rewrites the result), then ship",
              file=sys.stderr)
        raise SystemExit(2)
    SHIPPED.mkdir(exist_ok=True)
    path = SHIPPED / f"{protocol.name}-v{protocol.version}.json"
    write_json(path, data, kind="published results")
    print(f"wrote {len(data['entries'])} agents' results to {path}")


def command_line() -> argparse.ArgumentParser:
    """The script's arguments (a function of its own so that its defaults are tested)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", nargs="+", default=list(BOARDS), choices=BOARDS)
    # the store is the repository's runs/published wherever the command is started from (as OUT is beside
    # this file): a relative default started a fresh store, and retrained every director, from another folder
    parser.add_argument("--out", type=Path, default=HERE.parent / "runs" / "published",
                        help="the board's store and trained attackers (default: the repository's runs/published)")
    parser.add_argument("--executor", default="local")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--protocol", default="mujoco",
                        help="the protocol version the boards run, ship, claim and print tables under: mujoco "
                             "(its default version) or a tag such as mujoco@v6")
    parser.add_argument("--address", default=None)
    parser.add_argument("--confirm", type=int, default=README_EPISODES,
                        help="episodes per seed each README agent's clean return and headline worst case's attack "
                             f"run on to, beside the protocol's (default {README_EPISODES}, the READMEs'; 0: none)")
    parser.add_argument("--table", action="store_true",
                        help=f"print the tables of the boards already in {OUT.name} run under --protocol's "
                             "version, run nothing")
    parser.add_argument("--claims", action="store_true",
                        help=f"print one claims table over the boards in {OUT.name} run under the current version")
    parser.add_argument("--directors", action="store_true",
                        help=f"print what each kind of attacker buys over the boards in {OUT.name} run under "
                             "--protocol's version (training cost, worst cases set, agents that need it)")
    parser.add_argument("--against", default=None, metavar="TAG",
                        help=f"print each agent's worst case on the boards in {OUT.name} run under both --protocol "
                             "and TAG (such as mujoco@v4), and whether --protocol's is lower, at or higher (weaker)")
    parser.add_argument("--plan", action="store_true",
                        help="print each board's director steps left under --protocol (from --out's store), run "
                             "nothing")
    parser.add_argument("--ship", action="store_true",
                        help="write the finished boards' results into the package (leaderboard --with-published)")
    parser.add_argument("--store", type=Path, nargs="+", default=None,
                        help="with --ship: the stores to read (default OUT/gauntlet.sqlite)")
    parser.add_argument("--fresh", action="store_true",
                        help="with --ship: replace the results shipped for this version instead of adding to them")
    return parser


def main() -> None:
    args = command_line().parse_args()
    if args.ship:
        ship_results(args.store or [args.out / "gauntlet.sqlite"], args.boards, fresh=args.fresh,
                     protocol_name=args.protocol)
        return
    from rlgauntlet.gauntlet.protocols import get_protocol

    tag = get_protocol(args.protocol).tag

    if args.plan:
        rows = board_plans(args.boards, args.out, tag)
        for row in rows:
            seconds, shared = row["training_left_seconds"], row["shared_steps"]
            print(f"{row['board']} under {row['protocol']}: {row['agents']} agents on {', '.join(row['envs'])}, "
                  f"{row['training_left_steps']:,} director steps left"
                  + ("" if seconds is None else f", about {seconds:,.0f} worker-seconds")
                  + (f" ({shared:,} of them an earlier board's too, trained once)" if shared else ""))
        if len(rows) > 1:
            print(f"in all: {sum(r['training_left_steps'] - r['shared_steps'] for r in rows):,} director steps left")
        return
    if args.against:
        other = args.against  # a tag of any version a board ran under, runnable now or not (v4 is not)
        if not re.fullmatch(r"[a-z]+@v[0-9]+", other):
            raise UserError(f"--against {other!r} is not a protocol tag: give one such as mujoco@v4")
        rows, line = version_comparison(json.loads(OUT.read_text()) if OUT.exists() else {}, args.boards, tag, other)
        print(comparison_table(rows, tag, other))
        print(f"\n{line}")
        return
    if args.claims:
        rows, line = field_claims(json.loads(OUT.read_text()) if OUT.exists() else {}, args.boards, tag)
        print(claims_table(rows))
        print(f"\n{line}")
        return
    if args.directors:
        results = json.loads(OUT.read_text()) if OUT.exists() else {}
        rows, used, seen = [], [], set()
        for name in args.boards:
            board = board_under(results, name, tag)
            if board and any("members" in row for row in board["rows"]):
                used.append(name)
                rows += [r for r in board["rows"] if (r["agent"], r["env"]) not in seen]  # an agent counted once
                seen |= {(r["agent"], r["env"]) for r in board["rows"]}
        if not rows:
            print(f"no board of {', '.join(args.boards)} has rows naming their members under {tag}: run it "
                  "under that version first (a finished board reruns from its store in a minute)")
            return
        print(director_table(rows))
        print(f"\n{len(rows)} agents under {tag} (boards {', '.join(used) or 'none'}; a board run before its "
              "rows named their members is left out: run it again, everything is reused)")
        return
    if args.table:
        results = json.loads(OUT.read_text()) if OUT.exists() else {}
        for name in args.boards:
            board = board_under(results, name, tag)
            if board:
                print(f"{name}: {board['agents']} agents in {board['seconds']} s")
                print(table(board["rows"]))
                print()
                print(claims_table(board["rows"]))
        return
    # the weights are the user's local copies, never downloaded: a board whose files are not
    # here is skipped, saying why, and the others run
    runnable = []
    for name in args.boards:
        missing = missing_release(name)
        if missing:
            print(f"published_board: {name} skipped, {missing}")
        else:
            runnable.append(name)
    from rlgauntlet.common.outputs import write_json

    for name in runnable:
        result = run_board(name, args.out, args.executor, args.workers, args.address, args.protocol, args.confirm)
        print(f"{name}: {result['agents']} agents in {result['seconds']} s")
        print(table(result["rows"]))
        # read again now, not when the command started: another command may have written its board since
        results = json.loads(OUT.read_text()) if OUT.exists() else {}
        for key in ("generator", "output_kind"):
            results.pop(key, None)
        place_board(results, name, tag, result, time.strftime("%Y-%m-%d %H:%M"))
        write_json(OUT, results, kind="benchmark")  # after every board: a long run keeps what it finished


def run() -> None:
    """``main`` as a command: one line and exit 2 for bad input; SIGINT and SIGTERM (also when the
    board runs in the background, where SIGINT arrives ignored) stop it with 130 or 143, saying
    what was kept."""
    import signal

    from rlgauntlet.cli.common import raise_on_signals
    from rlgauntlet.common.stopping import Interrupted

    raise_on_signals()
    try:
        main()
    except (Interrupted, KeyboardInterrupt) as exc:  # every finished chunk and trained attacker is already stored
        signum = getattr(exc, "signum", signal.SIGINT)  # a KeyboardInterrupt has none: SIGINT
        print(f"published_board: interrupted by {signal.Signals(signum).name}; the stored episodes and trained "
              "attackers are kept, and the same command resumes from them", file=sys.stderr)
        raise SystemExit(128 + signum) from None
    except UserError as err:  # a board file or agent refused before anything ran: one line, as the CLI says it
        print(f"published_board: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    run()
