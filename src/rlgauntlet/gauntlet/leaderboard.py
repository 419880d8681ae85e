"""The leaderboard's maths: every agent the gauntlet evaluated, ranked by its worst case, one
board per protocol version, level and env (results of different versions or levels are never
ranked together). :mod:`rlgauntlet.report.leaderboard` renders the board as a page.

An agent's score is its worst-case mean return at the protocol's headline ε (the lowest over
every attack of the protocol, learned attackers included). Agents of one method (the gauntlet's
``--method``, e.g. several training seeds of SA-PPO) are aggregated with the interquartile mean
and a 95% stratified-bootstrap interval, and each pair of methods gets the probability that a
run of one scores above a run of the other (:mod:`rlgauntlet.metrics.aggregates`). Clean return,
natural impact and certified figures stand beside the score, as means over the method's agents.

With ``published=True`` the field joins the user's results: the published board's results
(every released agent of the catalogue and the zoo's, under one protocol version) ship with the
package as numbers (:func:`rlgauntlet.published.shipped_results`, written by :func:`ship`), so a
user's agent is ranked among them without re-running the field. An agent the user ran as well
(same sha256, version, level and env) counts once, with the user's result.

Example:
    >>> board = leaderboard(["a.sqlite", "b.sqlite"])                    # doctest: +SKIP
    >>> [r["method"] for r in board["boards"][0]["rows"]]                 # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path

import numpy as np

from rlgauntlet.version import __version__
from rlgauntlet.errors import UserError
from rlgauntlet.gauntlet.summary import (CLEAN_RETURN, NATURAL_IMPACT, WARNINGS, acr_metric, gwc_metric, method_of,
                                         worst_case_metric)
from rlgauntlet.metrics.aggregates import improvement_interval, iqm_interval


#: what the board's JSON is, in its mark (common.outputs)
JSON_KIND = "leaderboard"


def _value(metrics: dict, name: str) -> float | None:
    """The stored metric ``name``: None where it is missing or not a finite number (an inf or
    NaN worst case is never ranked; :func:`_why_unscored` says why)."""
    entry = metrics.get(name)
    if entry is None or entry["value"] is None:
        return None
    value = float(entry["value"])
    return value if math.isfinite(value) else None


def _why_unscored(metrics: dict, protocol: object, version: object, headline: str | None) -> str | None:
    """Why a gauntlet result has no score (None: it has one)."""
    if headline is None:
        versions = None if protocol is None else (f"v{protocol.version}" if protocol.headline_since == protocol.version
                                                  else f"v{protocol.headline_since} to v{protocol.version}")
        known = "unknown protocol" if protocol is None else f"a version this rlgauntlet does not know (it knows {versions})"
        if not isinstance(version, int) or isinstance(version, bool):  # "2" is not version 2: say what was stored
            return (f"version {version!r} is not a whole number (a {type(version).__name__} was stored), so its "
                    "headline ε is unknown; re-run the gauntlet with this rlgauntlet on a new --store")
        return f"version {version}: {known}, so its headline ε is unknown"
    entry = metrics.get(worst_case_metric(headline))
    if entry is None or entry["value"] is None:
        return f"no worst case at the headline ε {headline}"
    if not math.isfinite(float(entry["value"])):
        return f"its worst case at ε {headline} is {entry['value']}, not a finite number"
    return None


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def result_identity(entry: dict) -> tuple:
    """What makes two gauntlet results the same agent's result: protocol, version, level, env and
    the agent file's sha256 (its name may point at another file later)."""
    return (entry.get("protocol"), entry.get("version"), entry.get("level"), entry.get("env"), entry.get("sha256"))


def gauntlet_entries(paths: list[str | Path]) -> list[dict]:
    """Every gauntlet result stored in ``paths``: its identity and metrics (the latest result of
    an agent, by sha256, under one protocol version, level and env, when the stores hold several:
    the one computed last, whichever run holds it: a board run again after a single-agent
    gauntlet of one of its agents rewrites its own earlier run, and that result is the latest)."""
    from rlgauntlet.experiments.store import open_existing_store
    from rlgauntlet.gauntlet.protocols import PROTOCOLS

    entries: dict[tuple, dict] = {}
    written: dict[tuple, float] = {}
    for given in paths:
        store = open_existing_store(given)
        path = Path(store.path)
        try:
            for run_id, meta in store.runs("gauntlet"):
                when = store.last_written(run_id)
                metrics = store.metrics(run_id)
                protocol = PROTOCOLS.get(meta.get("protocol"))
                headline = protocol.headline_of(meta.get("version"), meta.get("env")) if protocol else None
                # one agent counts once: its latest result (and the method that result names)
                key = result_identity(meta)
                if key in written and written[key] > when:
                    continue
                written[key] = when
                entries[key] = {**meta, "store": path.name, "run_id": run_id, "headline_eps": headline,
                                "score": _value(metrics, worst_case_metric(headline)) if headline else None,
                                "unscored_reason": _why_unscored(metrics, protocol, meta.get("version"), headline),
                                "clean": _value(metrics, CLEAN_RETURN),
                                "natural_impact": _value(metrics, NATURAL_IMPACT),
                                "acr": _value(metrics, acr_metric(headline)) if headline else None,
                                "gwc": _value(metrics, gwc_metric(headline)) if headline else None,
                                "warnings": int(_value(metrics, WARNINGS) or 0),
                                "report": _report_of(path, meta)}
        finally:
            store.close()
    return list(entries.values())


