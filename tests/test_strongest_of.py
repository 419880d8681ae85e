"""The strongest-of protocol: per budget, the minimum mean return over several attacks and
which attack achieved it, in the Report, the store and the CLI."""

import json

import pytest

from rlgauntlet import evaluate
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.threats.spec import split_spec_list


def test_spec_lists_split_where_a_new_threat_starts():
    assert split_spec_list("random,maxdiff") == ["random", "maxdiff"]
    assert split_spec_list("pgd:eps=0.1,steps=30,maxdiff:eps=0.1,random") == ["pgd:eps=0.1,steps=30", "maxdiff:eps=0.1",
                                                                             "random"]
    assert split_spec_list('paad:attacker="runs/a,b",eps=0.1,sarl:attacker=x,eps=0.1') == [
        'paad:attacker="runs/a,b",eps=0.1', "sarl:attacker=x,eps=0.1"]


def test_strongest_of_reports_the_minimum_per_budget_and_its_attack(tmp_path):
    store = tmp_path / "s.sqlite"
    report = evaluate("zoo:cartpole-dqn", "CartPole-v1", strongest_of=["random", "fgsm", "pgd:objective=maxdiff,steps=5"],
                      eps_grid="0.05,0.1", episodes=3, impact=False, store=store)
    rows = {row["eps"]: row for row in report.strongest_of}
    assert set(rows) == {0.05, 0.1}
    by_spec = {ev["spec"]: ev for ev in report.evaluations}
    for eps, row in rows.items():
        members = [s for s in by_spec if s.endswith(f"eps={eps}")]
        assert sorted(row["attacks"]) == sorted(members) and len(members) == 3
        lowest = min(by_spec[s]["return_mean"] for s in members)
        assert row["return_mean"] == lowest
        assert by_spec[row["winner"]]["return_mean"] == lowest
        assert row["winner"] == next(s for s in row["attacks"] if by_spec[s]["return_mean"] == lowest)  # first listed
    assert rows[0.1]["return_mean"] < 100  # MaxDiff topples the DQN agent at 0.1
    data = json.loads(json.dumps(report.to_dict()))
    assert data["strongest_of"] == report.strongest_of
    results = ResultsStore(store)
    runs = results.runs(kind="strongest_of")
    assert len(runs) == 2
    for run_id, meta in runs:
        row = rows[meta["eps"]]
        assert meta["winner"] == row["winner"] and set(meta["members"]) == set(row["attacks"])
        assert results.metrics(run_id)["return_mean"]["value"] == row["return_mean"]
    results.close()


def test_strongest_of_one_attack_is_an_error():
    with pytest.raises(UserError, match="at least two"):
        evaluate("zoo:cartpole-dqn", "CartPole-v1", strongest_of=["random:eps=0.1"], episodes=1, impact=False)
