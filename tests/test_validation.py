"""The validated choice of a defence run's agent (training.defences.validation): the rule's known
answers, what is played for each snapshot, the choice over a constructed run, the cache, refusals,
and that a run's trajectory does not depend on it (so it may rank a finished run of another preset)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from rlgauntlet.errors import UserError
from rlgauntlet.training import recipes as presets
from rlgauntlet.training.defences import atla, validation
from rlgauntlet.training.defences.atla import train_atla
from rlgauntlet.training.defences.validation import VALIDATED, VALIDATION_SEED, select_validated, validated_score

ROLLOUT = 256  # the cartpole-ppo recipe: 8 envs × 32 steps


def _point(iteration, attacked, eps=0.075):
    return {"iteration": iteration, "agent_steps": iteration * 2048, "eps": eps, "recent_return_attacked": attacked}


def _val(clean, push_min):
    return {"clean_return": clean, "clean_episodes": 10, "push": {}, "push_min": push_min, "push_worst": None,
            "push_episodes": 2, "eps": 0.075, "seed": VALIDATION_SEED}


def test_the_validated_score_is_the_lower_of_the_pools_average_and_its_worst_push():
    # min, not mean (1650) nor the attacked return alone (1900): the worst member decides
    assert validated_score(_point(10, 1900.0), _val(3200.0, 1400.0), eps=0.075, clean_min=3000.0) == 1400.0
    assert validated_score(_point(10, 1300.0), _val(3200.0, 1400.0), eps=0.075, clean_min=3000.0) == 1300.0
    assert validated_score(_point(10, 1900.0), _val(3000.0, 1400.0), 0.075, 3000.0) == 1400.0  # the bar is inclusive
    assert validated_score(_point(10, 1900.0), _val(2999.0, 1800.0), 0.075, 3000.0) is None   # validated clean short
    assert validated_score(_point(10, 1900.0, eps=0.05), _val(3500.0, 1800.0), 0.075, 3000.0) is None  # before full ε
    assert validated_score(_point(10, None), _val(3500.0, 1800.0), 0.075, 3000.0) is None  # no episode to rank by
    # no push directors (a discrete action space): the attacked return alone
    assert validated_score(_point(10, 1900.0), _val(3500.0, None), 0.075, 3000.0) == 1900.0


def test_an_agent_is_validated_clean_and_against_every_push_director_at_the_runs_eps(monkeypatch, tmp_path):
    """Hopper's 3 action dims: 14 push directions, 2 episodes each, and 10 clean games, all from env
    seed VALIDATION_SEED + k, with the push at the given ε; push_min is the lowest direction's mean."""
    from rlgauntlet.engine import rollout
    from rlgauntlet.threats.attacks.push import direction_param, push_directions
    from rlgauntlet.victims import sb3

    calls = []
    returns = {direction_param(d): 1000.0 + 10 * i for i, d in enumerate(push_directions(3))}
    returns[direction_param([0, 0, 1])] = 640.0  # the worst one

    class Record:
        def __init__(self, value, episode=0):
            self.episode_return, self.episode = value, episode

    def fake_evaluate(env_fn, victim, threat, episodes, seed, n_envs=1, **kwargs):
        episodes = list(episodes)
        calls.append((None if threat is None else threat.spec, episodes, seed))
        if threat is None:
            return [Record(3000.0 + k) for k in episodes]
        assert {budget for _, budget in threat.games} == {0.075}
        # finished out of order, as the engine may return them; game k's own return, + k % 2 apart
        return [Record(returns[direction_param(threat.games[k][0])] + (1 if k % 2 else -1), k) for k in reversed(episodes)]

    monkeypatch.setattr(rollout, "evaluate_episodes", fake_evaluate)
    monkeypatch.setattr(sb3, "load_sb3", lambda path, algorithm=None, vecnormalize=None, **kw: ("victim", path, vecnormalize))
    got = validation.validate_agent(tmp_path, "Hopper-v5", 0.075, clean_episodes=10, push_episodes=2)
    assert [c for c in calls if c[0] is None] == [(None, list(range(10)), VALIDATION_SEED)]
    [pushes] = [c for c in calls if c[0] is not None]  # every push game in one engine call
    assert pushes == ("validation_pushes", list(range(28)), VALIDATION_SEED)
    assert got["clean_return"] == pytest.approx(3004.5) and got["push"] == pytest.approx(returns)
    assert got["push_games"] == "own"
    assert got["push_min"] == 640.0 and got["push_worst"] == direction_param([0, 0, 1])
    assert "pushes_skipped_below" not in got
    # below the rule's clean bar no push is played (the rule cannot choose it); at the bar, all are
    calls.clear()
    got = validation.validate_agent(tmp_path, "Hopper-v5", 0.075, clean_episodes=10, push_episodes=2, clean_min=3004.6)
    assert calls == [(None, list(range(10)), VALIDATION_SEED)]
    assert got["push"] == {} and got["push_min"] is None and got["pushes_skipped_below"] == 3004.6
    assert got["clean_return"] == pytest.approx(3004.5)
    calls.clear()
    got = validation.validate_agent(tmp_path, "Hopper-v5", 0.075, clean_episodes=10, push_episodes=2, clean_min=3004.5)
    assert len(calls) == 2 and got["push"] == pytest.approx(returns) and "pushes_skipped_below" not in got


