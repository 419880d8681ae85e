"""A board: several agents' gauntlets planned and run as one plan. Its results must be the ones
each agent's own gauntlet gives (same seeds, same episodes), written to one store the
leaderboard ranks; bad board files are one-line errors naming the agent or field."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlgauntlet.errors import UserError
from rlgauntlet.gauntlet import protocols as protocols_module
from rlgauntlet.gauntlet.protocols import Level, Protocol

SMALL = Protocol(name="classic", version=2, families=("classic",), summary="a board, end to end",
                 eps_grid=("0.1",), headline_eps="0.1", budget_note="raw", learned=("paad",), learned_continuous=(),
                 shifts=lambda env, extent: ["physics:param=length,scale=2"], natural=False, certify=False,
                 levels={name: Level(4, 2048, "headline", "reduced") for name in protocols_module.LEVELS},
                 heuristics={"q": ("random", "pgd:objective=maxdiff", "momentum"),
                             "categorical": ("random", "pgd:objective=maxdiff", "momentum")})


@pytest.fixture()
def small_protocol(monkeypatch):
    monkeypatch.setitem(protocols_module.PROTOCOLS, "classic", SMALL)
    return SMALL


def _strip(result: dict) -> dict:
    """A result without what differs between runs of the same episodes (time, paths)."""
    drop = {"seconds", "store", "folder", "train_seconds"}

    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    out = clean(result)
    for row in out["worst_case"]:  # a learned attacker's label is its method and ε, its folder differs
        row["members"] = dict(sorted(row["members"].items()))
        row.pop("spec")  # names that folder when a learned attacker is the worst case (its label is compared)
    return out


def test_a_board_gives_each_agent_the_result_of_its_own_gauntlet(small_protocol, tmp_path):
    from rlgauntlet.gauntlet.board import Board, plan_board
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.gauntlet.run import run_gauntlet, run_plans

    board = Board.model_validate({"envs": ["CartPole-v1"], "level": "quick",
                                  "agents": [{"agent": "zoo:cartpole-dqn", "method": "dqn"},
                                             {"agent": "zoo:cartpole-ppo", "method": "ppo"}]})
    plans, methods = plan_board(board, tmp_path / "board" / "g.sqlite")
    stages = []
    # the first agent confirmed at 6 episodes (the level runs 4), the second not: one count per plan
    together = run_plans(plans, workers=2, methods=methods, on_stage=lambda *a: stages.append(a),
                         confirm_episodes=[6, 0])
    assert together[0]["confirmed"]["worst_case"]["episodes"] == 6 and "confirmed" not in together[1]
    # one stage per phase for the whole board: every agent's cells in the same executor calls
    assert [s[0] for s in stages].count("learned attackers") == 1 and [s[0] for s in stages].count("episodes") == 2
    budget = sum(t.steps for plan in plans for t in plan.tasks)  # the stage counts director steps
    assert len([t for plan in plans for t in plan.tasks]) == 2 and ("learned attackers", 0, budget) in stages
    for result, agent, method in zip(together, ["zoo:cartpole-dqn", "zoo:cartpole-ppo"], ["dqn", "ppo"]):
        alone = run_gauntlet(agent, "CartPole-v1", level="quick", store=tmp_path / agent.split(":")[1] / "g.sqlite",
                             method=method)
        assert _strip({k: v for k, v in result.items() if k != "confirmed"}) == _strip(alone)
    ranked = leaderboard([tmp_path / "board" / "g.sqlite"])
    assert sorted(r["method"] for r in ranked["boards"][0]["rows"]) == ["dqn", "ppo"]


def test_a_board_transfers_each_agents_strongest_director_to_the_other_agents(monkeypatch, tmp_path):
    """Transfer (gauntlet.transfer): each agent receives the other agent's trained director as a
    member, named with its donor, raced and run in full on the reported seeds; its reported
    return is the one the donor's director gives when evaluated on this agent on its own (same
    seeds), and it joins the strongest-of. A board run again trains and runs nothing."""
    from dataclasses import replace

    from rlgauntlet.experiments.evaluate import evaluate
    from rlgauntlet.gauntlet.board import Board, plan_board
    from rlgauntlet.gauntlet.run import run_plans

    monkeypatch.setitem(protocols_module.PROTOCOLS, "classic", replace(SMALL, transfer=True))
    board = Board.model_validate({"envs": ["CartPole-v1"], "level": "quick",
                                  "agents": [{"agent": "zoo:cartpole-dqn", "method": "dqn"},
                                             {"agent": "zoo:cartpole-ppo", "method": "ppo"}]})
    plans, methods = plan_board(board, tmp_path / "board" / "g.sqlite")
    results = run_plans(plans, workers=2, methods=methods)
    for result, plan, donor in zip(results, plans, reversed(plans)):
        [member] = result["transfer"]["members"]
        [task] = donor.tasks
        assert member["donor"] == donor.spec.agent and member["donor_sha256"] == donor.sha != plan.sha
        assert member["attack"] == f"paad:eps=0.1 (from {donor.spec.agent})" and task.folder in member["director"]
        [worst] = result["worst_case"]
        assert worst["members"][member["attack"]] == pytest.approx(member["return_mean"])
        assert worst["return_mean"] == pytest.approx(min(worst["members"].values()))
        alone = evaluate(plan.spec, "CartPole-v1", [member["director"]], episodes=plan.settings.episodes,
                         seed=plan.seeds[0], impact=False)
        assert alone.evaluations[-1]["return_mean"] == pytest.approx(member["return_mean"])
    stages = []
    again = run_plans(plans, workers=2, methods=methods, on_stage=lambda *a: stages.append(a))
    assert all(done == total for _, done, total in stages if _ != "certification and checks"), stages
    assert [r["transfer"] for r in again] == [r["transfer"] for r in results]


def test_the_cli_runs_a_board_file_and_writes_each_result_and_the_leaderboard(small_protocol, tmp_path, cli_env,
                                                                              cli_main):
    board = tmp_path / "board.yaml"
    board.write_text("name: cartpole\nlevel: quick\nagents:\n  - {agent: zoo:cartpole-dqn, method: dqn}\n")
    script = tmp_path / "run.py"  # the small protocol, set in the process that runs the CLI
    script.write_text(  # guarded: the executor's worker processes import this file again
        "import sys\nif __name__ == '__main__':\n    from rlgauntlet.gauntlet import protocols\n"
        "    sys.path.insert(0, sys.argv[1])\n    import test_board\n"
        "    protocols.PROTOCOLS['classic'] = test_board.SMALL\n    from rlgauntlet.cli import main\n"
        "    sys.argv = ['rlgauntlet', *sys.argv[2:]]\n    main()\n")
    from pathlib import Path

    tests = str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, str(script), tests, "gauntlet", "--agents", str(board), "--out",
                           str(tmp_path / "out"), "--workers", "2"], capture_output=True, text=True, env=cli_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "results" / "zoo_cartpole-dqn-CartPole-v1.json").read_text())
    assert result["agent"]["method"] == "dqn" and result["race"]["raced"]
    page = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    assert page["boards"][0]["rows"][0]["method"] == "dqn"
    bad = cli_main(["gauntlet", "--agents", str(board), "--agent", "zoo:cartpole-dqn", "--out", str(tmp_path / "o2")])
    assert bad.returncode == 2 and "drop --agent" in bad.stderr


def test_bad_board_files_are_one_line_errors(tmp_path):
    from rlgauntlet.gauntlet.board import load_board, plan_board

    path = tmp_path / "b.yaml"
    path.write_text("agents: []\n")
    with pytest.raises(UserError, match="agents: List should have at least 1 item"):
        load_board(path)
    path.write_text("agents:\n  - {agent: zoo:cartpole-dqn, allow_pickle: true}\n")
    with pytest.raises(UserError, match="pass --allow-pickle"):
        load_board(path)
    path.write_text("agents: [sb3:agent.zip]\n")
    with pytest.raises(UserError, match="names no env"):
        plan_board(load_board(path), tmp_path / "g.sqlite")
    path.write_text("envs: [CartPole-v1]\nagents: [zoo:cartpole-dqn, zoo:hopper-ppo]\n")
    with pytest.raises(UserError, match="board agent zoo:hopper-ppo on CartPole-v1: "):
        plan_board(load_board(path), tmp_path / "g.sqlite")
    assert not (tmp_path / "g.sqlite").exists()  # nothing written before every plan is checked


def test_every_board_file_of_the_repository_is_valid_and_names_known_agents():
    from pathlib import Path

    from rlgauntlet.gauntlet.board import load_board
    from rlgauntlet.published import release
    from rlgauntlet.zoo import zoo_entry

    boards = sorted((Path(__file__).resolve().parents[1] / "boards").glob("*.yaml"))
    assert boards
    for path in boards:
        board = load_board(path)
        for agent in board.agents:
            source, _, name = agent.agent.partition(":")
            if source == "sb3":  # only our own checkpoints, committed: the files must be in the tree
                assert name.startswith("checkpoints/"), f"{path.name}: {agent.agent}"
                for file in (name, agent.vecnormalize):
                    assert file is None or (path.parents[1] / file).is_file(), (path.name, file)
                continue
            assert source in ("published", "zoo"), f"{path.name}: {agent.agent}"
            (release if source == "published" else zoo_entry)(name)  # raises for an unknown name


# --- hardening v4: boards that never lose or ignore anything ---------------------------------------

@pytest.mark.parametrize("text, message", [
    ("agents:\n  - {agent: zoo:cartpole-dqn, method: a}\n  - {agent: zoo:cartpole-dqn, method: b}\n",
     r"zoo:cartpole-dqn on CartPole-v1 is listed twice \(method 'a' and 'b'\)"),
    ("agents: [zoo:cartpole-dqn, zoo:cartpole-dqn]\n", "zoo:cartpole-dqn on CartPole-v1 is listed twice"),
    ("envs: [CartPole-v1, CartPole-v1]\nagents: [zoo:cartpole-ppo]\n", "zoo:cartpole-ppo on CartPole-v1 is listed twice"),
])
def test_an_agent_listed_twice_on_one_env_is_refused_before_anything_is_written(tmp_path, text, message):
    from rlgauntlet.gauntlet.board import load_board, plan_board

    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        plan_board(load_board(path), tmp_path / "g.sqlite")
    assert not (tmp_path / "g.sqlite").exists()


@pytest.mark.parametrize("key, message", [
    ("level: bogus", r"level: 'bogus' is unknown"),
    ("protocol: nope", r"protocol: 'nope' is unknown"),
    ("protocol: pixel", r"protocol: pixel is for .* drop protocol:"),
    ("seeds: [0, 0]", r"seeds: 0 0: give each seed once, e.g. seeds: \[0, 1, 2\]"),
    ("seeds: [999999]", r"seeds: reach env seed 1000000"),
])
def test_a_refusal_about_a_board_key_names_the_key_not_a_command_line_option(tmp_path, key, message):
    from rlgauntlet.gauntlet.board import load_board, plan_board

    path = tmp_path / "b.yaml"
    path.write_text(f"{key}\nagents: [zoo:cartpole-dqn]\n")
    with pytest.raises(UserError, match=message) as err:
        plan_board(load_board(path), tmp_path / "g.sqlite")
    assert not any(f"--{name}" in str(err.value) for name in ("level", "protocol", "seeds"))


def test_a_boards_seeds_are_the_plans_and_an_agents_own_envs_beat_the_boards(small_protocol, tmp_path):
    from rlgauntlet.gauntlet.board import Board, plan_board

    board = Board.model_validate({"envs": ["CartPole-v1"], "level": "quick", "seeds": [7, 3],
                                  "agents": [{"agent": "zoo:cartpole-dqn"},
                                             {"agent": "zoo:cartpole-ppo", "envs": ["CartPole-v0"]}]})
    plans, _ = plan_board(board, tmp_path / "g.sqlite")
    assert [(p.spec.agent, p.env) for p in plans] == [("zoo:cartpole-dqn", "CartPole-v1"),
                                                      ("zoo:cartpole-ppo", "CartPole-v0")]
    assert all(p.seeds == [7, 3] for p in plans)
    default, _ = plan_board(board.model_copy(update={"seeds": None}), tmp_path / "g.sqlite")
    assert default[0].seeds == list(small_protocol.levels["quick"].seeds) != [7, 3]


@pytest.mark.parametrize("option", [["--level", "paper"], ["--method", "x"], ["--precision", "float32"],
                                    ["--device", "cpu"], ["--kind", "q"], ["--vecnormalize", "v.pkl"],
                                    ["--input-space", "raw"], ["--other-env"], ["--seeds", "1"], ["--lstm-directors"]])
def test_every_option_a_board_decides_is_refused_with_agents_naming_the_board_key(tmp_path, cli_main, option):
    path = tmp_path / "b.yaml"
    path.write_text("agents: [zoo:cartpole-dqn]\n")
    res = cli_main(["gauntlet", "--agents", str(path), "--out", str(tmp_path / "out"), *option])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"{option[0]}: with --agents the board file decides it; set " in lines[0]
    assert not (tmp_path / "out").exists()


def test_lstm_directors_on_a_board_are_a_key_of_the_agent_and_a_wrong_value_is_one_line(tmp_path):
    """The fix --lstm-directors' refusal names (lstm_directors: true on the agent) plans the LSTM
    directors for that agent only; a value that is not a boolean is refused naming the key."""
    from rlgauntlet.gauntlet.board import load_board, plan_board

    path = tmp_path / "b.yaml"
    path.write_text("level: quick\nagents:\n  - {agent: zoo:cartpole-dqn, lstm_directors: true}\n"
                    "  - zoo:cartpole-ppo\n")
    (asked, plain), _ = plan_board(load_board(path), tmp_path / "g.sqlite")
    assert asked.lstm_directors and [t.label for t in asked.tasks if t.recurrent] == ["paad@lstm:eps=0.1", "sarl@lstm:eps=0.1"]
    assert not plain.lstm_directors and not any(t.recurrent for t in plain.tasks)
    path.write_text("agents:\n  - {agent: zoo:cartpole-dqn, lstm_directors: sometimes}\n")
    with pytest.raises(UserError, match="lstm_directors") as caught:
        load_board(path)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "g.sqlite").exists()


def test_board_seeds_that_reach_the_last_race_rounds_selection_episodes_are_refused(tmp_path):
    """The quick level races in rounds of 2 and 4 selection episodes (env seeds 1000000 … 1000003):
    a seed whose episodes start at 1000002 reaches only the last round's, and is refused."""
    from rlgauntlet.gauntlet.board import Board, plan_board
    from rlgauntlet.gauntlet.protocols import get_protocol
    from rlgauntlet.gauntlet.race import SELECTION_SEED

    protocol = get_protocol("classic")
    assert protocol.race.rounds(protocol.levels["quick"].episodes)[-1] == 4
    board = Board.model_validate({"level": "quick", "seeds": [SELECTION_SEED + 2], "agents": ["zoo:cartpole-dqn"]})
    with pytest.raises(UserError, match=f"seeds: reach env seed {SELECTION_SEED + 2}"):
        plan_board(board, tmp_path / "g.sqlite")


