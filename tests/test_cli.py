"""CLI contract: JSON names, exit status 2 with one stderr line for bad input, --help."""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn as nn


def run_cli(args, env, cwd=None):
    return subprocess.run([sys.executable, "-m", "rlgauntlet.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd)


def test_evaluate_writes_json_contract(tiny_models, tmp_path, cli_env):
    out = tmp_path / "r.json"
    res = run_cli(["evaluate", "--agent", f"sb3:{tiny_models['ppo']}", "--env", "CartPole-v1",
                   "--threat", "uniform_noise:eps=0.1", "--episodes", "3", "--out", str(out)], cli_env)
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())
    assert set(report) >= {"rlgauntlet_version", "agent", "env", "evaluations"}
    clean, noisy = report["evaluations"]
    keys = {"threat", "spec", "episodes", "seed", "return_mean", "return_std", "return_sem", "returns", "lengths",
            "perturbed_fraction", "action_change_rate", "linf_mean", "l2_mean", "budget_space", "wall_seconds"}
    assert keys <= set(clean) and keys <= set(noisy)
    assert clean["threat"] == "clean" and clean["perturbed_fraction"] == 0
    assert noisy["threat"] == "uniform_noise" and noisy["perturbed_fraction"] == 1.0
    assert 0 < noisy["linf_mean"] <= 0.1 and noisy["budget_space"] == "raw"
    assert (tmp_path / "rlgauntlet-results.sqlite").exists()  # store beside --out


@pytest.fixture(scope="module")
def torchscript_vector_agent(tmp_path_factory):
    path = tmp_path_factory.mktemp("ts") / "policy.pt"
    torch.jit.save(torch.jit.script(nn.Sequential(nn.Linear(4, 2))), str(path))
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (["--agent", "sb3:missing.zip", "--env", "CartPole-v1"], "agent file missing.zip not found"),
        (["--agent", "sb3:{ppo}", "--env", "Pendulum-v1"], "the agent acts in Discrete(2) but Pendulum-v1 expects"),
        (["--agent", "sb3:{sac}", "--env", "MountainCarContinuous-v0"], "the agent observes (3,) but MountainCarContinuous-v0"),
        (["--agent", "sb3:{ppo}", "--env", "CartPole-v1", "--threat", "blur:k=3"], "unknown threat 'blur'"),
        (["--agent", "sb3:{ppo}", "--env", "CartPole-v1", "--threat", "uniform_noise:std=1"], "has no parameter 'std'"),
        (["--agent", "sb3:{ppo}", "--env", "NoSuchEnv-v0"], "cannot make env 'NoSuchEnv-v0'"),
        (["--agent", "zoo:nope", "--env", "CartPole-v1"], "no zoo agent named 'nope'"),
        (["--agent", "mystery", "--env", "CartPole-v1"], "has no source prefix"),
        (["--agent", "torchscript:{ts}", "--env", "CartPole-v1"], "needs --kind"),
        (["--agent", "torchscript:{ts}", "--env", "CartPole-v1", "--kind", "q", "--threat", "uniform_noise:eps=0.1"],
         "eps has no unit because the agent's input space is unknown; pass --input-space"),
        (["--agent", "torchscript:{bad}", "--env", "CartPole-v1", "--kind", "q"], "cannot read"),
        (["--agent", "sb3:{bad}", "--env", "CartPole-v1"], "cannot read"),
        (["--agent", "sb3:{ppo}", "--env", "CartPole-v1", "--preset", "weird"], "unknown preset 'weird'"),
        (["--agent", "sb3:{ppo}", "--env", "CartPole-v1", "--precision", "half"], "unknown precision 'half'"),
        (["--agent", "sb3:{ppo}", "--env", "CartPole-v1", "--episodes", "0"], "--episodes"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message, tiny_models, torchscript_vector_agent, tmp_path, cli_main):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00garbage")
    fmt = {"ppo": tiny_models["ppo"], "sac": tiny_models["sac"], "ts": torchscript_vector_agent, "bad": bad}
    res = cli_main(["evaluate", *[a.format(**fmt) for a in args]], cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and message in lines[0]


def test_torchscript_agent_with_input_space_runs(torchscript_vector_agent, tmp_path, cli_env):
    res = run_cli(["evaluate", "--agent", f"torchscript:{torchscript_vector_agent}", "--kind", "q", "--input-space",
                   "raw", "--env", "CartPole-v1", "--threat", "uniform_noise:eps=0.1", "--episodes", "2"], cli_env,
                  cwd=tmp_path)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("command", [[], ["evaluate"], ["train"], ["zoo", "list"]])
def test_help_documents_every_option_with_example(command, cli_env):
    res = run_cli([*command, "--help"], cli_env)
    assert res.returncode == 0
    if command == ["evaluate"]:
        for opt in ("--agent", "--env", "--threat", "--episodes", "--seed", "--n-envs", "--device", "--out",
                    "--store", "--resume"):
            assert opt in res.stdout
        assert res.stdout.count("Example") >= 10


def test_eps_grid_suite_and_plot(tiny_models, tmp_path, cli_env):
    out = tmp_path / "grid.json"
    res = run_cli(["evaluate", "--agent", f"sb3:{tiny_models['dqn']}", "--env", "CartPole-v1", "--threat", "pgd",
                   "--suite", "adversarial", "--eps-grid", "0,0.05", "--episodes", "2", "--out", str(out)], cli_env)
    assert res.returncode == 0, res.stderr
    specs = [e["spec"] for e in json.loads(out.read_text())["evaluations"]]
    assert specs[:3] == ["clean", "pgd:eps=0", "pgd:eps=0.05"]
    for head in ("random", "fgsm", "pgd:steps=10", "momentum", "pgd:objective=minq", "pgd:objective=maxdiff"):
        assert f"{head}{',' if ':' in head else ':'}eps=0.05" in specs
    store = tmp_path / "rlgauntlet-results.sqlite"
    res = run_cli(["plot", "--store", str(store), "--out", str(tmp_path / "c.png")], cli_env)
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "c.json").read_text())["curves"]
    assert [p["eps"] for p in data[0]["curves"]["pgd"]] == [0.0, 0.05]
    assert (tmp_path / "c.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "args, message",
    [
        (["--threat", "pgd:eps=0.1", "--eps-grid", "0,0.1"], "already sets eps"),
        (["--suite", "adversarial"], "needs a budget"),
        (["--suite", "natural2", "--eps", "0.1"], "unknown suite"),
        (["--threat", "pgd", "--eps-grid", "0,big"], "is not a number"),
        (["--eps", "0.1"], "--eps is the budget of --suite"),
        (["--threat", "pgd:eps=0.1"], "minbest does not apply to a gaussian policy"),
    ],
)
def test_budget_option_errors(args, message, tiny_models, tmp_path, cli_main):
    res = cli_main(["evaluate", "--agent", f"sb3:{tiny_models['sac']}", "--env", "Pendulum-v1", *args], cwd=tmp_path)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr


