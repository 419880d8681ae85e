"""Hardening: every input is a valid run or exit 2 with one line (never a traceback); signals
exit 130/143 keeping what finished; concurrent writers; foreign files left untouched."""

import hashlib
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlgauntlet.errors import UserError
from rlgauntlet.threats import parse_threat

CMD = [sys.executable, "-m", "rlgauntlet.cli"]


def run_cli(args, env, cwd):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, env=env, cwd=cwd)


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the spec grammar: any text is a threat or a UserError ---------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcdefgnopqrstuvwxyz_:=,./|'\" 0123456789-+eE")), max_size=40))
def test_any_spec_text_is_a_threat_or_a_user_error(text):
    try:
        parse_threat(text)
    except UserError:
        pass


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["uniform_noise:eps", "gaussian_noise:std", "pgd:eps", "random:eps", "pgd:steps",
                            "obs_delay:steps", "action_noise:std", "physics:param=length,scale", "rotation:degrees",
                            "frame_freeze:duration"]),
       value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**30, max_value=10**30),
                       st.sampled_from(["true", "false", "1e400", "-1e400", "nan", "inf", "1/0", "0/0", "1" * 120,
                                        "1e-400", "", "x|y", "'q'"])))
def test_any_parameter_value_is_a_threat_or_a_user_error(name, value):
    try:
        threat = parse_threat(f"{name}={value}")
    except UserError:
        return
    for key, v in threat.params.model_dump().items():  # what got through is a finite number or text
        assert not isinstance(v, float) or v == v and abs(v) != float("inf"), (key, v)


# -- CLI options, in process: exit 0 or exit 2 with one line ----------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.one_of(st.integers(), st.sampled_from(["-1", "1" * 50, "x", "1.5"])),
       episodes=st.one_of(st.integers(min_value=-3, max_value=2), st.sampled_from(["0", "a"])),
       n_envs=st.one_of(st.integers(min_value=-2, max_value=3), st.just("two")),
       threat=st.sampled_from(["uniform_noise:eps=0.1", "pgd:eps=1e400", "pgd:eps=true", "nope", "obs_delay:steps=0",
                               "physics:param=mass,scale=2", "random_action:p=2", "uniform_noise:eps=1e300"]))
def test_any_cli_options_run_or_exit_2_with_one_line(seed, episodes, n_envs, threat, tmp_path_factory, cli_main):
    folder = tmp_path_factory.mktemp("cli")
    code, err = cli_main(["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--seed", str(seed),
                          "--episodes", str(episodes), "--n-envs", str(n_envs), "--threat", threat, "--no-impact",
                          "--store", str(folder / "s.sqlite")])
    assert code in (0, 2), err
    lines = [line for line in err.splitlines() if line.startswith("rlgauntlet:") or "Traceback" in line]
    assert "Traceback" not in err
    if code == 2:
        assert len(lines) == 1, err


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "--seed"),
    (["--seed", str(2**64)], "must lie in 0"),
    (["--preset", "atari"], "--preset atari needs an Atari"),
    (["--env", "nosuchmodule:Thing-v0"], "cannot make env 'nosuchmodule:Thing-v0'"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--vecnormalize", "missing.pkl"], "zoo agents carry their own VecNormalize statistics"),
    (["--agent", "sb3:.", "--env", "CartPole-v1"], "is a directory"),
    (["--agent", "sb3:{zoo}/cartpole-dqn.zip:sac", "--env", "CartPole-v1"], "holds a DQN policy, not SAC"),
    (["--threat", "pgd:eps=nan"], "eps: Input should be a finite number"),
    (["--threat", "pgd:eps=true"], "eps=true is a boolean, not a number"),
    (["--threat", "uniform_noise"], "required: eps"),
    (["--threat", "uniform_noise:eps=1e300"], "too large"),
])
def test_reported_tracebacks_are_now_one_line_errors(args, message, tmp_path, cli_main):
    base = ["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--episodes", "1", "--no-impact"]
    if args[0] == "--agent":
        base = ["evaluate", "--episodes", "1"]
    from rlgauntlet.zoo import zoo_dir

    res = cli_main([*base, *[a.format(zoo=zoo_dir()) for a in args]], cwd=tmp_path)
    lines = [line for line in res.stderr.splitlines() if line.strip() and not line.startswith(("clean", "uniform"))]
    assert res.returncode == 2 and "Traceback" not in res.stderr and message in res.stderr, res.stderr
    assert len([line for line in lines if line.startswith("rlgauntlet:")]) == 1
    assert not list(tmp_path.glob("*.sqlite")) or "1e300" in " ".join(args)  # refused before any run was made


