"""Results store: a killed evaluation keeps its finished episodes; --resume completes it
without duplicates and with the numbers an uninterrupted run gives."""

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from rlgauntlet.engine.rollout import EpisodeRecord
from rlgauntlet.experiments.runs import summarize
from rlgauntlet.experiments.store import ResultsStore


def _cmd(model, store, out, episodes, resume=False):
    cmd = [sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", f"sb3:{model}", "--env", "Pendulum-v1",
           "--threat", "gaussian_noise:std=0.2", "--episodes", str(episodes), "--n-envs", "1",
           "--store", str(store), "--out", str(out)]
    return cmd + (["--resume"] if resume else [])


def _stored(store):
    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT run_id, episode FROM episodes").fetchall()


def test_killed_evaluation_resumes_without_loss_or_duplicates(tiny_models, tmp_path, cli_env):
    model, episodes = tiny_models["sac"], 30
    store = tmp_path / "r.sqlite"
    proc = subprocess.Popen(_cmd(model, store, tmp_path / "a.json", episodes), env=cli_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until some clean episodes are stored, then kill hard
        time.sleep(0.2)
        if store.exists():
            try:
                if len(_stored(store)) >= 3:
                    break
            except sqlite3.OperationalError:
                pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _stored(store)
    assert 3 <= len(before) < 2 * episodes, "the kill must land mid-way"

    subprocess.run(_cmd(model, store, tmp_path / "b.json", episodes, resume=True), env=cli_env, check=True,
                   capture_output=True)
    after = _stored(store)
    assert len(after) == len(set(after)) == 2 * episodes  # clean + threat, no duplicates
    assert set(before) <= set(after)  # nothing finished was redone or lost

    subprocess.run(_cmd(model, tmp_path / "fresh.sqlite", tmp_path / "c.json", episodes), env=cli_env, check=True,
                   capture_output=True)
    resumed = json.loads((tmp_path / "b.json").read_text())["evaluations"]
    fresh = json.loads((tmp_path / "c.json").read_text())["evaluations"]
    assert [e["returns"] for e in resumed] == [e["returns"] for e in fresh]


def test_resume_of_complete_run_runs_nothing(tmp_path):
    store = ResultsStore(tmp_path / "s.sqlite")
    run = store.create_run("key", {"threat": "clean"})
    store.add_episode(run, EpisodeRecord(episode=0, seed=0, episode_return=1.0, length=3))
    assert store.latest_run("key") == run and store.done_episodes(run) == {0}
    again = store.create_run("key", {"threat": "clean"})
    assert store.latest_run("key") == again and store.done_episodes(again) == set()


def test_summary_statistics_closed_form():
    recs = [EpisodeRecord(episode=k, seed=k, episode_return=r, length=10, perturbed_steps=5, action_checks=5, action_changes=c,
                          linf_sum=0.5, linf_max=0.1, l2_sum=1.0)
            for k, (r, c) in enumerate([(1.0, 1), (2.0, 2), (3.0, 0), (6.0, 1)])]
    s = summarize(recs, "t", "t:x=1", 0, "raw", 1.0)
    assert s["return_mean"] == 3.0
    assert abs(s["return_std"] - (14 / 4) ** 0.5) < 1e-12  # population std, as SB3
    assert abs(s["return_sem"] - (14 / 3) ** 0.5 / 2) < 1e-12
    assert s["perturbed_fraction"] == 0.5 and s["action_change_rate"] == 4 / 20
    assert s["linf_mean"] == 0.1 and s["l2_mean"] == 0.2


def test_store_written_by_older_version_is_upgraded_in_place(tmp_path):
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE runs (run_id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, created REAL NOT NULL,
                           meta TEXT NOT NULL, wall_seconds REAL NOT NULL DEFAULT 0);
        CREATE TABLE episodes (run_id INTEGER NOT NULL, episode INTEGER NOT NULL, seed INTEGER NOT NULL,
            episode_return REAL NOT NULL, length INTEGER NOT NULL, perturbed_steps INTEGER NOT NULL,
            action_changes INTEGER NOT NULL, linf_sum REAL NOT NULL, linf_max REAL NOT NULL, l2_sum REAL NOT NULL,
            wall_seconds REAL NOT NULL, finished REAL NOT NULL, PRIMARY KEY (run_id, episode));
        INSERT INTO runs (key, created, meta) VALUES ('k', 0, '{}');
        INSERT INTO episodes VALUES (1, 0, 0, 10.0, 5, 4, 2, 0.4, 0.1, 0.8, 0.1, 0);
    """)
    old.commit()
    old.close()
    store = ResultsStore(path)
    (rec,) = store.episodes(1)
    assert rec.episode_return == 10.0 and rec.action_checks == 4 and rec.ssim_sum == 0
    store.add_episode(1, EpisodeRecord(episode=1, seed=1, episode_return=3.0, length=2))
    assert store.done_episodes(1) == {0, 1}
    assert store.run_kind(1) == "evaluation" and rec.world is None  # older runs are evaluations
    store.add_metric(1, "impact", 0.5, "fraction")
    assert store.metrics(1) == {"impact": {"value": 0.5, "unit": "fraction", "trials": None}}


def test_run_level_metrics_and_kinds_are_kept_and_replaced(tmp_path):
    path = tmp_path / "m.sqlite"
    store = ResultsStore(path)
    ood = store.create_run("k-ood", {"detector": "ensemble"}, kind="ood")
    evaluation = store.create_run("k-eval", {"threat": "clean"})
    store.add_metric(ood, "auroc", 0.8, "", trials=[0.7, 0.9])
    store.add_metric(ood, "search_nodes", 12, "nodes")
    store.add_metric(ood, "auroc", 0.85, "", trials=[0.8, 0.9])  # recomputed: replaced, not duplicated
    store.close()
    again = ResultsStore(path)  # written at once: a new connection sees them
    assert again.metrics(ood) == {"auroc": {"value": 0.85, "unit": "", "trials": [0.8, 0.9]},
                                  "search_nodes": {"value": 12.0, "unit": "nodes", "trials": None}}
    assert again.metrics(evaluation) == {}
    assert [r for r, _ in again.runs(kind="ood")] == [ood] and [r for r, _ in again.runs(kind="evaluation")] == [evaluation]
    with pytest.raises(ValueError, match="unknown run kind"):
        again.create_run("k", {}, kind="party")


def test_world_record_round_trips_through_the_store(tmp_path):
    store = ResultsStore(tmp_path / "w.sqlite")
    run = store.create_run("k", {})
    world = {"param": "length", "body": None, "default": 0.5, "value": 2.0}
    store.add_episode(run, EpisodeRecord(episode=0, seed=0, episode_return=1.0, length=3, world=world))
    assert store.episodes(run)[0].world == world
