"""Known answers for the fourth mutation audit's survivors (hardening v4): each test fails on one of
the one-line bugs the audit made in the gauntlet's race, plan, board and leaderboard and in the
release reader, on a case where the wrong implementation gives another answer (never a
degenerate one: finalists whose order and reverse order differ, the very last reported episode on
the first selection seed, an env whose budgets differ from the global grid). Then the tables' and
messages' cases the v4 probe found, each with the text it must (and must not) hold."""

from __future__ import annotations

import pytest
import torch

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec


def test_after_the_last_round_the_finalists_are_the_lowest_selection_means():
    """z so large that no member is dropped on its gap: only the final cut decides, keeping the
    two lowest means (b, d); a reversed sort would keep the two highest (c, a)."""
    from rlgauntlet.gauntlet.race import RaceRule

    returns = {"a": [5.0, 5.1], "b": [1.0, 1.1], "c": [9.0, 9.1], "d": [3.0, 3.1]}
    drops = RaceRule(first=2, z=1e9, finalists=2).decide(returns, last=True)
    assert sorted(drops) == ["a", "c"]
    assert RaceRule(first=2, z=1e9, finalists=2).decide(returns, last=False) == {}


def test_a_seed_whose_last_reported_episode_is_the_first_selection_seed_is_refused():
    from rlgauntlet.gauntlet.race import SELECTION_SEED, check_disjoint

    check_disjoint([SELECTION_SEED - 10], episodes=10, selection_episodes=4)  # last episode: SELECTION_SEED - 1
    with pytest.raises(UserError, match=f"reach env seed {SELECTION_SEED}"):
        check_disjoint([SELECTION_SEED - 9], episodes=10, selection_episodes=4)


@pytest.fixture(scope="module")
def walker_agent(tmp_path_factory):
    """A TorchScript deterministic policy of Walker2d's sizes (17 observations, 6 actions)."""
    path = tmp_path_factory.mktemp("walker") / "walker.pt"
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(17, 6), torch.nn.Tanh())), str(path))
    return path


def test_a_walker2d_plan_runs_the_papers_walker_grid_and_headline(tmp_path, walker_agent):
    """mujoco v4 budgets per env: Walker2d's grid (0.025 … 0.1) and headline 0.05, not the global
    headline 0.075; every heuristic member and learned attacker is at one of Walker2d's ε."""
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.gauntlet.plan import plan_gauntlet
    from rlgauntlet.gauntlet.protocols import get_protocol

    spec = AgentSpec(agent=f"torchscript:{walker_agent}", kind="deterministic", input_space="raw")
    plan = plan_gauntlet(spec, "Walker2d-v5", level="quick", store=tmp_path / "g.sqlite")
    assert get_protocol("mujoco").headline_eps == "0.075"  # the global headline differs from Walker2d's
    assert plan.protocol.headline_eps == "0.05"
    assert {t.eps for t in plan.tasks} == {"0.05"}  # quick: learned attackers at the headline only
    assert {plan.eps_of(s) for s in plan.heuristics} == {0.025, 0.05, 0.075, 0.1}
    cheetah = get_protocol("mujoco").for_env("HalfCheetah-v5")
    assert (cheetah.headline_eps, cheetah.eps_grid) == ("0.15", ("0.05", "0.1", "0.15", "0.2"))


def test_every_director_the_gauntlet_plans_stops_on_the_protocols_patience(tmp_path, walker_agent, monkeypatch):
    """The plan's attacker tasks carry the protocol's patience (3), and the worker hands it to the
    director's training (a director that stalls stops at its patience checkpoint)."""
    from rlgauntlet.experiments import attacker_job as attackers
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.gauntlet.plan import plan_gauntlet
    from rlgauntlet.gauntlet.run import train_attacker_task

    spec = AgentSpec(agent=f"torchscript:{walker_agent}", kind="deterministic", input_space="raw")
    plan = plan_gauntlet(spec, "Walker2d-v5", level="quick", store=tmp_path / "g.sqlite")
    directors = [t for t in plan.tasks if t.method != "robust-sarsa"]
    assert directors and {t.patience for t in directors} == {plan.protocol.attacker_patience} == {3}
    seen = {}
    monkeypatch.setattr(attackers, "train_attacker", lambda *a, **k: seen.update(k) or {"steps": 1})
    train_attacker_task(directors[0])
    assert seen["patience"] == 3