def test_required_hint_lists_only_missing_parameters():
    with pytest.raises(UserError) as exc:
        parse_threat("physics:scale=2")
    assert "required: param" in str(exc.value)
    with pytest.raises(UserError) as exc:
        parse_threat("physics:param=length,scale=-1")
    assert "required" not in str(exc.value)


def test_specs_with_spaces_are_the_same_run_as_compact_ones():
    assert parse_threat(" uniform_noise : eps = 0.1 , p = 0.5 ").spec == "uniform_noise:eps=0.1,p=0.5"
    assert parse_threat("physics: param = length , scale = 2").spec == "physics:param=length,scale=2"


def test_out_that_cannot_be_written_is_refused_before_running(tmp_path, cli_env):
    res = run_cli(["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--out", str(tmp_path)],
                  cli_env, tmp_path)
    assert res.returncode == 2 and "is a directory" in res.stderr
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        res = run_cli(["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--episodes", "1",
                       "--store", str(tmp_path / "s.sqlite"), "--out", str(locked / "r.json")], cli_env, tmp_path)
        if res.returncode == 0:  # root ignores permissions: nothing to test here
            pytest.skip("running as root")
        assert res.returncode == 2 and "cannot be written" in res.stderr and not (tmp_path / "s.sqlite").exists()
    finally:
        locked.chmod(0o700)


# -- stores we did not write ------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["evaluate", "plot", "calibrate"])
def test_foreign_files_given_as_store_are_refused_and_left_byte_identical(command, tmp_path, cli_main):
    foreign = tmp_path / "theirs.sqlite"
    conn = sqlite3.connect(foreign)
    conn.executescript("CREATE TABLE episodes (id INTEGER, note TEXT); INSERT INTO episodes VALUES (1, 'mine');")
    conn.commit()
    conn.close()
    noise = tmp_path / "noise.bin"
    noise.write_bytes(bytes(range(256)) * 8)
    for store in (foreign, noise):
        before = _sha(store)
        args = {"evaluate": ["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--episodes", "1"],
                "plot": ["plot", "--out", str(tmp_path / "c.png")],
                "calibrate": ["calibrate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--threat", "random",
                              "--target-impact", "0.5", "--episodes", "2"]}[command]
        res = cli_main([*args, "--store", str(store)], cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert ("did not write" in res.stderr) if store == foreign else ("not an SQLite results store" in res.stderr)
        assert _sha(store) == before
        assert not (tmp_path / (store.name + "-wal")).exists()


def test_our_stores_are_marked(tmp_path):
    from rlgauntlet.experiments.store import APPLICATION_ID, ResultsStore

    ResultsStore(tmp_path / "s.sqlite").close()
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


# -- signals and concurrent writers ------------------------------------------------------------------
def _evaluate_cmd(store, episodes, resume=False):
    return [*CMD, "evaluate", "--agent", "zoo:hopper-ppo", "--env", "Hopper-v5", "--episodes", str(episodes),
            "--n-envs", "1", "--no-impact", "--store", str(store)] + (["--resume"] if resume else [])


def _stored_so_far(store):
    """The stored episodes while a run writes them: none before the store and its tables exist
    (the file appears a moment before its schema)."""
    try:
        return _stored(store) if store.exists() else []
    except sqlite3.OperationalError:
        return []


def _stored(store):
    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT run_id, episode FROM episodes ORDER BY run_id, episode").fetchall()


@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_signals_exit_with_their_code_and_keep_finished_episodes(sig, code, name, tmp_path, cli_env):
    store = tmp_path / "s.sqlite"
    proc = subprocess.Popen(_evaluate_cmd(store, 40), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env, cwd=tmp_path)
    deadline = time.time() + 60
    while time.time() < deadline and len(_stored_so_far(store)) < 2:
        time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"rlgauntlet: interrupted by {name}; finished episodes are kept in") and "--resume" in last
    kept = _stored(store)
    assert len(kept) >= 2
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT wall_seconds FROM runs WHERE run_id = 1").fetchone()[0] > 0


