"""The Daylight paper's Tables 1–6 as one job (experiments.daylight, ``rlgauntlet daylight``): the
paper's settings per game, impact and its standard error by the paper's formula on the stored
returns, the claim's verdict, the tables, and bad input in one line before anything runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.daylight import (PAPER, PERTURBATIONS, daylight_specs, game_of, impact_with_se,
                                             run_daylight, verdict)

MINATAR_SETTINGS = {"brightness_contrast": "brightness_contrast:alpha=1.7,beta=40", "median_blur": "median_blur:kernel=3",
                    "rotation": "rotation:degrees=3", "shift": "shift:ti=2,tj=1", "jpeg": "jpeg:quality=10",
                    "perspective": "perspective:norm=3"}
CHEAP_CW = "cw:steps=5,search_steps=2,lr=0.05"


def test_the_papers_settings_per_game_and_what_replaces_them():
    assert game_of("PongNoFrameskip-v4") == "Pong" and game_of("RiverraidNoFrameskip-v4") == "RiverRaid"
    assert game_of("JamesbondNoFrameskip-v4") == "JamesBond" and game_of("CartPole-v1") is None
    assert game_of("SADQN/Pong-v0") == "Pong" and game_of("ALE/Pong-v5") == "Pong" and game_of("MinAtar/Breakout-v1") is None
    pong = daylight_specs("PongNoFrameskip-v4")
    assert list(pong) == list(PERTURBATIONS)  # the paper's table order
    assert pong == {"brightness_contrast": "brightness_contrast:alpha=1.7,beta=40", "median_blur": "median_blur:kernel=3",
                    "rotation": "rotation:degrees=3", "shift": "shift:ti=2,tj=1", "jpeg": "jpeg:quality=10",
                    "perspective": "perspective:norm=3"}
    assert daylight_specs("RiverraidNoFrameskip-v4")["brightness_contrast"] == "brightness_contrast:alpha=2.4,beta=-275"
    assert daylight_specs("PongNoFrameskip-v4", {"rotation": "rotation:degrees=1"})["rotation"] == "rotation:degrees=1"
    # Table 1's Pong row, as printed
    row = PAPER["Pong"]["brightness_contrast"]
    assert (row.cw_impact, row.impact, row.cw_lpips, row.lpips) == (0.995, 0.996, 0.608, 0.245)


@pytest.mark.parametrize("env, settings, message", [
    ("MinAtar/Breakout-v1", {}, r"none of the paper.s games .*\(missing: brightness_contrast, median_blur"),
    ("PongNoFrameskip-v4", {"blur": "median_blur:kernel=3"}, "--setting blur: not a perturbation"),
    ("PongNoFrameskip-v4", {"rotation": "shift:ti=1,tj=1"}, "the spec must be a rotation one"),
])
def test_a_game_without_a_paper_row_or_a_wrong_setting_is_one_line(env, settings, message):
    with pytest.raises(UserError, match=message) as caught:
        daylight_specs(env, settings)
    assert "\n" not in str(caught.value)


def test_impact_and_its_standard_error_by_the_formula():
    returns = [3.0, -5.0, 1.0, 9.0]
    value, se = impact_with_se(20.0, returns, -21.0)
    assert value == pytest.approx((20.0 - np.mean(returns)) / 41.0)
    assert se == pytest.approx(np.std(returns, ddof=1) / math.sqrt(4) / 41.0)
    assert impact_with_se(5.0, [5.0, 4.0], 5.0) == (None, None)  # no range between the scores: no number made up


def test_the_claim_needs_comparable_impact_and_a_lower_distance():
    cw = {"impact": 0.9, "impact_se": 0.02, "ssim": 0.7, "lpips": None}
    assert verdict(cw, {"impact": 0.88, "impact_se": 0.01, "ssim": 0.9, "lpips": None}) == "held"
    assert verdict(cw, {"impact": 0.8, "impact_se": 0.01, "ssim": 0.9, "lpips": None}).startswith("not held: impact")
    assert verdict(cw, {"impact": 0.95, "impact_se": 0.01, "ssim": 0.6, "lpips": None}).startswith("not held: 1 − SSIM")
    assert verdict({**cw, "impact": None}, {"impact": None, "impact_se": None, "ssim": 0.9}).startswith("no impact")
    # LPIPS, where measured, decides (here against the SSIM's verdict)
    assert verdict({**cw, "lpips": 0.1}, {"impact": 0.95, "impact_se": 0.0, "ssim": 0.9, "lpips": 0.2}).startswith(
        "not held: LPIPS")


def test_a_daylight_run_reports_what_its_stored_episodes_say(tmp_path):
    """End to end on the zoo's MinAtar agent (cheap frames): every row's impact is the paper's
    formula on the returns the store holds, C&W is beside each, a game without a paper row has
    none, and the job run again adds no episode."""
    from rlgauntlet.experiments.store import ResultsStore
    from rlgauntlet.metrics.impact import ARGMIN_LABEL
    from rlgauntlet.report.tables import daylight_latex, daylight_markdown

    store = tmp_path / "d.sqlite"
    kwargs = dict(settings=MINATAR_SETTINGS, episodes=2, n_envs=2, store=store, cw=CHEAP_CW)
    result = run_daylight("zoo:minatar-breakout-dqn", "MinAtar/Breakout-v1", **kwargs)
    results = ResultsStore(store)
    returns = {meta["spec"]: [r.episode_return for r in results.episodes(run_id)] for run_id, meta in results.runs()}
    clean, floor = np.mean(returns["clean"]), np.mean(returns[ARGMIN_LABEL])
    assert (result["score_max"], result["score_min"]) == (pytest.approx(clean), pytest.approx(floor))
    assert [r["perturbation"] for r in result["rows"]] == list(PERTURBATIONS) and result["game"] is None
    for row in result["rows"] + [result["cw"]]:
        assert row["impact"] == pytest.approx((clean - np.mean(returns[row["spec"]])) / (clean - floor))
    assert all(row["paper"] is None and 0.0 <= row["ssim"] <= 1.0 for row in result["rows"])
    assert result["cw"]["spec"] == CHEAP_CW
    count = results.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    results.close()
    again = run_daylight("zoo:minatar-breakout-dqn", "MinAtar/Breakout-v1", **kwargs)
    results = ResultsStore(store)
    assert results.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == count
    results.close()
    assert [r["impact"] for r in again["rows"]] == [r["impact"] for r in result["rows"]]
    markdown = daylight_markdown(result)
    assert markdown.count("**Table ") == 6 and "| C&W impact | B&C impact |" in markdown
    assert r"$\pm$" in daylight_latex(result) and "±" not in daylight_latex(result)


def test_the_tables_put_the_papers_row_above_ours():
    from rlgauntlet.report.tables import daylight_tables

    paper = PAPER["Pong"]["rotation"]
    row = {"table": 3, "perturbation": "rotation", "column": "Rotation", "spec": paper.spec, "episodes": 10,
           "impact": 0.96, "impact_se": 0.01, "ssim": 0.79, "psnr": 17.9, "lpips": None, "distance": "1 − SSIM",
           "verdict": "held", "paper": {"setting": "3°", "cw_impact": 0.995, "cw_spread": 0.014, "impact": 0.99,
                                        "spread": 0.015, "cw_lpips": 0.245, "lpips": 0.112}}
    result = {"game": "Pong", "env": {"id": "PongNoFrameskip-v4"}, "rows": [row],
              "cw": {"spec": "cw:steps=20", "impact": 0.9, "impact_se": 0.05, "ssim": 0.5, "lpips": None}}
    [(caption, columns, rows)] = daylight_tables(result)
    assert caption.startswith("Table 3:") and columns[1:3] == ["C&W impact", "Rotation impact"]
    assert rows[0][:6] == ["Pong (paper)", "0.995 ± 0.014", "0.990 ± 0.015", "0.245", "0.112", "LPIPS"]
    assert rows[1][:6] == ["Pong (here, 10 episodes)", "0.900 ± 0.050", "0.960 ± 0.010", "0.500", "0.210", "1 − SSIM"]


def test_the_cli_refuses_bad_settings_and_never_replaces_a_foreign_file(tmp_path, cli_main):
    def run(*args):
        return cli_main(["daylight", "--agent", "zoo:minatar-breakout-dqn", "--env", "MinAtar/Breakout-v1", *args])

    for args, message in ((["--out", str(tmp_path / "a")], "none of the paper's games"),
                          (["--out", str(tmp_path / "a"), "--setting", "rotation"], "write PERTURBATION=SPEC"),
                          (["--out", str(tmp_path / "a"), "--setting", "rotation=rotation:degrees=1",
                            "--setting", "rotation=rotation:degrees=2"], "given twice")):
        proc = run(*args)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    settings = [arg for name, spec in MINATAR_SETTINGS.items() for arg in ("--setting", f"{name}={spec}")]
    for agent, env, message in (("zoo:cartpole-dqn", "CartPole-v1", "transforms images, but the agent's input is raw"),
                                ("zoo:pendulum-td3", "Pendulum-v1", "cw changes a discrete action")):
        proc = cli_main(["daylight", "--agent", agent, "--env", env, "--out", str(tmp_path / "v"), *settings])
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
        assert not (tmp_path / "v").exists()  # refused before anything was written
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "daylight.md").write_text("my notes\n")
    proc = run("--out", str(tmp_path / "b"), *settings, "--episodes", "2", "--cw", CHEAP_CW)
    assert proc.returncode == 2 and "was not written by rlgauntlet" in proc.stderr
    assert (tmp_path / "b" / "daylight.md").read_text() == "my notes\n" and not (tmp_path / "a").exists()
    proc = run("--out", str(tmp_path / "c"), *settings, "--episodes", "2", "--n-envs", "2", "--cw", CHEAP_CW)
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads((tmp_path / "c" / "daylight.json").read_text())
    assert len(written["rows"]) == 6 and (tmp_path / "c" / "daylight.tex").read_text().startswith("% generator")