def test_pushes_are_validated_at_every_budget_fraction(monkeypatch, tmp_path):
    """Fractions (1/3, 2/3, 1) of ε 0.075: 14 directions × 3 budgets (0.025, 0.05, 0.075), the full
    budget's named by its direction alone; the worst over all 42 is push_min."""
    from rlgauntlet.engine import rollout
    from rlgauntlet.victims import sb3

    games = []

    class Record:
        def __init__(self, value, episode=0):
            self.episode_return, self.episode = value, episode

    def fake_evaluate(env_fn, victim, threat, episodes, seed, n_envs=1, **kwargs):
        if threat is None:
            return [Record(2000.0) for _ in episodes]
        games.extend(threat.games)
        low = [([0, 0, 1], pytest.approx(0.05)) == (list(d), b) for d, b in threat.games]
        return [Record(500.0 if low[k] else 2000.0, k) for k in episodes]

    monkeypatch.setattr(rollout, "evaluate_episodes", fake_evaluate)
    monkeypatch.setattr(sb3, "load_sb3", lambda path, algorithm=None, vecnormalize=None, **kw: "victim")
    got = validation.validate_agent(tmp_path, "Hopper-v5", 0.075, 2, 2, eps_fractions=(1 / 3, 2 / 3, 1.0))
    assert len(games) == 84 and len({(tuple(d), round(b, 6)) for d, b in games}) == 42
    assert {round(b, 6) for _, b in games} == {0.025, 0.05, 0.075}
    assert got["push_min"] == 500.0 and got["push_worst"] == "0|0|1,eps=0.05"
    assert "0|0|1" in got["push"] and got["push_eps_fractions"] == pytest.approx([1 / 3, 2 / 3, 1.0])


def _constructed_run(tmp_path, iterations):
    run = tmp_path / "run"
    for it in iterations:
        snap = run / "snapshots" / f"iter-{it:04d}"
        snap.mkdir(parents=True)
        (snap / "model.zip").write_bytes(f"weights of iteration {it}".encode())
        (snap / "vecnormalize.pkl").write_bytes(f"statistics of iteration {it}".encode())
    return run


def test_the_run_keeps_the_best_validated_checkpoint_and_plays_each_snapshot_once(monkeypatch, tmp_path):
    """Checkpoints 10..50: the highest attacked return (40) has the worst push, the highest clean (50)
    is unranked by ε; 20 wins on min(attacked, push). A rule by the attacked return, by the push alone
    or by the mean of the two would each keep another one."""
    history = [_point(10, 1500.0), _point(20, 1700.0), _point(30, 1600.0), _point(40, 2100.0), _point(50, 2500.0, 0.05)]
    vals = {10: _val(3100.0, 1450.0), 20: _val(3300.0, 1650.0), 30: _val(3050.0, 1900.0), 40: _val(3400.0, 1000.0),
            50: _val(3600.0, 2400.0)}
    played = []

    def fake_validate(folder, env_id, eps, clean_episodes, push_episodes, n_envs=8, eps_fractions=(1.0,),
                      clean_min=None):
        it = int(folder.name.split("-")[1])
        played.append(it)
        assert (env_id, eps, clean_episodes, push_episodes, clean_min) == ("Hopper-v5", 0.075, 10, 2, 3000.0)
        return vals[it]

    monkeypatch.setattr(validation, "validate_agent", fake_validate)
    run = _constructed_run(tmp_path, [10, 20, 30, 40, 50])
    chosen = select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)
    assert chosen["iteration"] == 20 and chosen["score"] == 1650.0 and chosen["validation"] == vals[20]
    assert (run / VALIDATED / "model.zip").read_bytes() == b"weights of iteration 20"
    assert (run / VALIDATED / "vecnormalize.pkl").read_bytes() == b"statistics of iteration 20"
    assert json.loads((run / VALIDATED / "selection.json").read_text())["iteration"] == 20
    assert sorted(played) == [10, 20, 30, 40, 50]
    # a second call reads every validation.json and plays nothing
    select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)
    assert sorted(played) == [10, 20, 30, 40, 50]
    # other settings are another validation: played again
    vals = {k: {**v, "clean_episodes": 20} for k, v in vals.items()}
    monkeypatch.setattr(validation, "validate_agent", lambda folder, env_id, eps, c, p, n_envs=8, eps_fractions=(1.0,),
                        clean_min=None: played.append(0) or vals[int(folder.name.split("-")[1])])
    select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 20, 2, log=lambda line: None)
    assert played.count(0) == 5
    # pushes at other budgets too: files written without them are played again
    vals = {k: {**v, "push_eps_fractions": [0.5, 1.0]} for k, v in vals.items()}
    select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 20, 2, log=lambda line: None, eps_fractions=(0.5, 1.0))
    assert played.count(0) == 10
    select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 20, 2, log=lambda line: None, eps_fractions=(0.5, 1.0))
    assert played.count(0) == 10
    assert not any(p.name.endswith((".tmp", ".old")) for p in run.rglob("*"))