def _store_with(path, runs):
    from rlgauntlet.experiments.store import ResultsStore, run_key

    store = ResultsStore(path)
    for i, (env, metrics) in enumerate(runs):
        meta = {"protocol": "mujoco", "version": 4, "level": "standard", "env": env, "agent": f"a{i}",
                "sha256": f"s{i}", "method": f"m{i}"}
        run = store.create_run(run_key(meta), meta, kind="gauntlet")
        for name, value in metrics.items():
            store.add_metric(run, name, value)
        store.add_metric(run, "clean_return", 3000.0)
    store.close()


def test_the_leaderboard_scores_each_env_at_its_own_headline(tmp_path):
    """A Walker2d result is scored at Walker2d's headline 0.05 (1200 here), never at the global
    0.075 (400 here); a Hopper result at 0.075."""
    from rlgauntlet.gauntlet.leaderboard import leaderboard

    _store_with(tmp_path / "s.sqlite", [("Walker2d-v4", {"worst_case@0.05": 1200.0, "worst_case@0.075": 400.0}),
                                        ("Hopper-v5", {"worst_case@0.05": 900.0, "worst_case@0.075": 700.0})])
    boards = leaderboard([tmp_path / "s.sqlite"])["boards"]
    scores = {b["env"]: [r["scores"] for r in b["rows"]] for b in boards}
    assert scores == {"Walker2d-v4": [[1200.0]], "Hopper-v5": [[700.0]]}
    assert {b["env"]: b["headline_eps"] for b in boards} == {"Walker2d-v4": "0.05", "Hopper-v5": "0.075"}


# --- tables and messages ------------------------------------------------------------------------------

def test_a_stored_version_that_is_a_string_is_unscored_saying_so(tmp_path):
    from rlgauntlet.experiments.store import ResultsStore, run_key
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.report.tables import board_latex, board_markdown

    store = ResultsStore(tmp_path / "s.sqlite")
    for i, version in enumerate(("2", 2)):
        meta = {"protocol": "classic", "version": version, "level": "quick", "env": "CartPole-v1", "agent": f"a{i}",
                "sha256": f"s{i}", "method": f"m{i}"}
        run = store.create_run(run_key(meta), meta, kind="gauntlet")
        store.add_metric(run, "worst_case@0.1", 100.0)
    store.close()
    result = leaderboard([tmp_path / "s.sqlite"])
    stringy = next(b for b in result["boards"] if b["version"] == "2")
    reasons = " ".join(m["reason"] for m in stringy["missing"])
    assert stringy["rows"] == [] and "'2' is not a whole number" in reasons and "knows" not in reasons
    for text in (board_markdown(result), board_latex(result)):
        assert "None" not in text and "Nothing ranked" in text


def test_latex_escapes_each_special_character_once_and_markdown_keeps_a_row_on_one_line():
    from rlgauntlet.report.tables import _latex_escape, board_markdown

    assert _latex_escape("a\\b_{c}") == r"a\textbackslash{}b\_\{c\}"
    assert _latex_escape("x % & $ # ~ ^") == r"x \% \& \$ \# \textasciitilde{} \textasciicircum{}"
    board = {"boards": [{"protocol": "classic", "version": 2, "level": "quick", "env": "CartPole-v1",
                         "headline_eps": "0.1", "rows": [{"rank": 1, "method": "two\nlines | here", "agents": 1,
                                                          "iqm": 10.0, "ci_low": None, "ci_high": None}]}]}
    rows = [line for line in board_markdown(board).splitlines() if line.startswith("| 1 |")]
    assert rows == ["| 1 | two lines \\| here | 1 | 10 | – | – | – | – | 0 |"]


def test_the_certified_suite_on_an_lstm_agent_says_no_certification_applies():
    from types import SimpleNamespace

    from rlgauntlet.threats.suites import suite_specs

    lstm = SimpleNamespace(recurrent=True, is_discrete=False)
    with pytest.raises(UserError, match="recurrent") as err:
        suite_specs("certified", lstm, "0.1")
    assert "rlgauntlet certify" not in str(err.value) and "drop certified" in str(err.value)


