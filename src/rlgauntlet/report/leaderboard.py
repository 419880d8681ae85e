"""The leaderboard page: :func:`~rlgauntlet.gauntlet.leaderboard.leaderboard`'s boards rendered
as one self-contained HTML page (the ranking itself is computed in :mod:`rlgauntlet.gauntlet`).

Example:
    >>> from rlgauntlet.gauntlet.leaderboard import leaderboard           # doctest: +SKIP
    >>> render_leaderboard(leaderboard(["a.sqlite"]), "board.html")       # doctest: +SKIP
"""

from __future__ import annotations

import time
from pathlib import Path

from rlgauntlet.version import __version__

#: what the board's page is, in its mark (common.outputs)
PAGE_KIND = "leaderboard page"


def paper_chart(board: dict) -> str | None:
    """One board's agents, natural and worst-case returns here against their papers' two numbers
    (a data URI); None when no agent of the board has published numbers."""
    from rlgauntlet.report.figures import published_uri

    members = [(row["method"], m) for row in board["rows"] for m in row["members"]]
    if not any(m.get("paper") for _, m in members):
        return None
    rows = [{"label": f"{method}: {m['agent']}", "natural": m["clean"], "worst_case": m["score"],
             "paper_natural": (m.get("paper") or {}).get("natural"),
             "paper_attacked": (m.get("paper") or {}).get("strongest_attack")}
            for method, m in members if m["clean"] is not None and m["score"] is not None]
    return published_uri(rows, f"{board['env']}: here (filled) and in the papers (hollow), ε {board['headline_eps']}")


def agent_rows(board: dict, page_folder: Path | None = None) -> list[dict]:
    """One board's agents, best worst case first: method, agent, natural and worst case here, the
    paper's two numbers, whether the row is the shipped field's, and its links (the report the
    gauntlet wrote, relative to ``page_folder``, none without one; a release's file in its
    repository)."""
    import os

    rows = []
    for row in board["rows"]:
        for m in row.get("members", []):
            if m["score"] is None:  # unscored: the board's "not ranked" line says why
                continue
            report = m.get("report")
            rows.append({"method": row["method"], "agent": m["agent"], "clean": m["clean"], "score": m["score"],
                         "paper_natural": (m.get("paper") or {}).get("natural"),
                         "paper_attacked": (m.get("paper") or {}).get("strongest_attack"), "shipped": m.get("shipped", False), "source": m.get("source"),
                         "report": os.path.relpath(report, page_folder) if report and page_folder else None})
    return sorted(rows, key=lambda r: -r["score"])


def render_leaderboard(board: dict, out: str | Path) -> Path:
    """Write ``board`` (a :func:`~rlgauntlet.gauntlet.leaderboard.leaderboard` result) as one
    self-contained HTML page, marked as a ``leaderboard page``; returns the path written."""
    from rlgauntlet.common.outputs import check_output
    from rlgauntlet.report.html import template_environment

    out = check_output(Path(out), kind=PAGE_KIND)
    html = template_environment().get_template("leaderboard.html.j2").render(
        version=__version__, rendered=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        output_kind=PAGE_KIND, paper_charts=[paper_chart(b) for b in board["boards"]],
        agent_rows=[agent_rows(b, out.parent) for b in board["boards"]], **board)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    return out
