"""Sweeps: the file format, the plan, equality with evaluate, resuming after a kill, the local
and Ray executors (Ray only inside a loopback-only network namespace made by the test)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlgauntlet.errors import UserError
from rlgauntlet.common.executors import LocalExecutor
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.experiments.sweep import SweepSpec, load_sweep_file, plan_sweep, run_sweep

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "rlgauntlet.cli"]

SMALL = {
    "name": "small",
    "agents": ["zoo:cartpole-dqn"],
    "threats": ["uniform_noise", "fgsm"],
    "eps_grid": [0.15, 0.3],  # budgets that end episodes early: a fast suite
    "strongest_of": ["uniform_noise,fgsm"],
    "episodes": 5,
    "chunk_episodes": 2,
}


def write_yaml(path: Path, data: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(data))
    return path


def episode_rows(store_path: Path) -> list[tuple]:
    """Every stored episode as (spec, episode, seed, return, length), independent of run ids."""
    conn = sqlite3.connect(store_path)
    try:
        rows = conn.execute("SELECT r.meta, e.episode, e.seed, e.episode_return, e.length FROM episodes e "
                            "JOIN runs r ON r.run_id = e.run_id").fetchall()
    finally:
        conn.close()
    return sorted((json.loads(meta)["spec"], *rest) for meta, *rest in rows)


# --- the sweep file ------------------------------------------------------------------------

def test_spec_accepts_strings_lists_and_groups_as_text():
    spec = SweepSpec.model_validate(SMALL)
    assert spec.agents[0].agent == "zoo:cartpole-dqn" and spec.agents[0].envs is None
    assert spec.eps_grid == "0.15,0.3"
    assert spec.strongest_of == [["uniform_noise", "fgsm"]]


@pytest.mark.parametrize("change, message", [
    ({"episodes": 0}, "episodes"),
    ({"colour": "red"}, "colour"),
    ({"strongest_of": ["pgd"]}, "at least two"),
    ({"eps": "0.1"}, "either eps or eps_grid"),
    ({"seeds": [1, 1]}, "distinct"),
    ({"agents": []}, "agents"),
    ({"agents": [{"agent": "zoo:cartpole-dqn", "precision": "half"}]}, "agents.0.precision"),
    ({"episodes": True}, "episodes"),  # YAML's true is not 1 episode
    ({"seeds": [True]}, "seeds"),
    ({"threats": ["fgsm", "fgsm"]}, "threats lists fgsm twice"),  # used to be counted twice ("stored −4")
    ({"agents": ["zoo:cartpole-dqn", "zoo:cartpole-dqn"]}, "agents lists zoo:cartpole-dqn twice"),
])
def test_bad_sweep_files_name_the_problem(tmp_path, change, message):
    path = write_yaml(tmp_path / "s.yaml", {**SMALL, **change})
    with pytest.raises(UserError) as err:
        load_sweep_file(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unquoted_numbers_are_budgets():
    spec = SweepSpec.model_validate({**SMALL, "eps_grid": None, "eps": 0.05, "suites": ["adversarial"]})
    assert spec.eps == "0.05"


def test_certified_suite_stores_certification_rows(tmp_path):
    """``suites: [certified]`` runs the certification in the sweep and stores it (it used to
    be dropped silently); a re-run reuses the stored budgets."""
    from rlgauntlet.experiments.store import ResultsStore

    spec = SweepSpec.model_validate({"agents": ["zoo:cartpole-dqn"], "suites": ["certified"], "eps_grid": [0.01, 0.2],
                                     "episodes": 2, "impact": False})
    result = run_sweep(spec, tmp_path / "s.sqlite", workers=1)
    rows = result["certified"][0]["evaluations"]
    assert [r["spec"] for r in rows] == ["gwc:eps=0.01", "gwc:eps=0.2"]
    assert all(0.0 <= r["metrics"]["acr"]["value"] <= 1.0 for r in rows)
    store = ResultsStore(tmp_path / "s.sqlite")
    certification_runs = store.runs(kind="certification")
    store.close()
    assert len(certification_runs) >= 2
    again = run_sweep(spec, tmp_path / "s.sqlite", workers=1)
    assert again["certified"][0]["evaluations"][0]["returns"] == rows[0]["returns"]


def test_yaml_errors_give_the_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("agents: [zoo:cartpole-dqn\nepisodes: 3\n")
    with pytest.raises(UserError, match="not valid YAML at line"):
        load_sweep_file(path)
    path.write_text("- just a list\n")
    with pytest.raises(UserError, match="must be a mapping"):
        load_sweep_file(path)


def test_committed_json_schema_is_current():
    """The committed schema names every field with its default (compared field by field, so a
    pydantic release that words schemas differently does not fail this, a new field does)."""
    committed = json.loads((REPO / "docs" / "sweep.schema.json").read_text())
    generated = SweepSpec.model_json_schema()

    def fields(schema: dict) -> dict:
        return {name: prop.get("default") for name, prop in schema["properties"].items()}

    hint = "regenerate with: python -m rlgauntlet.experiments.sweep"
    assert fields(committed) == fields(generated), hint
    assert fields(committed["$defs"]["AgentEntry"]) == fields(generated["$defs"]["AgentEntry"]), hint
    assert committed.get("required") == generated.get("required"), hint


# --- the plan --------------------------------------------------------------------------------

def test_plan_cells_and_chunks_cover_exactly_the_missing_episodes(tmp_path):
    spec = SweepSpec.model_validate({**SMALL, "seeds": [0, 7]})
    store = ResultsStore(tmp_path / "s.sqlite")
    plan = plan_sweep(spec, store)
    # per seed: clean, 2 threats × 2 budgets, the argmin agent (impact of a discrete agent)
    assert [len(p.cells.cells) for p in plan.pairs] == [6, 6]
    assert plan.total_episodes == plan.missing_episodes == 2 * 6 * 5
    covered = sorted((c.run_id, k) for c in plan.chunks for k in c.episodes)
    assert covered == sorted((run_id, k) for p in plan.pairs for run_id in p.cells.run_ids.values() for k in range(5))
    assert max(len(c.episodes) for c in plan.chunks) == 2
    # planning again finds the same runs instead of creating new ones
    again = plan_sweep(spec, store)
    assert [p.cells.run_ids for p in again.pairs] == [p.cells.run_ids for p in plan.pairs]
    assert len(store.runs()) == 12


def test_plan_refuses_a_threat_that_does_not_fit_before_any_work(tmp_path):
    spec = SweepSpec.model_validate({**SMALL, "threats": ["rotation:degrees=3"], "strongest_of": []})
    store = ResultsStore(tmp_path / "s.sqlite")
    with pytest.raises(UserError, match="rotation"):
        plan_sweep(spec, store)
    assert store.runs() == []


def test_an_agent_without_env_needs_one(tmp_path):
    spec = SweepSpec.model_validate({"agents": ["sb3:agent.zip"], "episodes": 1})
    with pytest.raises(UserError, match="names no env"):
        plan_sweep(spec, ResultsStore(":memory:"))


# --- results ---------------------------------------------------------------------------------

def test_sweep_equals_evaluate_and_resumes_into_the_same_runs(tmp_path):
    """Two worker processes, chunks of 2 episodes: per-episode returns equal a plain evaluate's,
    and evaluate --resume on the sweep's store finds every run complete."""
    from rlgauntlet import evaluate

    store = tmp_path / "s.sqlite"
    result = run_sweep(SweepSpec.model_validate(SMALL), store, workers=2)
    assert result["ran"] == result["episodes"] == 6 * 5
    swept = {ev["spec"]: ev["returns"] for ev in result["reports"][0]["evaluations"]}
    reference = evaluate("zoo:cartpole-dqn", "CartPole-v1", threats=["uniform_noise", "fgsm"], eps_grid="0.15,0.3",
                         episodes=5, n_envs=3, impact=True)
    assert swept == {ev["spec"]: ev["returns"] for ev in reference.evaluations}
    assert result["reports"][0]["score_min"] == reference.score_min
    rows = result["reports"][0]["strongest_of"]
    assert [r["winner"] for r in rows] == ["fgsm:eps=0.15", "fgsm:eps=0.3"]
    before = len(ResultsStore(store).runs())
    seen = []
    evaluate("zoo:cartpole-dqn", "CartPole-v1", threats=["uniform_noise", "fgsm"], eps_grid="0.15,0.3", episodes=5,
             store=store, resume=True, on_episode=lambda label, rec: seen.append(label))
    assert seen == [] and len(ResultsStore(store).runs()) == before
    again = run_sweep(SweepSpec.model_validate(SMALL), store, workers=1)
    assert again["ran"] == 0 and len(ResultsStore(store).runs()) == before  # strongest-of rows found, not added