def test_the_users_allow_pickle_reaches_every_agent_of_a_board(tmp_path):
    from rlgauntlet.gauntlet.board import Board, plan_board

    board = Board.model_validate({"level": "quick", "agents": ["zoo:cartpole-dqn", "zoo:cartpole-ppo"]})
    plans, _ = plan_board(board, tmp_path / "g.sqlite", allow_pickle=True)
    assert [p.spec.allow_pickle for p in plans] == [True, True]
    plans, _ = plan_board(board, tmp_path / "g.sqlite")
    assert [p.spec.allow_pickle for p in plans] == [False, False]


def test_every_shipped_board_file_loads_and_names_catalogued_agents():
    """The boards/ files (the published boards) parse, and every agent resolves to an env from its
    catalogue entry without a clone: a typo in a name or a board key fails here, not hours into a run."""
    from pathlib import Path

    from rlgauntlet.gauntlet.board import agent_envs, load_board
    from rlgauntlet.gauntlet.summary import method_of

    files = sorted((Path(__file__).resolve().parents[1] / "boards").glob("*.yaml"))
    assert len(files) >= 6
    for path in files:
        board = load_board(path)
        for agent in board.agents:
            assert agent_envs(agent, board), (path.name, agent.agent)
            if agent.agent.startswith("published:"):  # one name for one release, on every board and when unnamed
                assert agent.method == method_of(agent.agent), (path.name, agent.agent)