def test_a_run_resumed_without_its_snapshots_ranks_from_its_record(monkeypatch, tmp_path):
    """A run committed and resumed elsewhere has validations.json and validated/, not its snapshots
    (they are not committed): the earlier checkpoints rank from the record, a new one is played, and
    the choice moves only to a checkpoint whose agent is here."""
    vals = {10: _val(3100.0, 1450.0), 20: _val(3300.0, 1650.0), 30: _val(3300.0, 1700.0), 40: _val(3300.0, 1750.0)}
    played = []
    monkeypatch.setattr(validation, "validate_agent", lambda folder, *a, **k:
                        played.append(int(folder.name.split("-")[1])) or vals[int(folder.name.split("-")[1])])
    run = _constructed_run(tmp_path, [10, 20])
    history = [_point(10, 1500.0), _point(20, 1700.0)]
    select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)
    shutil.rmtree(run / "snapshots")  # another machine: the record and the kept agent travel, the snapshots do not
    _constructed_run(tmp_path, [30])
    chosen = select_validated(run, history + [_point(30, 1500.0)], "Hopper-v5", 0.075, 3000.0, 10, 2,
                              log=lambda line: None)
    assert played == [10, 20, 30] and chosen["iteration"] == 20  # 30 scores 1500 (its attacked return)
    assert (run / VALIDATED / "model.zip").read_bytes() == b"weights of iteration 20"
    _constructed_run(tmp_path, [40])
    chosen = select_validated(run, history + [_point(30, 1500.0), _point(40, 1800.0)], "Hopper-v5", 0.075, 3000.0,
                              10, 2, log=lambda line: None)
    assert chosen["iteration"] == 40 and (run / VALIDATED / "model.zip").read_bytes() == b"weights of iteration 40"
    # a record we did not write is one line, left as it is
    (run / "validations.json").write_text('{"10": {"clean_return": "high"}}')
    with pytest.raises(UserError, match=r"validations\.json is not a record rlgauntlet wrote"):
        select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2)
    assert (run / "validations.json").read_text() == '{"10": {"clean_return": "high"}}'


def test_a_validation_without_its_pushes_stands_while_its_clean_return_is_below_the_bar(monkeypatch, tmp_path):
    """A checkpoint validated clean at 2800 against a bar of 3000 has no push games: it is not played
    again under that bar (nothing it could show would make it chosen), and is played again, pushes
    included, under a bar of 2500, where it could be."""
    played = []

    def fake_validate(folder, env_id, eps, clean_episodes, push_episodes, n_envs=8, eps_fractions=(1.0,),
                      clean_min=None):
        played.append(clean_min)
        skipped = {"push": {}, "push_min": None, "pushes_skipped_below": clean_min} if 2800.0 < clean_min else {}
        return {**_val(2800.0, 1500.0), **skipped}

    monkeypatch.setattr(validation, "validate_agent", fake_validate)
    run = _constructed_run(tmp_path, [10])
    history = [_point(10, 1700.0)]
    assert select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None) is None
    assert select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None) is None
    assert played == [3000.0]
    chosen = select_validated(run, history, "Hopper-v5", 0.075, 2500.0, 10, 2, log=lambda line: None)
    assert played == [3000.0, 2500.0] and chosen["score"] == 1500.0
    assert "pushes_skipped_below" not in json.loads((run / "validations.json").read_text())["10"]


def test_nothing_qualified_leaves_no_validated_agent(monkeypatch, tmp_path):
    monkeypatch.setattr(validation, "validate_agent", lambda *a, **k: _val(2000.0, 900.0))
    run = _constructed_run(tmp_path, [10, 20])
    assert select_validated(run, [_point(10, 1500.0), _point(20, 1600.0)], "Hopper-v5", 0.075, 3000.0, 10, 2,
                            log=lambda line: None) is None
    assert not (run / VALIDATED).exists()


def test_a_run_without_every_snapshot_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(validation, "validate_agent", lambda *a, **k: _val(3500.0, 1500.0))
    run = _constructed_run(tmp_path, [10])
    with pytest.raises(UserError, match=r"no snapshot of iteration 20 .*needs a run that kept them"):
        select_validated(run, [_point(10, 1500.0), _point(20, 1600.0)], "Hopper-v5", 0.075, 3000.0, 10, 2)
    assert not (run / VALIDATED).exists()


def test_a_validation_file_we_did_not_write_is_one_line_left_untouched_and_the_fix_it_names_works(
        monkeypatch, tmp_path):
    """Each refusal names a fix ("remove it and rerun"): doing just that must work, replaying the
    snapshot for a bad validation.json and rebuilding a bad record from the snapshots' files."""
    played = []
    monkeypatch.setattr(validation, "validate_agent", lambda *a, **k: played.append(1) or _val(3500.0, 1500.0))
    run = _constructed_run(tmp_path, [10])
    history = [_point(10, 1500.0)]
    bad = run / "snapshots" / "iter-0010" / "validation.json"
    bad.write_text('{"clean_return": "high"}')
    with pytest.raises(UserError, match=r"validation\.json is not a validation rlgauntlet wrote.*remove it and rerun"):
        select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2)
    assert bad.read_text() == '{"clean_return": "high"}' and not played
    bad.unlink()
    assert select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)["score"] == 1500.0
    assert played == [1] and json.loads(bad.read_text())["clean_return"] == 3500.0
    record = run / "validations.json"
    for bad_record in ('{"10": {"clean_return": 3500, "clean_episodes": 10, "push_episodes": 2, "push_min": "low"}}',
                       '{"10": {"clean_return": 2500, "clean_episodes": 10, "push_episodes": 2, "push_min": null, '
                       '"pushes_skipped_below": "high"}}',
                       "[1, 2]"):  # a worst push or a skip bar the rule cannot read; not a mapping
        record.write_text(bad_record)
        with pytest.raises(UserError, match=r"validations\.json is not a record rlgauntlet wrote"):
            select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2)
    record.write_text("[1, 2]")
    with pytest.raises(UserError, match=r"validations\.json is not a record rlgauntlet wrote.*remove it and rerun"):
        select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2)
    assert record.read_text() == "[1, 2]"
    record.unlink()
    assert select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)["score"] == 1500.0
    assert played == [1]  # rebuilt from the snapshot's validation.json, nothing replayed
    assert json.loads(record.read_text())["10"]["clean_return"] == 3500.0