def _without_wall_times(report):
    for ev in report["evaluations"]:
        ev.pop("wall_seconds")
    return report


def test_library_evaluate_report_is_the_cli_json(tmp_path, cli_env):
    """rlgauntlet.evaluate(...).to_dict() is exactly what the CLI writes (wall times aside),
    impact, argmin run, action and world threats included."""
    from rlgauntlet import evaluate

    threats = ["uniform_noise:eps=0.1,p=0.5", "random_action:p=0.2", "physics:param=length,scale=2"]
    out = tmp_path / "cli.json"
    args = ["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--episodes", "3", "--n-envs", "2",
            "--seed", "4", "--out", str(out), "--store", str(tmp_path / "cli.sqlite")]
    for t in threats:
        args += ["--threat", t]
    res = run_cli(args, cli_env)
    assert res.returncode == 0, res.stderr
    cli = _without_wall_times(json.loads(out.read_text()))
    assert cli.pop("generator").startswith("rlgauntlet ")  # the file's mark (see common/outputs.py), not a result
    assert cli.pop("output_kind") == "evaluation"
    lib = _without_wall_times(json.loads(json.dumps(
        evaluate("zoo:cartpole-dqn", "CartPole-v1", threats, episodes=3, seed=4, n_envs=2,
                 store=tmp_path / "lib.sqlite").to_dict())))
    assert lib == cli
    assert cli["score_min"] is not None and cli["evaluations"][1]["metrics"]["impact"]["value"] == cli["evaluations"][1]["impact"]
    assert [e["budget_space"] for e in cli["evaluations"]] == ["raw", "raw", "action", "world"]
    assert cli["evaluations"][3]["world"] == {"param": "length", "body": None, "default": 0.5, "value": 1.0}


def test_unknown_physics_parameter_exits_2_before_running(tmp_path, cli_env):
    res = run_cli(["evaluate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--threat",
                   "physics:param=mass,scale=2"], cli_env, cwd=tmp_path)
    assert res.returncode == 2 and "has no parameter 'mass'; known: gravity, masscart, masspole, length, force_mag" in res.stderr
    assert not (tmp_path / "rlgauntlet-results.sqlite").exists()


def test_calibrate_stores_its_search_as_a_calibration_run(tmp_path, cli_env):
    from rlgauntlet.experiments.store import ResultsStore

    store = tmp_path / "cal.sqlite"
    res = run_cli(["calibrate", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1", "--threat", "random",
                   "--target-impact", "0.5", "--episodes", "2", "--iterations", "2", "--n-envs", "2",
                   "--store", str(store), "--out", str(tmp_path / "cal.json")], cli_env)
    assert res.returncode == 0, res.stderr
    result = json.loads((tmp_path / "cal.json").read_text())
    results = ResultsStore(store)
    (run_id, meta), = results.runs(kind="calibration")
    metrics = results.metrics(run_id)
    assert run_id == result["run_id"] and meta["threat"] == "random"
    assert metrics["severity"]["value"] == result["severity"] and metrics["severity"]["unit"] == "eps"
    assert len(results.runs(kind="evaluation")) == 2 + len(result["probes"])  # clean, argmin, one per probe
