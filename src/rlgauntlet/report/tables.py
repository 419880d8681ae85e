"""The leaderboard as a table a paper can paste: Markdown or LaTeX (booktabs), one table per board
(protocol version, level, env), its caption naming the protocol version and what the score is.
Rendering only: the numbers are :func:`rlgauntlet.gauntlet.leaderboard.leaderboard`'s.

Example:
    >>> board = {"boards": [{"protocol": "mujoco", "version": 4, "level": "standard", "env": "Hopper-v5",
    ...           "headline_eps": "0.075", "rows": [{"rank": 1, "method": "sa_ppo", "agents": 3, "iqm": 1811.5,
    ...           "ci_low": 1500.0, "ci_high": 2100.0, "clean": 3300.0, "natural_impact": 0.1, "acr": None,
    ...           "gwc": None, "warnings": 0}]}]}
    >>> print(board_markdown(board).splitlines()[4])
    | 1 | sa_ppo | 3 | 1812 [1500, 2100] | 3300 | 0.1 | – | – | 0 |
"""

from __future__ import annotations

COLUMNS = ("rank", "method", "agents", "worst case IQM [95% CI]", "clean", "natural impact", "ACR", "GWC", "warnings")


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _cells(row: dict) -> list[str]:
    interval = f" [{_number(row['ci_low'])}, {_number(row['ci_high'])}]" if row.get("ci_low") is not None else ""
    return [str(row["rank"]), str(row["method"]), str(row["agents"]), f"{_number(row['iqm'])}{interval}",
            _number(row.get("clean")), _number(row.get("natural_impact")), _number(row.get("acr")),
            _number(row.get("gwc")), str(row.get("warnings", 0))]


def caption(board: dict) -> str:
    """What a board's table is: env, protocol and version, level, and the score's definition (or,
    for a board whose headline ε is unknown, why nothing in it is ranked)."""
    head = f"rlgauntlet leaderboard, {board['env']}: protocol {board['protocol']} v{board['version']}, level {board['level']}."
    if board.get("headline_eps") is None:
        reasons = sorted({m["reason"] for m in board.get("missing", []) if m.get("reason")})
        return (f"{head} Nothing ranked: {'; '.join(reasons) or 'its headline ε is unknown to this rlgauntlet'} "
                f"({len(board.get('unscored', []))} result(s) unscored).")
    return (f"{head} Score: the worst-case return at ε = {board['headline_eps']} (the lowest mean return "
            "over every attack of the protocol), IQM over a method's agents with a 95% bootstrap interval.")


def _markdown_cell(text: str) -> str:
    """A cell's text that keeps the table one row per line: pipes escaped, line breaks as spaces."""
    return " ".join(text.replace("|", "\\|").split())


def board_markdown(result: dict) -> str:
    """Every board of a leaderboard result as a Markdown table under its caption."""
    parts = []
    for board in result["boards"]:
        lines = [f"**{caption(board)}**", "", "| " + " | ".join(COLUMNS) + " |",
                 "|" + "|".join("---" for _ in COLUMNS) + "|"]
        lines += ["| " + " | ".join(_markdown_cell(c) for c in _cells(row)) + " |" for row in board["rows"]]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


#: LaTeX's special characters, each replaced in one pass (a backslash's replacement keeps its braces)
LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
         "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "ε": r"$\epsilon$", "–": "--"}


def _latex_escape(text: str) -> str:
    return "".join(LATEX.get(char, char) for char in " ".join(text.split()))


def board_latex(result: dict) -> str:
    """Every board of a leaderboard result as a LaTeX ``table`` (booktabs rules) with its caption."""
    parts = []
    for board in result["boards"]:
        lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{rlr" + "r" * (len(COLUMNS) - 3) + "}",
                 r"\toprule", " & ".join(_latex_escape(c) for c in COLUMNS) + r" \\", r"\midrule"]
        lines += [" & ".join(_latex_escape(c) for c in _cells(row)) + r" \\" for row in board["rows"]]
        lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{_latex_escape(caption(board))}}}", r"\end{table}"]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