def test_the_validated_preset_trains_as_the_selecting_one_and_no_other():
    validated = presets.ATLA_PRESETS["hopper-pool-pa-atla-ppo-validated"]
    assert atla.trains_as(validated, "hopper-pool-pa-atla-ppo-select")
    assert atla.trains_as(validated, "hopper-pool-pa-atla-ppo")  # same training; its runs kept no snapshots
    assert not atla.trains_as(validated, "hopper-pa-atla-ppo-official")  # no pool
    assert not atla.trains_as(validated, "hopper-pa-atla-ppo")
    assert not atla.trains_as(validated, "no-such-preset")


@pytest.fixture()
def tiny_pair(monkeypatch):
    """CartPole ATLA presets of 3 iterations: one selecting, one validated (a discrete action
    space: no push directors, so validation is the clean games)."""
    base = presets.ATLAPreset("tiny-select", "cartpole-ppo", "pa_atla", eps=0.1, total_agent_steps=3 * ROLLOUT,
                              checkpoint_every=1, agent_overrides={"n_epochs": 2}, adversary={"n_epochs": 2},
                              select_clean_min=0.0)
    monkeypatch.setitem(presets.ATLA_PRESETS, "tiny-select", base)
    monkeypatch.setitem(presets.ATLA_PRESETS, "tiny-validated", dataclasses.replace(
        base, name="tiny-validated", validate_clean_episodes=2, validate_push_episodes=2))
    monkeypatch.setitem(presets.ATLA_PRESETS, "tiny-other", dataclasses.replace(base, name="tiny-other", eps=0.05))
    return monkeypatch


def _weights(ckpt):
    return torch.load(ckpt / "agent" / "policy.pt", weights_only=True)


def test_validation_does_not_change_the_trajectory_and_ranks_a_finished_run_of_the_same_training(tiny_pair, tmp_path):
    """Bit-exactness is the property under test: the same preset run twice on one machine, with and
    without validation at every checkpoint, must give the same weights, or a validated ranking of a
    finished selecting run would rank a trajectory the validated preset would not have trained."""
    selecting = train_atla("tiny-select", tmp_path / "select", log=lambda line: None)
    validated = train_atla("tiny-validated", tmp_path / "validated", log=lambda line: None)
    for key, value in _weights(selecting).items():
        assert torch.equal(value, _weights(validated)[key]), key
    assert (tmp_path / "validated" / VALIDATED / "selection.json").exists()
    assert atla.run_agent("tiny-validated", tmp_path / "validated") == tmp_path / "validated" / VALIDATED
    # the validated preset on the finished selecting run: nothing trained, every snapshot played, its own folder
    shutil.copytree(tmp_path / "select", tmp_path / "both")
    before = (tmp_path / "both" / "best" / "selection.json").read_text()
    # a finished run kept without its resume-only files (the policies' and optimizers' state) ranks all the same
    shutil.rmtree(tmp_path / "both" / "checkpoint" / "adversary")
    for part in ("policy.pt", "optimizer.pt"):
        (tmp_path / "both" / "checkpoint" / "agent" / part).unlink()
    train_atla("tiny-validated", tmp_path / "both", log=lambda line: None)
    assert json.loads((tmp_path / "both" / "checkpoint" / "progress.json").read_text())["iteration"] == 3
    assert (tmp_path / "both" / "best" / "selection.json").read_text() == before  # the selecting preset's choice kept
    assert sorted(p.name for p in (tmp_path / "both" / "snapshots").glob("*/validation.json")) == ["validation.json"] * 3
    assert (json.loads((tmp_path / "both" / VALIDATED / "selection.json").read_text())
            == json.loads((tmp_path / "validated" / VALIDATED / "selection.json").read_text()))
    # a preset that trains otherwise is refused, and writes nothing
    with pytest.raises(UserError, match="holds a tiny-select run"):
        train_atla("tiny-other", tmp_path / "select", log=lambda line: None)


