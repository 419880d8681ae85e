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


def render_leaderboard(board: dict, out: str | Path) -> Path:
    """Write ``board`` (a :func:`~rlgauntlet.gauntlet.leaderboard.leaderboard` result) as one
    self-contained HTML page, marked as a ``leaderboard page``; returns the path written."""
    from rlgauntlet.common.outputs import check_output
    from rlgauntlet.report.html import template_environment

    out = check_output(Path(out), kind=PAGE_KIND)
    html = template_environment().get_template("leaderboard.html.j2").render(
        version=__version__, rendered=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        output_kind=PAGE_KIND, **board)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    return out
