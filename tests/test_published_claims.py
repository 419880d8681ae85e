"""benchmarks/published_board.py's claims table: each README number against the gauntlet's worst
case, held / within one standard error / not held (with the attack), natural within 15% or the gap."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from published_board import claim_verdict, claims_table, command_line, field_claims, stale_entries  # noqa: E402


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


def test_the_field_claims_count_each_agent_once_and_only_the_current_version():
    v5 = {"protocol": "mujoco@v5", "rows": [_row(990.0, 5.0), _row(996.0, 5.0) | {"agent": "published:y"},
                                            _row(1.0, 1.0, paper=None)]}
    v4 = {"protocol": "mujoco@v4", "rows": [_row(2000.0, 5.0) | {"agent": "published:z"}]}
    unnamed = {"rows": [_row(2000.0, 5.0) | {"agent": "published:w"}]}  # a board from before versions were named: v4
    rows, line = field_claims({"b1": v5, "b2": v5, "b3": v4, "b5": unnamed}, ["b1", "b2", "b3", "b4", "b5"],
                              "mujoco@v5")
    assert [r["agent"] for r in rows] == ["published:x-hopper", "published:y"]  # b2 repeats b1; no paper: no claim
    assert line == ("2 README claims under mujoco@v5 (boards b1, b2): 0 held, 1 within one standard error, 1 not "
                    "held; not run under mujoco@v5: b3, b4, b5")


def test_shipping_refuses_an_agent_whose_latest_result_is_not_its_first_boards():
    entries = [{"agent": "published:x-hopper", "env": "Hopper-v5", "score": 900.0},
               {"agent": "published:y", "env": "Hopper-v5", "score": 500.0}]
    field = {"rows": [_row(900.0, 5.0), _row(500.0, 5.0) | {"agent": "published:y"}]}
    repository = {"rows": [_row(1000.0, 5.0)]}  # x's own board, before the field's transfer lowered it
    boards = {"field": field, "repo": repository}
    assert stale_entries(entries, boards, ["field", "repo"]) == []
    assert stale_entries(entries, boards, ["repo", "field"]) == ["published:x-hopper (repo)"]
    entries[1]["score"] = 640.0  # a later board's run of y is the store's latest
    assert stale_entries(entries, {"field": field}, ["field"]) == ["published:y (field)"]


def test_the_board_store_defaults_to_the_repository_wherever_the_command_starts(tmp_path, monkeypatch):
    # a relative default opened a fresh store, and retrained every director, when started elsewhere
    monkeypatch.chdir(tmp_path)
    out = command_line().parse_args([]).out
    assert out.is_absolute()
    assert out == Path(__file__).resolve().parents[1] / "runs" / "published"
    assert command_line().parse_args(["--out", "elsewhere"]).out == Path("elsewhere")  # an explicit one is kept