@pytest.mark.slow  # 16 s; the CLI's SIGINT test and the store's killed-evaluation test hold the same resume
def test_interrupted_sweep_resumes_with_the_same_rows(tmp_path):
    """The driver dies after its first chunks are written: a re-run runs only what is missing
    and the store ends with exactly the rows of an uninterrupted sweep."""
    spec = SweepSpec.model_validate(SMALL)
    whole = tmp_path / "whole.sqlite"
    run_sweep(spec, whole, workers=1)
    broken = tmp_path / "broken.sqlite"
    written = []

    def die_after_three(chunk, records):
        written.extend(records)
        if len(written) >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, broken, workers=2, on_chunk=die_after_three)
    kept = len(episode_rows(broken))
    assert 3 <= kept < 30
    result = run_sweep(spec, broken, workers=2)
    assert result["ran"] == 30 - kept
    assert episode_rows(broken) == episode_rows(whole)


def _die_once(task):
    """A task that kills its worker process the first time it sees task 1."""
    marker = Path(task[1])
    if task[0] == 1 and not marker.exists():
        marker.write_text("died")
        os._exit(9)
    return task[0] * 10


def test_local_executor_survives_a_dead_worker(tmp_path):
    tasks = [(k, str(tmp_path / "marker")) for k in range(4)]
    done = {}
    with LocalExecutor(workers=2) as pool:
        pool.run(_die_once, tasks, lambda task, result: done.__setitem__(task[0], result))
    assert done == {0: 0, 1: 10, 2: 20, 3: 30}
    assert (tmp_path / "marker").exists()


