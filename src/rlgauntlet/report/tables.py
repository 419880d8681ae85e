"""Tables a paper can paste, Markdown or LaTeX (booktabs): the leaderboard, one table per board
(protocol version, level, env), its caption naming the protocol version and what the score is;
and the Daylight paper's Tables 1–6, ours beside the paper's rows. Rendering only: the numbers
are :func:`rlgauntlet.gauntlet.leaderboard.leaderboard`'s and
:func:`rlgauntlet.experiments.daylight.run_daylight`'s.

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
#: the agents' table beside a board whose agents have papers' numbers or come from the shipped field
AGENT_COLUMNS = ("agent", "method", "natural", "worst case", "paper: natural", "paper: strongest attack", "from")


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


def _agents(board: dict) -> list[list[str]]:
    """The cells of a board's agents' table (the page's, without links), or none when no agent of
    the board has a paper's numbers or comes from the shipped field."""
    from rlgauntlet.report.leaderboard import agent_rows

    rows = agent_rows(board)
    if not any(r["shipped"] or r["paper_natural"] is not None or r["paper_attacked"] is not None for r in rows):
        return []
    return [[str(r["agent"]), str(r["method"]), _number(r["clean"]), _number(r["score"]), _number(r["paper_natural"]),
             _number(r["paper_attacked"]), "the published board" if r["shipped"] else "your store"] for r in rows]


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
        agents = _agents(board)
        if agents:
            lines += ["", "| " + " | ".join(AGENT_COLUMNS) + " |", "|" + "|".join("---" for _ in AGENT_COLUMNS) + "|"]
            lines += ["| " + " | ".join(_markdown_cell(c) for c in cells) + " |" for cells in agents]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


#: LaTeX's special characters, each replaced in one pass (a backslash's replacement keeps its braces)
LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
         "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "ε": r"$\epsilon$", "–": "--",
         "±": r"$\pm$", "−": "$-$", "°": r"$^\circ$"}


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
        agents = _agents(board)
        if agents:
            lines += ["", r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{ll" + "r" * 4 + "l}", r"\toprule",
                      " & ".join(_latex_escape(c) for c in AGENT_COLUMNS) + r" \\", r"\midrule"]
            lines += [" & ".join(_latex_escape(c) for c in cells) + r" \\" for cells in agents]
            lines += [r"\bottomrule", r"\end{tabular}",
                      rf"\caption{{{_latex_escape(board['env'])}: each agent's natural return and worst case here "
                      r"beside its paper's README numbers.}", r"\end{table}"]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _impact(value: float | None, spread: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if spread is None else f"{value:.3f} ± {spread:.3f}"


def _distance(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def daylight_tables(result: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """Tables 1–6 of a :func:`~rlgauntlet.experiments.daylight.run_daylight` result as (caption,
    columns, rows): the paper's row (± as the paper prints it, P_similarity its LPIPS) above ours
    (± one standard error over episodes; the distance LPIPS when measured, else 1 − SSIM, and
    SSIM and PSNR always), the setting and whether the claim held."""
    game = result.get("game") or result["env"]["id"]
    cw = result["cw"]
    out = []
    for row in result["rows"]:
        column = row["column"]
        columns = ["", "C&W impact", f"{column} impact", "C&W distance", f"{column} distance", "distance",
                   f"{column} SSIM / PSNR dB", "setting", "claim"]
        rows = []
        paper = row.get("paper")
        if paper is not None:
            rows.append([f"{game} (paper)", _impact(paper["cw_impact"], paper["cw_spread"]),
                         _impact(paper["impact"], paper["spread"]), _distance(paper["cw_lpips"]),
                         _distance(paper["lpips"]), "LPIPS", "–", paper["setting"], "–"])
        cw_distance = cw["lpips"] if row["distance"] == "LPIPS" else (None if cw["ssim"] is None else 1 - cw["ssim"])
        own = row["lpips"] if row["distance"] == "LPIPS" else (None if row["ssim"] is None else 1 - row["ssim"])
        psnr = "–" if row["psnr"] is None else f"{row['psnr']:.1f}"
        rows.append([f"{game} (here, {row['episodes']} episodes)", _impact(cw["impact"], cw["impact_se"]),
                     _impact(row["impact"], row["impact_se"]), _distance(cw_distance), _distance(own),
                     row["distance"], f"{_distance(row['ssim'])} / {psnr}", row["spec"], row["verdict"]])
        caption = (f"Table {row['table']}: impacts of Carlini & Wagner and {column} with the perceptual distance "
                   f"({'LPIPS' if row['distance'] == 'LPIPS' else 'here 1 − SSIM, the paper LPIPS'}); "
                   f"C&W here: {cw['spec']}.")
        out.append((caption, columns, rows))
    return out


def daylight_markdown(result: dict) -> str:
    """:func:`daylight_tables` as Markdown, one table per perturbation under its caption."""
    parts = []
    for caption_text, columns, rows in daylight_tables(result):
        lines = [f"**{_markdown_cell(caption_text)}**", "", "| " + " | ".join(columns) + " |",
                 "|" + "|".join("---" for _ in columns) + "|"]
        lines += ["| " + " | ".join(_markdown_cell(c) for c in row) + " |" for row in rows]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def daylight_latex(result: dict) -> str:
    """:func:`daylight_tables` as LaTeX tables (booktabs rules)."""
    parts = []
    for caption_text, columns, rows in daylight_tables(result):
        lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "r" * (len(columns) - 3) + "ll}",
                 r"\toprule", " & ".join(_latex_escape(c) for c in columns) + r" \\", r"\midrule"]
        lines += [" & ".join(_latex_escape(c) for c in row) + r" \\" for row in rows]
        lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{_latex_escape(caption_text)}}}", r"\end{table}"]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"