def test_two_concurrent_resumes_of_one_run_both_finish_with_each_episode_once(tmp_path, cli_env):
    store = tmp_path / "s.sqlite"
    first = subprocess.run(_evaluate_cmd(store, 1), capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    procs = [subprocess.Popen(_evaluate_cmd(store, 6, resume=True), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=cli_env, cwd=tmp_path) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    rows = _stored(store)
    assert sorted(set(rows)) == rows and [e for r, e in rows if r == 1] == list(range(6))


# -- remaining tracebacks (hardening v2, class 5): each is one line naming the file and the fix ----
def test_a_corrupt_zoo_manifest_is_a_user_error(tmp_path, monkeypatch):
    from rlgauntlet.victims import load_victim
    from rlgauntlet.zoo import zoo_dir

    monkeypatch.setenv("RLGAUNTLET_ZOO", str(tmp_path))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON.*the folder RLGAUNTLET_ZOO names"):
        load_victim("zoo:cartpole-ppo")
    import json

    entry = json.loads((zoo_dir.__globals__["Path"](__file__).parents[1] / "zoo" / "manifest.json").read_text())
    broken = dict(entry["cartpole-ppo"])
    del broken["sha256"]
    (tmp_path / "manifest.json").write_text(json.dumps({"cartpole-ppo": broken}))
    with pytest.raises(UserError, match="lacks its env, files or sha256"):
        load_victim("zoo:cartpole-ppo")
    (tmp_path / "manifest.json").write_text(json.dumps({"cartpole-ppo": {**broken, "sha256": "0" * 64,
                                                                           "file": "../manifest.json"}}))
    with pytest.raises(UserError, match="lacks its env, files or sha256"):  # no path out of the zoo
        load_victim("zoo:cartpole-ppo")


def test_vecnormalize_files_of_the_wrong_shape_or_with_nan_are_refused(tiny_models, tmp_path):
    import numpy as np
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.victims.sb3 import load_sb3

    pendulum = VecNormalize(make_vec_env("Pendulum-v1", 1, seed=0))  # 3 numbers; the agent takes CartPole's 4
    pendulum.save(str(tmp_path / "pendulum.pkl"))
    with pytest.raises(UserError, match=r"shape \(3,\).*takes \(4,\)"):
        load_sb3(tiny_models["ppo"], vecnormalize=tmp_path / "pendulum.pkl")
    cartpole = VecNormalize(make_vec_env("CartPole-v1", 1, seed=0))
    cartpole.obs_rms.var = np.array([1.0, np.nan, 1.0, 1.0])
    cartpole.save(str(tmp_path / "nan.pkl"))
    with pytest.raises(UserError, match="non-finite mean or variance"):
        load_sb3(tiny_models["ppo"], vecnormalize=tmp_path / "nan.pkl")


def test_a_damaged_store_is_a_user_error(tmp_path):
    from rlgauntlet.engine.rollout import EpisodeRecord
    from rlgauntlet.experiments.store import ResultsStore

    store = ResultsStore(tmp_path / "s.sqlite")
    run = store.create_run("k", {"threat": "clean"})
    store.add_episode(run, EpisodeRecord(episode=0, seed=0, episode_return=float("inf"), length=3))
    with pytest.raises(UserError, match="damaged.*not a finite number"):
        store.episodes(run)
    store.conn.execute("UPDATE runs SET meta = '{broken' WHERE run_id = ?", (run,))
    store.conn.commit()
    with pytest.raises(UserError, match="damaged.*unreadable description"):
        store.runs()
    store.close()


@pytest.mark.parametrize("grid, eps, message", [("", None, "holds no budget"), (",,,", None, "holds no budget"),
                                                (None, "1e308", "bounds overflow")])
def test_certify_refuses_empty_grids_and_overflowing_budgets_before_any_run(grid, eps, message, tmp_path):
    from rlgauntlet.experiments.certify import certify

    with pytest.raises(UserError, match=message):
        certify("zoo:cartpole-dqn", "CartPole-v1", eps=eps, eps_grid=grid, episodes=1, store=tmp_path / "s.sqlite")
    assert not (tmp_path / "s.sqlite").exists()  # refused before the store was created