#: what a shipped entry keeps of a gauntlet entry (numbers and identity; no store, no path)
SHIPPED_FIELDS = ("protocol", "version", "level", "env", "agent", "sha256", "method", "headline_eps", "score",
                  "unscored_reason", "clean", "natural_impact", "acr", "gwc", "warnings")
#: where a shipped entry says it comes from, in place of a store's name
SHIPPED_STORE = "published board (shipped)"


def ship(paths: list[str | Path], protocol: str, version: int, board: str, previous: dict | None = None,
         only: Collection[tuple[str, str]] | None = None) -> dict:
    """The shipped form of the published board's results in the stores at ``paths`` under
    ``protocol`` v``version`` (what :func:`rlgauntlet.published.shipped_results` reads): the
    catalogue's and the zoo's agents only (a local file's path means nothing elsewhere), numbers
    only. ``board``: what it was computed from, recorded in the file. ``previous``: the results
    already shipped for that version; its entries of a result the stores do not hold
    (:func:`result_identity`) are kept, so a board run later (or on another machine) adds to the file instead of replacing it.
    ``only``: the (agent spec, env id) pairs to take from the stores (the named boards' agents; a
    store shared by several boards holds others), or None for all of them."""
    from rlgauntlet.published import SHIPPED_FORMAT

    if previous is not None and (previous.get("protocol"), previous.get("version")) != (protocol, version):
        raise UserError(f"the results shipped before are {previous.get('protocol')} v{previous.get('version')}, "
                        f"not {protocol} v{version}; ship each version on its own")
    kept = [{k: e[k] for k in SHIPPED_FIELDS} for e in gauntlet_entries(paths)
            if e["protocol"] == protocol and e["version"] == version
            and str(e["agent"]).startswith(("published:", "zoo:"))
            and (only is None or (e["agent"], e["env"]) in only)]
    if not kept:
        raise UserError(f"the stores hold no result of a published or zoo agent under {protocol} v{version}"
                        + ("" if only is None else " of the boards named") + "; run the published board first "
                        "(benchmarks/published_board.py)")
    if previous is not None:
        fresh = {result_identity(e) for e in kept}
        kept += [e for e in previous["entries"] if result_identity(e) not in fresh]
        boards = [b.strip() for b in str(previous.get("board", "")).split(",") if b.strip()]
        board = ", ".join(boards + [b.strip() for b in board.split(",") if b.strip() not in boards])
    for e in kept:  # a published agent run without --method: its catalogue label, as its board names it
        if e["method"] == e["agent"]:
            e["method"] = method_of(e["agent"])
    kept.sort(key=lambda e: (e["env"], str(e["method"]), e["agent"]))
    return {"format": SHIPPED_FORMAT, "protocol": protocol, "version": version, "board": board,
            "rlgauntlet_version": __version__, "entries": kept}


def with_published(entries: list[dict]) -> list[dict]:
    """``entries`` and the shipped results of the protocol versions they are under (all shipped
    versions when ``entries`` is empty); an agent in both counts once, with the user's result.
    A :class:`UserError` when no shipped result is under any of those versions."""
    from rlgauntlet.published import shipped_results, shipped_versions

    available = shipped_versions()
    wanted = sorted({(e["protocol"], e["version"]) for e in entries}, key=str) if entries else available
    shipped = [(pv, shipped_results(*pv)) for pv in wanted if pv in available]
    if not shipped:
        have = ", ".join(f"{p} v{v}" for p, v in available) or "none"
        yours = ", ".join(f"{p} v{v}" for p, v in wanted)
        raise UserError(f"--with-published: this rlgauntlet ships the published board's results for {have}, and your "
                        f"stores hold results under {yours}; drop --with-published, or run the gauntlet under a "
                        "protocol version that ships (a newer rlgauntlet may ship yours)")
    own = {result_identity(e) for e in entries}
    merged = list(entries)
    for _, data in shipped:
        for e in data["entries"]:
            if result_identity(e) not in own:
                merged.append({**e, "store": SHIPPED_STORE, "run_id": None, "shipped": True})
    return merged


def field_versions(env: str, level: str) -> list[str]:
    """The protocol versions (``mujoco@v5``) whose shipped results hold an agent on ``env`` at
    ``level``: where a board with none of the field's agents finds them (a new version ships task by
    task)."""
    from rlgauntlet.published import shipped_results, shipped_versions

    return [f"{protocol}@v{version}" for protocol, version in shipped_versions()
            if any(e["env"] == env and e["level"] == level for e in shipped_results(protocol, version)["entries"])]


