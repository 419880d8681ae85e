"""The gauntlet's race over heuristic members (successive halving on selection episodes): known
answers for the drop rule, the seeds it uses, and a race that resumes where it was killed."""

from __future__ import annotations

import dataclasses
import math

import pytest

from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import AgentSpec
from rlgauntlet.gauntlet.race import SELECTION_SEED, RaceRule, check_disjoint


def constructed_returns(means: dict[str, float], spread: float, n: int) -> dict[str, list[float]]:
    """Returns whose mean over any even number of episodes is exactly the member's mean (the
    deviations alternate -spread, +spread), so each round's ranking is the known one."""
    return {m: [mu + (spread if k % 2 else -spread) for k in range(n)] for m, mu in means.items()}


def race_on(rule: RaceRule, returns_of: dict[str, list[float]], episodes: int) -> tuple[dict[str, int], list[str]]:
    """Run the rule's rounds on ``returns_of(member, n)``: (round each dropped member left, finalists)."""
    alive = list(returns_of)
    dropped: dict[str, int] = {}
    rounds = rule.rounds(episodes)
    for index, n in enumerate(rounds):
        decision = rule.decide({m: returns_of[m][:n] for m in alive}, last=index == len(rounds) - 1)
        for m in decision:
            dropped[m] = index
        alive = [m for m in alive if m not in decision]
    return dropped, alive


def test_the_rounds_double_from_the_first_while_at_most_half_the_full_count():
    assert RaceRule(first=2).rounds(10) == [2, 4]
    assert RaceRule(first=2).rounds(20) == [2, 4, 8]
    assert RaceRule(first=2).rounds(50) == [2, 4, 8, 16]
    assert RaceRule(first=2).rounds(5) == [2] and RaceRule(first=2).rounds(4) == [2]
    assert RaceRule(first=3).rounds(5) == [] and RaceRule(first=2).rounds(3) == []  # no race: it would cost more


def test_the_race_never_drops_the_member_a_full_run_ranks_lowest():
    means = {"random": 480.0, "fgsm": 120.0, "pgd": 60.0, "momentum": 64.0, "maxdiff": 300.0, "minq": 58.0}
    returns = constructed_returns(means, spread=10.0, n=16)
    dropped, finalists = race_on(RaceRule(first=2, z=2.0), returns, episodes=20)
    lowest = min(means, key=means.get)
    assert lowest == "minq" and lowest in finalists
    # the known answer: pooled sd = spread·√(n/(n−1)); at n = 2 the se of each member is 10, the
    # threshold 2·√200 = 28.3: 480, 120 and 300 are far above 58 and go in round 0; 60 and 64 stay
    assert dropped == {"random": 0, "fgsm": 0, "maxdiff": 0}
    # at n = 8 (the last round) the se is 10·√(8/7)/√8 = 3.78, the threshold 10.7: 64 and 60 stay (gaps
    # 6 and 2), and three members are left, as many as the finalists the rule keeps
    assert finalists == ["pgd", "momentum", "minq"]


def test_a_member_is_dropped_exactly_beyond_z_standard_errors_of_the_difference():
    rule = RaceRule(first=2, z=2.0)
    # both members' returns spread ±1 over 2 episodes: var 2, se 1, se of the difference √2
    threshold = 2 * math.sqrt(2)
    near = rule.decide({"best": [9.0, 11.0], "other": [9.0 + threshold - 0.01, 11.0 + threshold - 0.01]})
    far = rule.decide({"best": [9.0, 11.0], "other": [9.0 + threshold + 0.01, 11.0 + threshold + 0.01]})
    assert near == {} and list(far) == ["other"]