def test_a_checkpoint_stopped_before_its_validation_is_validated_from_the_checkpoint_on_resume(tiny_pair, tmp_path):
    """Stopped between saving checkpoint 1 and validating it, then moved to another machine (the
    snapshots are not committed): the resume plays the checkpoint's own agent as iteration 1 before
    it trains (a resume stopped in its first iteration has recorded it), and the record equals the
    first one. An earlier checkpoint's missing snapshot is still refused: only the last one's agent
    is in the checkpoint."""
    from stable_baselines3 import PPO

    run = tmp_path / "run"
    train_atla("tiny-validated", run, log=lambda line: None, deadline=0.0)  # stops after iteration 1
    ledger = json.loads((run / "validations.json").read_text())
    assert sorted(ledger) == ["1"]
    shutil.rmtree(run / "snapshots")
    (run / "validations.json").unlink()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    with tiny_pair.context() as patch:
        patch.setattr(PPO, "learn", stopped)
        with pytest.raises(KeyboardInterrupt):
            train_atla("tiny-validated", run, log=lambda line: None)
    replayed = json.loads((run / "validations.json").read_text())
    assert sorted(replayed) == ["1"] and replayed["1"]["clean_return"] == pytest.approx(ledger["1"]["clean_return"])
    assert {k: v for k, v in replayed["1"].items() if k != "clean_return"} == {
        k: v for k, v in ledger["1"].items() if k != "clean_return"}
    assert ((run / "snapshots" / "iter-0001" / "model.zip").read_bytes()
            == (run / "checkpoint" / "agent" / "model.zip").read_bytes())
    train_atla("tiny-validated", run, log=lambda line: None)
    shutil.rmtree(run / "snapshots")
    (run / "validations.json").write_text(json.dumps(
        {k: v for k, v in json.loads((run / "validations.json").read_text()).items() if k != "2"}))
    with pytest.raises(UserError, match="no snapshot of iteration 2 "):
        train_atla("tiny-validated", run, log=lambda line: None)


def test_side_by_side_pushes_perturb_each_row_as_its_own_push_would():
    """Known answer: six rows with three directions at two budgets; each row's input is the one the
    registered push of its own direction and budget gives on that row alone."""
    import gymnasium as gym
    import torch.nn as nn

    from rlgauntlet.common.seeding import BatchRNG
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.threats.base import Memory
    from rlgauntlet.victims import TorchVictim

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
            self.log_std = nn.Parameter(torch.zeros(3))

        def forward(self, x):
            return self.body(x), self.log_std

    torch.manual_seed(0)
    victim = TorchVictim(Head(), "gaussian", gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                         gym.spaces.Box(-1.0, 1.0, (3,), np.float32))
    games = [([1, 0, 0], 0.05), ([0, -1, 0], 0.1), ([1, 1, -1], 0.05), ([1, 0, 0], 0.1), ([0, -1, 0], 0.05),
             ([1, 1, -1], 0.1)]
    threat = validation.PushesSideBySide(games)
    threat.check_victim(victim)
    states = [threat.new_state() for _ in games]
    order = [3, 0, 5, 1, 4, 2]  # rows in another order than the games: each row meets its episode's game
    games = [games[k] for k in order]
    x = torch.randn(len(games), 4, generator=torch.Generator().manual_seed(1), dtype=victim.dtype)
    rng = lambda n: BatchRNG([torch.Generator().manual_seed(k) for k in range(n)])  # noqa: E731
    out, acted = threat.apply(x, victim, rng(len(games)), Memory(states, torch.zeros(len(games)), episodes=order),
                              torch.ones(len(games), dtype=torch.bool))
    assert acted.all()
    for k, (direction, budget) in enumerate(games):
        alone = parse_threat(f"push:direction={'|'.join(map(str, direction))},eps={budget:g}")
        with torch.enable_grad():
            expected = alone.perturb(x[k:k + 1], victim, rng(1))
        assert torch.allclose(out[k:k + 1], expected, atol=1e-12), (k, direction, budget)
        assert float((out[k] - x[k]).abs().max()) == pytest.approx(budget)
    with pytest.raises(RuntimeError, match="for 6 games: a bug"):
        threat.apply(x, victim, rng(len(games)), Memory(states, torch.zeros(len(games)), episodes=[6, 0, 1, 2, 3, 4]),
                     torch.ones(len(games), dtype=torch.bool))


def test_the_validations_push_games_are_each_pushs_own_games_played_side_by_side(monkeypatch, tmp_path):
    """End to end on Pendulum with an SB3 agent: the pushes' returns from the one side-by-side call
    (3 slots for 4 games, so the queue refills) equal each push run alone on its own env seeds
    (VALIDATION_SEED + m·E + j): a game given to the wrong push or seed fails it."""
    from stable_baselines3 import PPO

    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.victims.sb3 import load_sb3

    PPO("MlpPolicy", "Pendulum-v1", seed=3, device="cpu").save(tmp_path / "model.zip")
    monkeypatch.setattr(validation, "SIDE_BY_SIDE", 3)
    got = validation.validate_agent(tmp_path, "Pendulum-v1", 0.5, clean_episodes=1, push_episodes=2)
    victim = load_sb3(tmp_path / "model.zip", "ppo")
    for m, direction in enumerate(("1", "-1")):  # Pendulum's 1-d action: the two signed axes
        records = evaluate_episodes(lambda: make_env("Pendulum-v1"), victim,
                                    parse_threat(f"push:direction={direction},eps=0.5"), [2 * m, 2 * m + 1],
                                    VALIDATION_SEED, n_envs=2)
        assert got["push"][direction] == pytest.approx(np.mean([r.episode_return for r in records]), rel=1e-9)
    assert got["push"]["1"] != pytest.approx(got["push"]["-1"], rel=1e-3)  # the two pushes differ


