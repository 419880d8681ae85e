"""benchmarks/published_board.py's claims table: each README number against the gauntlet's worst
case, held / within one standard error / not held (with the attack), natural within 15% or the gap."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from published_board import claim_verdict, claims_table  # noqa: E402


def _row(worst, sem, natural=3000.0, paper=(3000.0, 1000.0)):
    return {"agent": "published:x-hopper", "env": "Hopper-v5", "natural": natural, "worst_case": worst,
            "worst_case_sem": sem, "worst_attack": "push:direction=1|-1|1,eps=0.075",
            "paper": None if paper is None else {"natural": paper[0], "strongest_attack": paper[1]}}


def test_each_claim_is_held_within_one_standard_error_or_not_held():
    assert claim_verdict(_row(1000.0, 5.0))["robust"] == "held"  # at the claim: held
    assert claim_verdict(_row(996.0, 5.0))["robust"] == "within one standard error"  # 4 below, SE 5
    broken = claim_verdict(_row(990.0, 5.0))["robust"]  # 10 below, SE 5
    assert broken == "not held (push:direction=1, -1, 1,eps=0.075)"  # no '|' to break a Markdown table
    assert claim_verdict(_row(500.0, 5.0, paper=None)) is None
    assert claim_verdict(_row(500.0, 5.0, natural=2550.0))["natural"] == "within 15%"  # −15% exactly
    assert claim_verdict(_row(500.0, 5.0, natural=2549.0))["natural"] == "-15.0%"  # −15.03%, beyond
    table = claims_table([_row(990.0, 5.0), _row(1.0, 1.0, paper=None)])
    assert table.count("\n") == 2 and "| 1000 / 990 ± 5 |" in table