def test_a_board_under_a_version_keeping_an_earlier_ones_directors_reports_everything_that_one_did(
        monkeypatch, tmp_path):
    """The board loop's replay of the earlier version's transfer race (gauntlet.transfer). A board
    runs under v2 (SA-RL directors, each donor's strongest transferred), then in the same store under
    a v3 that keeps v2's directors, adds PA-AD ones (as mujoco v6 adds its official-attack director)
    and transfers each donor's two strongest through a race that keeps one finalist. On CartPole the
    PA-AD director is far stronger (about 27 against 500 on selection episodes), so v3's own race
    drops the SA-RL member v2 ran in full; the replay must still run it. v3 trains only the PA-AD
    directors, every member v2 ran in full has the same return under v3, ``kept_by_earlier_version``
    names exactly those v3's race dropped (here the SA-RL one), and no worst case is above v2's.
    Without the replay the dropped member has no return under v3."""
    from dataclasses import replace

    from rlgauntlet.gauntlet.board import Board, plan_board
    from rlgauntlet.gauntlet.race import RaceRule
    from rlgauntlet.gauntlet.run import run_plans

    earlier = replace(SMALL, learned=("sarl",), transfer=True, race=RaceRule(finalists=1))
    newer = replace(earlier, version=3, learned=("paad", "sarl"), directors_of=2, transfer_directors=2, replays=(2,))
    board = Board.model_validate({"envs": ["CartPole-v1"], "level": "quick",
                                  "agents": [{"agent": "zoo:cartpole-dqn", "method": "dqn"},
                                             {"agent": "zoo:cartpole-ppo", "method": "ppo"}]})
    store = tmp_path / "board" / "g.sqlite"
    monkeypatch.setitem(protocols_module.PROTOCOLS, "classic", earlier)
    plans, methods = plan_board(board, store)
    before = run_plans(plans, workers=2, methods=methods)
    monkeypatch.setitem(protocols_module.PROTOCOLS, "classic", newer)
    monkeypatch.setitem(protocols_module.EARLIER, "classic@v2", earlier)
    plans, methods = plan_board(board, store)
    stages = []
    after = run_plans(plans, workers=2, methods=methods, on_stage=lambda *a: stages.append(a))
    # in director steps: v2's two SA-RL directors reused, the PA-AD ones trained
    tasks = [t for plan in plans for t in plan.tasks]
    reused = sum(t.steps for t in tasks if t.method == "sarl")
    assert len(tasks) == 4 and 0 < reused < sum(t.steps for t in tasks)
    assert ("learned attackers", reused, sum(t.steps for t in tasks)) in stages
    for old, new in zip(before, after):
        assert old["protocol"]["version"] == 2 and new["protocol"]["version"] == 3
        ran = {m["attack"]: m["return_mean"] for m in old["transfer"]["members"] if "return_mean" in m}
        assert len(ran) == 1 and len(old["transfer"]["members"]) == 1  # v2: one member, its race's finalist
        rows = {m["attack"]: m for m in new["transfer"]["members"]}
        assert len(rows) == 2 and set(ran) <= set(rows)
        for attack, mean in ran.items():
            assert rows[attack]["return_mean"] == pytest.approx(mean)
        dropped_by_v3 = [a for a in ran if rows[a]["selection"]["dropped_after_round"] is not None]
        assert new["transfer"]["kept_by_earlier_version"] == dropped_by_v3 == [next(iter(ran))]
        assert next(iter(ran)).startswith("sarl:")
        for was, now in zip(old["worst_case"], new["worst_case"]):
            assert now["return_mean"] <= was["return_mean"] + 1e-9



def test_confirm_episodes_at_or_below_the_level_is_refused_with_a_count_that_works(tmp_path, cli_main):
    """With --agents too (the option is the board's as well, not ignored there): one line, exit 2,
    nothing written; the count the refusal suggests is one the level accepts, at every level
    (the paper level's 50 episodes included, where 50 would be refused again)."""
    import re

    from rlgauntlet.cli.gauntlet import _check_confirm

    path = tmp_path / "b.yaml"
    path.write_text("agents: [zoo:cartpole-dqn]\nlevel: quick\n")
    res = cli_main(["gauntlet", "--agents", str(path), "--out", str(tmp_path / "out"), "--confirm-episodes", "10"])
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "--confirm-episodes 10: the quick level already runs 10 episodes" in lines[0]
    assert not (tmp_path / "out").exists()
    for level, episodes in (("quick", 10), ("paper", 50)):
        with pytest.raises(UserError) as refused:
            _check_confirm(episodes, episodes, level)
        suggested = int(re.search(r"e\.g\. --confirm-episodes (\d+)", str(refused.value)).group(1))
        _check_confirm(suggested, episodes, level)  # accepted
        assert suggested > episodes