def tracebacks_through_files(err: str) -> list[str]:
    """The tracebacks in ``err`` with a frame in a source file: every traceback of our driver, of
    its workers (multiprocessing's and concurrent.futures' frames) and of rlgauntlet has one. Left
    out: one whose frames are all in ``<string>`` code, which none of our processes runs (a CI
    machine once printed ``File "<string>", line 28`` / ``EOFError: EOF when reading a line`` here,
    from a process outside this package)."""
    blocks = err.split("Traceback (most recent call last):")[1:]
    return [block for block in blocks if re.search(r'^\s*File "(?!<string>)', block, re.MULTILINE)]


def test_a_traceback_through_a_file_is_found_and_a_string_only_one_is_not():
    ours = 'x\nTraceback (most recent call last):\n  File "/a/rlgauntlet/cli.py", line 3, in main\nKeyboardInterrupt\n'
    foreign = 'Traceback (most recent call last):\n  File "<string>", line 28, in <module>\nEOFError: EOF\n'
    assert len(tracebacks_through_files(ours)) == 1 and tracebacks_through_files(foreign) == []
    assert len(tracebacks_through_files(foreign + ours)) == 1 and tracebacks_through_files("no traceback") == []


def test_cli_sigint_keeps_finished_chunks_and_a_rerun_completes(tmp_path):
    # a budget the agent survives: full 500-step episodes, so the sweep is still running at SIGINT
    spec = write_yaml(tmp_path / "s.yaml", {**SMALL, "eps_grid": [0.05], "strongest_of": [], "episodes": 6,
                                             "chunk_episodes": 1})
    total = 4 * 6  # clean, two threats, the argmin agent
    store = tmp_path / "s.sqlite"
    proc = subprocess.Popen([*CLI, "sweep", str(spec), "--store", str(store), "--workers", "2"], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            if len(episode_rows(store)) >= 4:
                break
        except sqlite3.OperationalError:  # the store's tables are not there yet
            pass
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "run the same command again" in err and not tracebacks_through_files(err), err
    kept = len(episode_rows(store))
    rerun = subprocess.run([*CLI, "sweep", str(spec), "--store", str(store)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert 4 <= kept < total and f"ran {total - kept} of {total} episodes" in " ".join(rerun.stderr.split())
    rows = episode_rows(store)
    assert len(rows) == len(set((r[0], r[1]) for r in rows)) == total


# --- Ray, inside a loopback-only network namespace --------------------------------------------

def test_ray_head_in_a_namespace_matches_the_local_executor(tmp_path, monkeypatch):
    """From a clean home folder (no token file left by an earlier run): the documented way, a
    head with token authentication and a client given its address and token, works."""
    from netns import RayNamespace, namespace_unavailable  # tools/netns.py: for tests and benchmarks only

    reason = namespace_unavailable()
    if reason:
        pytest.skip(reason)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    spec = write_yaml(tmp_path / "s.yaml", SMALL)
    try:
        namespace = RayNamespace(cpus=2)
        with namespace as ns:
            assert "Local node IP: 127.0.0.1" in ns.head_output  # the head advertises loopback only
            swept = ns.run([*CLI, "sweep", str(spec), "--store", str(tmp_path / "ray.sqlite"), "--executor", "ray",
                            "--address", ns.address], cwd=tmp_path, timeout=300)
            assert swept.returncode == 0, swept.stderr[-2000:]
            # a client with another token is refused: exit 2, one line naming the fix, no traceback
            refused = ns.run([*CLI, "sweep", str(spec), "--store", str(tmp_path / "other.sqlite"), "--executor", "ray",
                              "--address", ns.address], cwd=tmp_path, timeout=300,
                             env={**ns.env, "RAY_AUTH_TOKEN": "0" * 64})
            lines = [line for line in refused.stderr.splitlines() if line.startswith("rlgauntlet:")]
            assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
            assert len(lines) == 1 and "refused this client's token" in lines[0] and "RAY_AUTH_TOKEN" in lines[0]
    except RuntimeError as exc:
        pytest.skip(str(exc))
    gone = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert namespace.name not in gone
    assert not (tmp_path / "home" / ".ray" / "auth_token").exists()  # the token was never a file
    run_sweep(SweepSpec.model_validate(SMALL), tmp_path / "local.sqlite", workers=2)
    assert episode_rows(tmp_path / "ray.sqlite") == episode_rows(tmp_path / "local.sqlite")


def test_a_worker_refuses_an_agent_file_changed_since_planning():
    from dataclasses import replace

    from rlgauntlet.experiments.cells import run_chunk

    plan = plan_sweep(SweepSpec.model_validate({**SMALL, "episodes": 1}), ResultsStore(":memory:"))
    chunk = plan.chunks[0]
    assert len(run_chunk(chunk)) == 1
    stale = replace(chunk, cell=replace(chunk.cell, sha256="0" * 64))
    with pytest.raises(UserError, match="changed while the sweep ran"):
        run_chunk(stale)


def test_dry_run_writes_nothing_and_counts_what_is_missing(tmp_path):
    spec = write_yaml(tmp_path / "s.yaml", {**SMALL, "episodes": 2, "strongest_of": []})
    store = tmp_path / "s.sqlite"
    dry = subprocess.run([*CLI, "sweep", str(spec), "--store", str(store), "--dry-run"], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert not store.exists() and "12 of 12 episodes to run" in " ".join(dry.stderr.split())
    run_sweep(SweepSpec.model_validate({**SMALL, "episodes": 1, "strongest_of": []}), store, workers=1)
    before = store.read_bytes()
    dry = subprocess.run([*CLI, "sweep", str(spec), "--store", str(store), "--dry-run"], capture_output=True, text=True)
    assert dry.returncode == 0 and "6 of 12 episodes to run" in " ".join(dry.stderr.split())
    assert store.read_bytes() == before


def test_a_chunk_returning_other_episodes_is_an_error_not_a_short_run():
    from rlgauntlet.engine.rollout import EpisodeRecord
    from rlgauntlet.experiments.cells import write_chunk

    store = ResultsStore(":memory:")
    plan = plan_sweep(SweepSpec.model_validate({**SMALL, "episodes": 2}), store)
    chunk = plan.chunks[0]
    with pytest.raises(RuntimeError, match="expected"):
        write_chunk(store, chunk, [EpisodeRecord(episode=chunk.episodes[0], seed=0, episode_return=1.0, length=1)])
    assert store.done_episodes(chunk.run_id) == set()


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_workers_die_with_a_killed_driver(tmp_path):
    """SIGKILL on the driver (nothing it can handle) ends its workers within seconds."""
    import signal as signals

    script = ("import time\nfrom rlgauntlet.common.executors import make_executor\n"
              "with make_executor('local', workers=2) as pool:\n"
              "    pool.run(time.sleep, [120, 120], lambda task, result: None)\n")
    driver = subprocess.Popen([sys.executable, "-c", script])
    try:
        workers: set[int] = set()
        for _ in range(300):  # the spawned workers appear within seconds
            time.sleep(0.1)
            workers = {p for p in _children(driver.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()
                       if Path(f"/proc/{p}/cmdline").exists()}
            if len(workers) == 2:
                break
        assert len(workers) == 2
    finally:
        driver.send_signal(signals.SIGKILL)
        driver.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{p}").exists() and
                                         "Z" != (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0])
                                         for p in workers):
        time.sleep(0.2)
    alive = [p for p in workers if Path(f"/proc/{p}").exists()
             and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    assert not alive, f"workers {alive} outlived their driver"


def test_a_chunk_is_stored_with_the_seconds_it_took_not_its_episodes_added_up():
    """Episodes stepped side by side overlap: the chunk's time is the span of the engine's
    schedule (one env: the sum; all at once: the longest; in between: each freed env takes the
    next episode). Summing them, the earlier rule, fails the side-by-side cases."""
    from rlgauntlet.engine.rollout import EpisodeRecord
    from rlgauntlet.experiments.cells import chunk_seconds

    def records(times):
        return [EpisodeRecord(k, 0, 0.0, 1, wall_seconds=t) for k, t in enumerate(times)]

    times = [2.0, 5.0, 1.0, 4.0, 3.0]
    assert chunk_seconds(records(times), 1) == pytest.approx(15.0)
    assert chunk_seconds(records(times), 5) == pytest.approx(5.0)
    assert chunk_seconds(records(times), 8) == pytest.approx(5.0)  # more envs than episodes
    # two envs: 0 (2 s) and 1 (5 s) start; 2 takes env 0 at 2 s (to 3), 3 takes env 0 at 3 s (to
    # 7), 4 takes env 1 at 5 s (to 8)
    assert chunk_seconds(records(times), 2) == pytest.approx(8.0)
    assert chunk_seconds(list(reversed(records(times))), 2) == pytest.approx(8.0)  # finish order does not matter


def _train_a_director(run_dir: str) -> dict:
    """A worker's task: a CartPole director far longer than the test waits (a checkpoint every
    2,048 steps, 512 a rollout)."""
    from rlgauntlet.experiments.attacker_job import train_attacker
    from rlgauntlet.training.attackers.attack_train import director_settings

    settings = {**director_settings("CartPole-v1"), "n_envs": 2, "n_steps": 256, "batch_size": 64}
    return train_attacker("zoo:cartpole-dqn", "CartPole-v1", "paad", eps=0.1, steps=400_000, run_dir=run_dir, seed=0,
                          eval_episodes=0, threads=1, checkpoint_every=2048, hyperparams=settings,
                          log=lambda _: None)


def test_a_stopped_driver_lets_its_workers_training_save_at_its_rollouts_end(tmp_path, monkeypatch):
    """The driver stops its workers with SIGTERM (a board stopped by SIGTERM or Ctrl-C): a worker
    in a training saves at that rollout's end, with its run state, and ends; the steps since its last
    scheduled checkpoint are kept, not lost (the stop's own save marks where it stopped)."""
    import threading

    from rlgauntlet.common import stopping

    run_dir = tmp_path / "director"
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    progress_file = run_dir / "checkpoint" / "progress.json"

    def stop_once_training() -> None:  # the driver's own signal, once the worker's director is training
        deadline = time.time() + 120
        while time.time() < deadline and not progress_file.exists():  # its first scheduled checkpoint
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    try:
        stopping.install()
        threading.Thread(target=stop_once_training, daemon=True).start()
        with pytest.raises(stopping.Interrupted):
            with LocalExecutor(workers=1) as pool:
                pool.run(_train_a_director, [str(run_dir)], lambda task, result: None)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    progress = json.loads(progress_file.read_text())  # written by the stop, at a rollout's end
    steps = progress["num_timesteps"]
    assert progress["stopped_at_deadline"] == steps >= 2048 and steps % 512 == 0
    assert (run_dir / "checkpoint" / "run_state.npz").exists()
