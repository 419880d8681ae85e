"""The robustness report card: one self-contained HTML file (figures embedded as data URIs,
no script, nothing fetched at view time) rendered from one or more results stores.

Per agent and env it shows the sections of :mod:`rlgauntlet.report.sections` that the stores
hold something for; with several agents on one env, a comparison view ranks them by their
strongest-of return; an appendix lists every run used, with its stored meta, and every
number in the report links to it.

Example:
    >>> render_report(["sweep.sqlite"], "report.html")                   # doctest: +SKIP
    PosixPath('report.html')
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from rlgauntlet.version import __version__
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.report.data import AgentRuns, RunRef, load_groups
from rlgauntlet.report.sections import SECTIONS, comparison


#: how the first lines of every report mark it (so that an --out we did not write is never replaced)
#: what a report page is, in its mark (common.outputs)
REPORT_KIND = "report"


def template_environment():
    """The Jinja environment of the report's templates (strict: an undefined name is an error;
    autoescaped: user text never becomes markup). The leaderboard page renders with it too."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(loader=PackageLoader("rlgauntlet.report", "templates"), autoescape=select_autoescape(["j2"]),
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _anchor(g: AgentRuns) -> str:
    return "agent-" + re.sub(r"[^A-Za-z0-9_-]+", "-", f"{g.label}-{g.env}").strip("-")


def _open_stores(paths: list[str | Path]) -> list[ResultsStore]:
    from rlgauntlet.experiments.store import open_existing_store

    stores = []
    try:
        for path in paths:
            stores.append(open_existing_store(path))
    except BaseException:
        for store in stores:
            store.close()
        raise
    return stores


def _refs(data) -> set[RunRef]:
    """Every run reference inside the rendered data (the runs the appendix must list)."""
    if isinstance(data, RunRef):
        return {data}
    if isinstance(data, dict):
        data = list(data.values())
    if isinstance(data, (list, tuple)):
        return set().union(*(_refs(item) for item in data)) if data else set()
    return set()


def report_context(stores: list[ResultsStore], agents: list[str] | None = None,
                   runs: set[tuple[int, int]] | None = None, labels: dict[str, str] | None = None) -> dict:
    """Everything the template renders (also what tests inspect); ``agents``, ``runs`` and
    ``labels`` as in :func:`~rlgauntlet.report.data.load_groups`."""
    groups = load_groups(stores, agents, runs, labels)
    which = f" for agents matching {', '.join(agents)}" if agents else ""
    if not groups:
        raise UserError(f"the store holds no runs{which}; run rlgauntlet evaluate or sweep first")
    if not any(g.evaluations or g.strongest or g.ood or g.certification for g in groups):
        count = sum(len(g.runs) for g in groups)
        raise UserError(f"the store holds {count} run(s){which} but no finished episode to report; run (or resume) "
                        "the evaluation that made them first, with the same command and --store")
    rendered, comparisons = [], comparison(groups)
    for g in groups:
        sections = []
        for section in SECTIONS:
            data = section.collect(g)
            if data is not None:
                sections.append({"key": section.key, "title": section.title, "data": data})
        if sections:
            rendered.append({"label": g.label, "env": g.env, "anchor": _anchor(g), "sections": sections})
    shown = _refs([rendered, comparisons])
    used = [(ref, kind, meta) for g in groups for ref, kind, meta in g.runs if ref in shown]
    appendix = [{"ref": ref, "kind": kind, "title": meta.get("spec") or meta.get("shift") or
                 ", ".join(meta.get("strongest_of", [])) or kind, "meta": json.dumps(meta, indent=1, default=str)}
                for ref, kind, meta in sorted(used, key=lambda u: (u[0].store, u[0].run_id))]
    return {"groups": rendered, "comparisons": comparisons, "appendix": appendix, "run_count": len(appendix),
            "stores": [Path(s.path).name for s in stores]}


def member_charts(gauntlet: dict | None) -> dict[str, str]:
    """A gauntlet result's members as one chart per ε (ε as the protocol writes it -> data URI)."""
    from rlgauntlet.report.figures import members_uri

    if not gauntlet:
        return {}
    clean = gauntlet["clean"]["return_mean"]
    return {w["eps"]: members_uri(w["members"], clean, w["attack"], f"ε {w['eps']} ({gauntlet['budget_space']})")
            for w in gauntlet["worst_case"] if w.get("members")}


def render_report(stores: list[str | Path], out: str | Path, agents: list[str] | None = None,
                  title: str = "rlgauntlet robustness report", gauntlet: dict | None = None,
                  runs: set[tuple[int, int]] | None = None, labels: dict[str, str] | None = None) -> Path:
    """Render the report of ``stores`` (paths) to ``out``; returns the path written. ``gauntlet``
    (a :func:`~rlgauntlet.gauntlet.run.run_gauntlet` result) adds its summary at the top;
    ``runs`` (store index, run id) keeps only those runs and ``labels`` renames agents, as in
    :func:`~rlgauntlet.report.data.load_groups`."""
    from rlgauntlet.common.outputs import check_output

    out = check_output(Path(out), kind=REPORT_KIND)
    opened = _open_stores(list(stores))
    try:
        context = report_context(opened, agents, runs, labels)
    finally:
        for store in opened:
            store.close()
    html = template_environment().get_template("report.html.j2").render(
        title=title, version=__version__, rendered=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        gauntlet=gauntlet, member_charts=member_charts(gauntlet), output_kind=REPORT_KIND, **context)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    return out