def test_a_finalist_is_confirmed_with_more_games_against_every_push_from_its_own_seeds(monkeypatch, tmp_path):
    """Every push of the screen (42: 14 directions × 3 budgets) plays C = 8 more games in one engine
    call from CONFIRM_SEED; the confirmed worst is over all E + C = 10 games of a push, weighted by
    games: a push screened at 3000 (both games standing) that falls in the confirmation's games is
    found, and one screened low but standing in the confirmation is lifted by (2·low + 8·high)/10."""
    from rlgauntlet.engine import rollout
    from rlgauntlet.threats.attacks.push import direction_param, push_directions
    from rlgauntlet.victims import sb3

    calls = []

    class Record:
        def __init__(self, value, episode):
            self.episode_return, self.episode = value, episode

    topples = ([0, 0, 1], pytest.approx(0.075))

    def fake_evaluate(env_fn, victim, threat, episodes, seed, n_envs=1, **kwargs):
        calls.append((len(threat.games), seed))
        return [Record(1000.0 if (list(threat.games[k][0]), threat.games[k][1]) == topples else 3000.0, k)
                for k in episodes]

    monkeypatch.setattr(rollout, "evaluate_episodes", fake_evaluate)
    monkeypatch.setattr(sb3, "load_sb3", lambda path, algorithm=None, vecnormalize=None, **kw: "victim")
    names = [direction_param(d) + suffix for d in push_directions(3) for suffix in (",eps=0.025", ",eps=0.05", "")]
    screen = {**_val(3500.0, 2000.0), "push": {name: 3000.0 for name in names},
              "push_eps_fractions": [1 / 3, 2 / 3, 1.0]}
    screen["push"]["1|1|1"] = 2000.0  # screened worst: two unlucky games
    got = validation.confirm_agent(tmp_path, "Hopper-v5", screen, confirm_episodes=8)
    assert calls == [(42 * 8, validation.CONFIRM_SEED)]
    assert got["episodes"] == 8 and got["seed"] == validation.CONFIRM_SEED and set(got["push"]) == set(names)
    assert got["push"]["0|0|1"] == 1000.0 and got["push"]["1|1|1"] == 3000.0
    assert got["push_worst"] == "0|0|1" and got["push_min"] == pytest.approx((2 * 3000.0 + 8 * 1000.0) / 10)
    # the lifted one: (2 · 2000 + 8 · 3000) / 10 = 2800, not its screen's 2000 nor the confirmation's 3000 alone
    monkeypatch.setattr(rollout, "evaluate_episodes", lambda env_fn, victim, threat, episodes, seed, **kw:
                        [Record(3000.0, k) for k in episodes])
    assert validation.confirm_agent(tmp_path, "Hopper-v5", screen, 8)["push_min"] == pytest.approx(2800.0)


def _val_pushes(clean, pushes):
    return {**_val(clean, min(pushes.values())), "push": pushes, "push_worst": min(pushes, key=pushes.get)}


def _fake_confirmations(confirmed_at, confirmed):
    """A stand-in for ``confirm_agent``: the 8 confirming games of checkpoint ``it`` average
    ``confirmed_at[it]`` per push, combined with the screen's 2 as the real one combines them;
    each confirmed iteration is appended to ``confirmed``."""
    def fake_confirm(folder, env_id, validation_, confirm_episodes):
        it = int(folder.name.split("-")[1])
        confirmed.append(it)
        pushes = {k: (2 * validation_["push"][k] + 8 * v) / 10 for k, v in confirmed_at[it].items()}
        worst = min(pushes, key=pushes.get)
        return {"episodes": confirm_episodes, "seed": validation.CONFIRM_SEED, "push": confirmed_at[it],
                "push_min": pushes[worst], "push_worst": worst}
    return fake_confirm