def test_a_missing_released_attacker_is_an_attacker_file_with_its_own_fix(tmp_path):
    from rlgauntlet.victims.pg_release import read_release

    with pytest.raises(UserError) as err:
        read_release(tmp_path / "attack.model", role="attacker")
    assert str(err.value).startswith("attacker file") and "pg:PATH" not in str(err.value)


@pytest.mark.parametrize("since, known", [(1, "it knows v1 to v2"), (2, "it knows v2")])
def test_an_unknown_versions_reason_names_the_versions_this_rlgauntlet_knows(since, known, monkeypatch):
    from dataclasses import replace

    from rlgauntlet.gauntlet import leaderboard as board_module
    from rlgauntlet.gauntlet.protocols import get_protocol

    protocol = replace(get_protocol("classic"), version=2, headline_since=since)
    reason = board_module._why_unscored({}, protocol, 999, None)
    assert reason == f"version 999: a version this rlgauntlet does not know ({known}), so its headline ε is unknown"


# --- plan.py's survivors of the v4 mutation check -----------------------------------------------------

def test_the_races_selection_cells_are_greedy_on_selection_seeds_without_clean_or_argmin(tmp_path):
    from rlgauntlet.experiments.store import store_of
    from rlgauntlet.gauntlet.plan import plan_gauntlet
    from rlgauntlet.gauntlet.race import SELECTION_SEED

    plan = plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=tmp_path / "g.sqlite")
    with store_of(None) as store:
        cells = plan.selection_cells(store, plan.heuristics[:2], 4)
    assert cells.seed == SELECTION_SEED and cells.episodes == 4
    assert [c.label for c in cells.cells] == plan.heuristics[:2]
    assert all(c.deterministic for c in cells.cells)


@pytest.mark.parametrize("manifest, done", [
    (None, False), ("not json", False), ({"steps": 199}, False), ({"steps": 200}, True),
    ({"steps": 50, "stopped_early": True}, True),
])
def test_a_learned_attacker_is_done_at_its_budget_or_when_its_patience_stopped_it(manifest, done, tmp_path):
    import json

    from rlgauntlet.gauntlet.plan import AttackerTask

    task = AttackerTask(AgentSpec(agent="zoo:cartpole-dqn"), "CartPole-v1", "paad", "0.1", 0.1, 0, 200, str(tmp_path), "default", "last", 3)
    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    assert task.done() is done


def test_every_learned_attacker_of_a_grid_level_has_a_folder_of_its_own(tmp_path, walker_agent):
    """At the paper level the directors learn at every ε of the grid: one folder each (a folder
    shared by two ε would resume one director as the other), Robust Sarsa's Q in its own."""
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.gauntlet.plan import plan_gauntlet

    spec = AgentSpec(agent=f"torchscript:{walker_agent}", kind="deterministic", input_space="raw")
    plan = plan_gauntlet(spec, "Walker2d-v5", level="paper", store=tmp_path / "g.sqlite")
    folders = [t.folder for t in plan.tasks]
    assert len(set(folders)) == len(folders) and {t.eps for t in plan.tasks} >= {"0.025", "0.05", "0.075", "0.1"}
    sarsa = [t.folder for t in plan.tasks if t.method == "robust-sarsa"]
    assert sarsa and all("-q-" in f.rsplit("/", 1)[-1] for f in sarsa)


def test_an_agents_cache_folder_is_named_by_the_first_16_hex_digits_of_its_sha256(tmp_path):
    """``gauntlet-cache/<first 16 hex of the sha256>/<env>/`` beside the store (``agent_cache``'s
    contract): a user finds an agent's trained attackers there, and boards run before find theirs."""
    from rlgauntlet.gauntlet.cache import agent_cache

    sha = "0123456789abcdef" + "f" * 48
    expected = tmp_path / "gauntlet-cache" / "0123456789abcdef" / "CartPole-v1"
    assert agent_cache(tmp_path / "g.sqlite", sha, "CartPole-v1") == expected


def test_a_gauntlet_plan_races_its_heuristics_unless_asked_to_run_them_all(tmp_path):
    from rlgauntlet.gauntlet.plan import plan_gauntlet

    assert plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=tmp_path / "g.sqlite").exhaustive is False
    assert plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=tmp_path / "g.sqlite",
                         exhaustive=True).exhaustive is True