def test_with_every_mean_equal_nobody_is_dropped_before_the_last_round():
    base = [20.0, 70.0, 45.0, 45.0, 0.0, 90.0, 45.0, 45.0]  # every prefix of 2, 4 and 8 has mean 45
    assert all(sum(base[:n]) / n == 45.0 for n in (2, 4, 8))
    members = {f"m{i}": list(base) for i in range(4)}
    members["m4"] = [70.0, 20.0, 45.0, 45.0, 90.0, 0.0, 45.0, 45.0]  # another order, the same prefix means
    members["m5"] = [45.0] * 8  # no spread at all, the same mean
    dropped, finalists = race_on(RaceRule(first=2, finalists=3), members, episodes=20)  # rounds of 2, 4, 8
    assert set(dropped.values()) == {2}  # nobody before the last round
    assert finalists == ["m0", "m1", "m2"]  # then the first three, in the protocol's order (all equal)
    dropped, finalists = race_on(RaceRule(first=2, finalists=10), members, episodes=20)
    assert dropped == {} and finalists == list(members)


def test_two_agreeing_episodes_are_not_certainty_the_rounds_spread_floors_each_error():
    # best and near agree with themselves (no spread of their own); noisy has a spread: the pooled
    # variance (0 + 0 + 800) / 3 floors every member's, se = √(266.7 / 2) = 11.5, threshold 32.7
    decision = RaceRule().decide({"best": [10.0, 10.0], "near": [12.0, 12.0], "noisy": [0.0, 40.0]})
    assert decision == {}  # with each member's own variance (0), near would go on a gap of 2
    far = RaceRule().decide({"best": [10.0, 10.0], "far": [50.0, 50.0], "noisy": [0.0, 40.0]})
    assert list(far) == ["far"]  # a gap of 40 is beyond 32.7


def test_one_episode_each_has_no_spread_and_a_far_member_goes():
    assert list(RaceRule().decide({"a": [1.0], "b": [100.0]})) == ["b"]


def test_the_protocols_rule_is_2_first_episodes_z_2_and_3_finalists():
    rule = RaceRule()
    assert rule.rounds(10) == [2, 4] and rule.z == 2.0
    equal = {f"m{i}": [5.0, 5.0] for i in range(5)}
    assert sorted(rule.decide(equal, last=True)) == ["m3", "m4"]  # the first three stay
    assert rule.decide(equal, last=False) == {}


def test_a_tie_for_the_best_keeps_both():
    assert set(RaceRule().decide({"a": [5.0, 5.0], "b": [5.0, 5.0], "c": [9.0, 9.0]})) == {"c"}


def test_seeds_that_reach_the_selection_episodes_are_refused():
    check_disjoint([0, 1, 2], episodes=50, selection_episodes=32)  # far apart: fine
    with pytest.raises(UserError, match="race uses for selection episodes"):
        check_disjoint([SELECTION_SEED - 3], episodes=10, selection_episodes=8)


def _small_race_plan(tmp_path):
    from rlgauntlet.gauntlet.plan import plan_gauntlet

    plan = plan_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=tmp_path / "g.sqlite")
    # quick: rounds of 2 and 4 selection episodes. In full runs (the quick gauntlet's 10
    # episodes) every attack of 0.05 leaves this DQN at 500; at 0.1 MaxDiff takes it to 43, momentum to 408
    return dataclasses.replace(plan, heuristics=["random:eps=0.05", "fgsm:eps=0.05", "momentum:eps=0.1",
                                                  "pgd:objective=maxdiff,eps=0.1"])


def test_the_race_runs_on_selection_seeds_only_and_the_reported_episodes_never_include_one(tmp_path):
    from rlgauntlet.experiments.cells import run_chunks
    from rlgauntlet.experiments.store import ResultsStore
    from rlgauntlet.gauntlet.run import run_race

    from rlgauntlet.gauntlet.outcome import Outcome

    plan = _small_race_plan(tmp_path)
    store = ResultsStore(tmp_path / "g.sqlite")
    try:
        race = run_race(plan, store, lambda chunks, total, done: run_chunks(chunks, store))
        outcome = Outcome(plan).raced(race)
        finals = plan.cells(store, outcome.finalists)
        run_chunks([c for cells in finals for c in cells.chunks()], store)
        selection_seeds, reported_seeds = set(), set()
        for run_id, meta in store.runs():
            seeds = {r.seed for r in store.episodes(run_id)}
            (selection_seeds if store.run_kind(run_id) == "selection" else reported_seeds).update(seeds)
        assert selection_seeds and reported_seeds
        assert min(selection_seeds) >= SELECTION_SEED
        assert not selection_seeds & reported_seeds
        assert {r["member"] for r in race.members} == set(plan.heuristics)
        # equal returns at 0.05 (500 each): both finalists; at 0.1 momentum is far above MaxDiff
        assert outcome.finalists == ["random:eps=0.05", "fgsm:eps=0.05", "pgd:objective=maxdiff,eps=0.1"]
        assert set(race.dropped) == {"momentum:eps=0.1"}
        dropped_row = next(r for r in race.members if r["member"] == "momentum:eps=0.1")
        assert dropped_row["eps"] == "0.1" and dropped_row["dropped_after_round"] is not None
        assert dropped_row["episodes"] == [2, 4][dropped_row["dropped_after_round"]]
        assert all(r["episodes"] == 4 and r["reason"] is None for r in race.members if r["member"] in outcome.finalists)
    finally:
        store.close()