def test_the_confirmed_rule_keeps_the_best_confirmed_finalist_and_stops_when_the_rest_cannot_beat_it(
        monkeypatch, tmp_path):
    """Screen scores 40: 2400, 30: 2000, 20: 1700, 10: 1500. 40's confirmation finds its push at 1200
    (score 1200), 30's holds (1900): 30 is kept where the validated rule keeps 40; 20 is confirmed
    (its screen 1700 could not beat 1900: not confirmed), and so nothing else is played. The
    validated folder is left as the validated rule chose; a second call confirms nothing again."""
    history = [_point(10, 1500.0), _point(20, 1700.0), _point(30, 2100.0), _point(40, 2500.0)]
    vals = {10: _val_pushes(3100.0, {"a": 1600.0, "b": 3000.0}), 20: _val_pushes(3100.0, {"a": 2000.0, "b": 3000.0}),
            30: _val_pushes(3300.0, {"a": 2000.0, "b": 3000.0}), 40: _val_pushes(3400.0, {"a": 2400.0, "b": 3000.0})}
    confirmed_at = {40: {"a": 900.0, "b": 3000.0}, 30: {"a": 1875.0, "b": 3000.0}}
    confirmed = []
    monkeypatch.setattr(validation, "validate_agent", lambda folder, *a, **k: vals[int(folder.name.split("-")[1])])
    monkeypatch.setattr(validation, "confirm_agent", _fake_confirmations(confirmed_at, confirmed))
    run = _constructed_run(tmp_path, [10, 20, 30, 40])
    assert select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)["iteration"] == 40
    chosen = select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None,
                              confirm_episodes=8, finalists=5)
    assert confirmed == [40, 30]
    # 40: min(2500, (2·2400 + 8·900)/10 = 1200); 30: min(2100, (2·2000 + 8·1875)/10 = 1900)
    assert chosen["iteration"] == 30 and chosen["score"] == pytest.approx(1900.0)
    assert chosen["validation"]["confirm"]["push_min"] == pytest.approx(1900.0)
    assert (run / validation.CONFIRMED / "model.zip").read_bytes() == b"weights of iteration 30"
    assert (run / VALIDATED / "model.zip").read_bytes() == b"weights of iteration 40"
    ledger = json.loads((run / "validations.json").read_text())
    assert "confirm" in ledger["40"] and "confirm" in ledger["30"] and "confirm" not in ledger["20"]
    assert "confirm" in json.loads((run / "snapshots" / "iter-0030" / "validation.json").read_text())
    select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None, confirm_episodes=8,
                     finalists=5)
    assert confirmed == [40, 30]
    # the validated rule reads the same record and still keeps 40: the confirmation is beside its figures
    assert select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)["iteration"] == 40
    # at most `finalists`: with one, 40 alone is confirmed and kept, whatever its confirmation says
    shutil.rmtree(run / validation.CONFIRMED)
    (run / "validations.json").unlink()
    for snapshot in (run / "snapshots").iterdir():
        (snapshot / "validation.json").unlink()
    confirmed.clear()
    chosen = select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None,
                              confirm_episodes=8, finalists=1)
    assert confirmed == [40] and chosen["iteration"] == 40 and chosen["score"] == pytest.approx(1200.0)


def test_the_push_ranked_score_is_the_worst_push_alone():
    # the training return (1300) no longer caps it; the bar, the full ε and a push-less run as before
    assert validated_score(_point(10, 1300.0), _val(3200.0, 1400.0), 0.075, 3000.0, with_training_return=False) == 1400.0
    assert validated_score(_point(10, 1900.0), _val(3200.0, 1400.0), 0.075, 3000.0, with_training_return=False) == 1400.0
    assert validated_score(_point(10, 1900.0), _val(2999.0, 2800.0), 0.075, 3000.0, with_training_return=False) is None
    assert validated_score(_point(10, 1900.0, eps=0.05), _val(3500.0, 2800.0), 0.075, 3000.0,
                           with_training_return=False) is None
    assert validated_score(_point(10, 1900.0), _val(3500.0, None), 0.075, 3000.0, with_training_return=False) == 1900.0
    assert validation.rule_folder(True, False) == "push-confirmed" and validation.rule_folder(False, False) == "push-validated"
    assert validation.rule_folder(True) == validation.CONFIRMED and validation.rule_folder(False) == VALIDATED


def test_the_push_confirmed_rule_keeps_the_best_confirmed_push_whatever_the_training_return(monkeypatch, tmp_path):
    """The worst-first pool's seed 1, in small: 10 has the best training return (1650) and a push
    screened at 2100 that confirms at 1700; 20 a lower training return (1600) and a push screened at
    3100 that confirms at 2500. The confirmed rule (min with the training return) keeps 10 and never
    plays 20 (its screen score 1600 cannot beat 10's 1650); the push-confirmed rule confirms 20 first
    (screen order by the push), stops (2500 ≥ 10's screen 2100) and keeps it in its own folder."""
    history = [_point(10, 1650.0), _point(20, 1600.0)]
    vals = {10: _val_pushes(3500.0, {"a": 2100.0, "b": 3000.0}), 20: _val_pushes(3500.0, {"a": 3100.0, "b": 3300.0})}
    confirmed_at = {10: {"a": 1600.0, "b": 3000.0}, 20: {"a": 2350.0, "b": 3300.0}}
    confirmed = []
    monkeypatch.setattr(validation, "validate_agent", lambda folder, *a, **k: vals[int(folder.name.split("-")[1])])
    monkeypatch.setattr(validation, "confirm_agent", _fake_confirmations(confirmed_at, confirmed))
    run = _constructed_run(tmp_path, [10, 20])
    by_min = select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None,
                              confirm_episodes=8, finalists=5)
    assert confirmed == [10] and by_min["iteration"] == 10 and by_min["score"] == pytest.approx(1650.0)
    confirmed.clear()
    by_push = select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None,
                               confirm_episodes=8, finalists=5, with_training_return=False)
    # 20: (2·3100 + 8·2350)/10 = 2500, above 10's screen (2100): 10's confirmation (kept from the first
    # call: 1700) is never compared, and nothing else is played
    assert confirmed == [20] and by_push["iteration"] == 20 and by_push["score"] == pytest.approx(2500.0)
    assert "worst push director's validated return" in by_push["rule"] and "training" not in by_push["rule"]
    assert (run / "push-confirmed" / "model.zip").read_bytes() == b"weights of iteration 20"
    assert (run / validation.CONFIRMED / "model.zip").read_bytes() == b"weights of iteration 10"