def _report_of(store: Path, meta: dict) -> str | None:
    """The report the gauntlet wrote beside ``store`` for this result: a board's
    ``results/AGENT-ENV.json``, or a single agent's ``report.html`` when the ``gauntlet.json``
    beside it is this agent's (a store may hold several agents' results); None otherwise."""
    import json

    from rlgauntlet.gauntlet.cache import safe_name

    board_result = store.parent / "results" / f"{safe_name(str(meta.get('agent')))}-{safe_name(str(meta.get('env')))}.json"
    if board_result.is_file():
        return str(board_result)
    page, result = store.parent / "report.html", store.parent / "gauntlet.json"
    try:
        same = json.loads(result.read_text())["agent"]["sha256"] == meta.get("sha256")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return str(page) if same and page.is_file() else None


def papers_numbers(agent: str) -> dict | None:
    """A published agent's README numbers (natural, strongest attack), from the catalogue; None
    for any other agent."""
    from rlgauntlet.published import release
    from rlgauntlet.victims.agent_ref import parse_agent

    try:
        ref = parse_agent(str(agent))
        return release(ref.name).get("readme") if ref.source == "published" else None
    except UserError:  # a name an older catalogue knew
        return None


def source_link(entry: dict) -> str | None:
    """Where a published agent comes from, for a reader: its released file in its repository at
    the catalogued commit; None for any other agent."""
    from rlgauntlet.published import catalogue, commit_of, release
    from rlgauntlet.victims.agent_ref import parse_agent

    try:
        ref = parse_agent(str(entry["agent"]))
        if ref.source == "published":
            item = release(ref.name)
            url = catalogue()["repositories"][item["repository"]]
            return f"{url}/blob/{commit_of(item['repository']) or 'HEAD'}/{item['path']}"
    except UserError:  # a name an older catalogue knew
        return None
    return None


def leaderboard(paths: list[str | Path], seed: int = 0, published: bool = False) -> dict:
    """The boards of every gauntlet result in the stores at ``paths``, with the shipped results of
    the published board when ``published`` (see the module docstring)."""
    entries = gauntlet_entries(paths)
    if published:
        entries = with_published(entries)
    if not entries:
        raise UserError("the stores hold no gauntlet result; run `rlgauntlet gauntlet --store FILE` first")
    if all(e["score"] is None for e in entries):
        found = sorted({f"{e['protocol']} v{e['version']}" for e in entries})
        reasons = sorted({e["unscored_reason"] for e in entries if e["unscored_reason"]})
        raise UserError(f"no gauntlet result in the stores can be ranked ({'; '.join(reasons)}); versions found: "
                        f"{', '.join(found)}; run the gauntlet with this rlgauntlet on a new --store")
    boards: dict[tuple, list[dict]] = {}
    for e in entries:
        boards.setdefault((e["protocol"], e["version"], e["level"], e["env"]), []).append(e)
    out = []
    for (protocol, version, level, env), members in sorted(boards.items(), key=lambda kv: tuple(map(str, kv[0]))):
        methods: dict[str, list[dict]] = {}
        for e in members:
            methods.setdefault(e["method"], []).append(e)
        rows, unscored = [], []
        missing = [{"method": a["method"], "agent": a["agent"], "reason": a["unscored_reason"]}
                   for a in members if a["score"] is None]
        for method, agents in methods.items():
            scores = [a["score"] for a in agents if a["score"] is not None]
            if not scores:
                unscored.append(method)
                continue
            point, low, high = iqm_interval([scores], seed=seed)
            rows.append({"method": method, "agents": len(scores), "scores": scores, "iqm": point,
                         "ci_low": low, "ci_high": high, "clean": _mean([a["clean"] for a in agents]),
                         "natural_impact": _mean([a["natural_impact"] for a in agents]),
                         "acr": _mean([a["acr"] for a in agents]), "gwc": _mean([a["gwc"] for a in agents]),
                         "warnings": sum(a["warnings"] for a in agents),
                         "members": [{"agent": a["agent"], "sha256": a["sha256"], "score": a["score"],
                                      "clean": a["clean"], "store": a["store"], "run_id": a["run_id"],
                                      "shipped": bool(a.get("shipped")), "paper": papers_numbers(a["agent"]),
                                      "source": source_link(a), "report": a.get("report")} for a in agents]})
        rows.sort(key=lambda r: -r["iqm"])
        for rank, r in enumerate(rows, 1):
            r["rank"] = rank
        pairs = []
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                p, low, high = improvement_interval(a["scores"], b["scores"], seed=seed)
                pairs.append({"x": a["method"], "y": b["method"], "p_x_better": p, "ci_low": low, "ci_high": high})
        board = {"protocol": protocol, "version": version, "level": level, "env": env,
                 "headline_eps": members[0]["headline_eps"], "rows": rows, "pairs": pairs,
                 "unscored": unscored, "missing": missing}
        if published and not any(e.get("shipped") for e in members):
            board["field_under"] = field_versions(env, level)
        out.append(board)
    return {"rlgauntlet_version": __version__, "boards": out,
            "statistics": "IQM over a method's agents with a 95% stratified-bootstrap percentile interval "
                          "(scipy.stats.bootstrap, 2000 resamples); P(X > Y) with ties counted one half"}