def test_a_race_killed_after_its_first_round_continues_and_reruns_no_episode(tmp_path):
    from rlgauntlet.experiments.cells import run_chunks
    from rlgauntlet.experiments.store import ResultsStore, store_of
    from rlgauntlet.gauntlet.run import run_race

    plan = _small_race_plan(tmp_path)
    store = ResultsStore(tmp_path / "g.sqlite")
    rounds_run = []

    def killed_in_round_two(chunks, total, done):
        if rounds_run:
            raise KeyboardInterrupt
        rounds_run.append(run_chunks(chunks, store))

    try:
        with pytest.raises(KeyboardInterrupt):
            run_race(plan, store, killed_in_round_two)
        stored = {run_id: store.done_episodes(run_id) for run_id, _ in store.runs("selection")}
        again = _small_race_plan(tmp_path)
        ran = []
        again_race = run_race(again, store, lambda chunks, total, done: ran.append((total, done, run_chunks(chunks, store))))
        # round 0 was complete: nothing of it ran again; its episodes are still there
        assert ran[0][2] == 0 and ran[0][0] == ran[0][1]
        assert all(stored[run_id] <= store.done_episodes(run_id) for run_id in stored)
        (tmp_path / "fresh").mkdir()
        fresh = _small_race_plan(tmp_path / "fresh")
        with store_of(tmp_path / "fresh" / "g.sqlite") as other:
            fresh_race = run_race(fresh, other, lambda chunks, total, done: run_chunks(chunks, other))
        assert again_race == fresh_race  # the same race as one never killed
    finally:
        store.close()


def test_a_raced_gauntlet_reports_only_its_finalists_and_a_rerun_runs_nothing(tmp_path, monkeypatch):
    from rlgauntlet.experiments.store import store_of
    from rlgauntlet.gauntlet import protocols as protocols_module
    from rlgauntlet.gauntlet import run_gauntlet
    from rlgauntlet.gauntlet.protocols import Level, Protocol

    small = Protocol(name="classic", version=2, families=("classic",), summary="the race, end to end",
                     eps_grid=("0.1",), headline_eps="0.1", budget_note="raw", learned=(), learned_continuous=(),
                     shifts=lambda env, extent: [], natural=False, certify=False,
                     levels={name: Level(6, 1000, "headline", "reduced") for name in protocols_module.LEVELS},
                     heuristics={"q": ("momentum", "pgd:objective=maxdiff")})
    monkeypatch.setitem(protocols_module.PROTOCOLS, "classic", small)
    store = tmp_path / "g.sqlite"
    stages, advances = [], []
    result = run_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=store,
                          on_stage=lambda *a: stages.append(a), on_advance=advances.append)
    race = result["race"]
    assert race["raced"] and race["rounds"] == [2] and race["selection_seed"] == SELECTION_SEED
    # momentum leaves this DQN near 408 and MaxDiff near 43 at 0.1: momentum goes, MaxDiff runs in full
    assert race["finalists"] == 1 and race["dropped"] == 1
    [worst] = result["worst_case"]
    assert set(worst["members"]) == {"pgd:objective=maxdiff,eps=0.1"}
    assert worst["episodes"] == 6  # the level's count on the reported seed, no selection episode among them
    assert [s for s, _, _ in stages][:1] == ["race"] and sum(advances) == sum(t - d for _, d, t in stages)
    with store_of(store) as results:
        selection = results.runs("selection")
        assert len(selection) == 2  # one run per member, its episodes extended round by round
    rerun_stages = []
    again = run_gauntlet("zoo:cartpole-dqn", "CartPole-v1", level="quick", store=store,
                         on_stage=lambda *a: rerun_stages.append(a))
    episode_stages = [(d, t) for name, d, t in rerun_stages if name in ("race", "episodes")]
    # the race's round and the two episode phases (before and after the learned attackers), all stored already
    assert len(episode_stages) == 3 and all(d == t for d, t in episode_stages)
    assert again["worst_case"] == result["worst_case"] and again["race"] == result["race"]