def test_the_push_validated_rule_keeps_the_highest_worst_push_beside_the_validated_choice(monkeypatch, tmp_path):
    """The checkpoints of the validated rule's test: by the worst push alone 30 (1900) wins where
    min(attacked, push) keeps 20; 50's higher push (2400) is before the full ε and stays unranked."""
    history = [_point(10, 1500.0), _point(20, 1700.0), _point(30, 1600.0), _point(40, 2100.0), _point(50, 2500.0, 0.05)]
    vals = {10: _val(3100.0, 1450.0), 20: _val(3300.0, 1650.0), 30: _val(3050.0, 1900.0), 40: _val(3400.0, 1000.0),
            50: _val(3600.0, 2400.0)}
    monkeypatch.setattr(validation, "validate_agent", lambda folder, *a, **k: vals[int(folder.name.split("-")[1])])
    run = _constructed_run(tmp_path, [10, 20, 30, 40, 50])
    assert select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)["iteration"] == 20
    chosen = select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None,
                              with_training_return=False)
    assert chosen["iteration"] == 30 and chosen["score"] == 1900.0
    assert (run / "push-validated" / "model.zip").read_bytes() == b"weights of iteration 30"
    assert (run / VALIDATED / "model.zip").read_bytes() == b"weights of iteration 20"


def test_the_push_confirmed_preset_trains_as_the_prioritized_one_and_keeps_its_agent_apart(tmp_path):
    push_confirmed = presets.ATLA_PRESETS["hopper-pool3-prioritized-pa-atla-ppo-push-confirmed"]
    assert not push_confirmed.select_with_training_return and push_confirmed.validate_confirm_episodes == 8
    assert atla.trains_as(push_confirmed, "hopper-pool3-prioritized-pa-atla-ppo-validated")
    assert (presets.training_digest(push_confirmed, atla.SELECTION_FIELDS) == presets.training_digest(
        presets.ATLA_PRESETS["hopper-pool3-prioritized-pa-atla-ppo-validated"], atla.SELECTION_FIELDS))
    for folder in (validation.CONFIRMED, "push-confirmed"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "selection.json").write_text("{}")
    assert atla.run_agent(push_confirmed.name, tmp_path) == tmp_path / "push-confirmed"
    assert atla.run_agent("hopper-pool3-prioritized-pa-atla-ppo-confirmed", tmp_path) == tmp_path / validation.CONFIRMED


def test_a_finalist_without_its_snapshot_or_confirmation_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(validation, "validate_agent", lambda *a, **k: _val_pushes(3500.0, {"a": 1500.0}))
    run = _constructed_run(tmp_path, [10])
    history = [_point(10, 1700.0)]
    select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, log=lambda line: None)
    shutil.rmtree(run / "snapshots")
    with pytest.raises(UserError, match=r"no snapshot of iteration 10 .*no confirmation of it"):
        select_validated(run, history, "Hopper-v5", 0.075, 3000.0, 10, 2, confirm_episodes=8, finalists=5)
    assert not (run / validation.CONFIRMED).exists()


def test_the_confirmed_preset_trains_as_the_prioritized_one_and_keeps_its_agent_apart(tmp_path):
    confirmed = presets.ATLA_PRESETS["hopper-pool3-prioritized-pa-atla-ppo-confirmed"]
    assert atla.trains_as(confirmed, "hopper-pool3-prioritized-pa-atla-ppo-validated")
    assert not atla.trains_as(confirmed, "hopper-pool3-pa-atla-ppo-validated")  # drawn uniformly
    assert (presets.training_digest(confirmed, atla.SELECTION_FIELDS) == presets.training_digest(
        presets.ATLA_PRESETS["hopper-pool3-prioritized-pa-atla-ppo-validated"], atla.SELECTION_FIELDS))
    for folder in (VALIDATED, validation.CONFIRMED):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "selection.json").write_text("{}")
    assert atla.run_agent(confirmed.name, tmp_path) == tmp_path / validation.CONFIRMED
    assert atla.run_agent("hopper-pool3-prioritized-pa-atla-ppo-validated", tmp_path) == tmp_path / VALIDATED


def test_without_push_directors_the_confirmed_rule_keeps_the_screens_choice_and_plays_nothing(monkeypatch, tmp_path):
    """A discrete action space has no push to confirm: the confirmed rule ranks as the validated one
    (the training return alone) and never calls the confirmation."""
    monkeypatch.setattr(validation, "validate_agent", lambda folder, *a, **k: _val(3500.0, None))
    monkeypatch.setattr(validation, "confirm_agent", lambda *a, **k: pytest.fail("confirmed a run without pushes"))
    run = _constructed_run(tmp_path, [10, 20, 30])
    chosen = select_validated(run, [_point(10, 1500.0), _point(20, 1900.0), _point(30, 1700.0)], "Hopper-v5", 0.075,
                              3000.0, 10, 2, log=lambda line: None, confirm_episodes=8, finalists=5)
    assert chosen["iteration"] == 20 and chosen["score"] == 1900.0
    assert (run / validation.CONFIRMED / "model.zip").read_bytes() == b"weights of iteration 20"