# --- learned attackers stop once they stop improving -------------------------------------------

def _callback(returns: list[float | None], patience: int | None):
    from types import SimpleNamespace

    from rlgauntlet.training.attackers.attack_train import _TimedCheckpoint

    callback = _TimedCheckpoint.__new__(_TimedCheckpoint)
    callback.progress = {"history": [{"steps": 1000 * (i + 1), "recent_return": r} for i, r in enumerate(returns)]}
    callback.patience, callback.stop, callback.log = patience, False, lambda line: None
    callback.preset = SimpleNamespace(name="paad-attacker")
    callback.model = SimpleNamespace(num_timesteps=1000 * len(returns))  # SB3's model: only its step count is read
    return callback


@pytest.mark.parametrize("returns, patience, stops", [
    ([900.0, 300.0, 350.0, 320.0, 310.0], 3, True),   # the best (300) is 3 checkpoints back
    ([900.0, 300.0, 350.0, 290.0, 310.0], 3, False),  # a new best (290) one checkpoint back
    ([900.0, 300.0, 300.0, 300.0, 300.0], 3, True),   # equal is no new best
    ([900.0, 300.0, 350.0], 3, False),                # too few checkpoints to judge
    ([900.0, None, 950.0, 960.0, 970.0], 2, True),    # a checkpoint without episodes is skipped
    ([900.0, 300.0, 350.0, 320.0, 310.0], None, False),  # no patience: every step is trained
])
def test_a_director_stops_after_patience_checkpoints_without_a_new_best(returns, patience, stops):
    callback = _callback(returns, patience)
    callback._stop_without_progress()
    assert callback.stop is stops and ("stopped_early" in callback.progress) is stops
    if stops:
        assert callback.progress["stopped_early"] == 1000 * len(returns)


@pytest.mark.parametrize("patience_from, stops", [
    (0, True),      # the best (300 at 2k steps) is 3 checkpoints back
    (2000, True),   # the three checkpoints after it (3k, 4k, 5k) are all past 2k steps
    (3000, False),  # 3k is not counted: only two counted checkpoints without a new best
    (5000, False),  # none counted
])
def test_checkpoints_before_patience_from_do_not_count_towards_the_patience(patience_from, stops):
    """An LSTM director's plateau while it learns to use its memory is not a stall (mujoco v7)."""
    callback = _callback([900.0, 300.0, 350.0, 320.0, 310.0], 3)
    callback.patience_from = patience_from
    callback._stop_without_progress()
    assert callback.stop is stops and ("stopped_early" in callback.progress) is stops


def test_an_attacker_that_stopped_early_is_done_and_not_trained_again(tmp_path):
    import json

    from rlgauntlet.gauntlet.plan import AttackerTask

    task = AttackerTask(AgentSpec(agent="zoo:cartpole-dqn"), "CartPole-v1", "paad", "0.1", 0.1, 0, 50_000, str(tmp_path),
                        patience=3)
    (tmp_path / "manifest.json").write_text(json.dumps({"steps": 20_000}))
    assert not task.done()  # stopped short, and not early: a killed run, resumed
    (tmp_path / "manifest.json").write_text(json.dumps({"steps": 20_000, "stopped_early": 20_000}))
    assert task.done()
