"""Certified figures: known answers for the feasible set, GWC and ACR; AWC ≤ GWC and both equal
the clean return at ε = 0; the certification run in the store; RADIAL losses."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.bounds.certification import certified, certified_margin, feasible_actions, score_gap
from rlgauntlet.experiments.certify import GreedyWorstCaseVictim, absolute_worst_case, certify
from rlgauntlet.experiments.store import ResultsStore
from rlgauntlet.victims import TorchVictim, load_victim


def _linear_victim():
    """Q0 = x0, Q1 = 0 on CartPole observations (raw units)."""
    env = make_env("CartPole-v1")
    layer = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    return TorchVictim(nn.Sequential(layer), "q", env.observation_space, env.action_space, budget_space="raw")


def test_feasible_set_and_certification_known_answers():
    lower = torch.tensor([[0.0, 0.5, -1.0]])
    upper = torch.tensor([[0.4, 0.9, 0.6]])
    assert feasible_actions(lower, upper).tolist() == [[False, True, True]]  # 0.4 < max lower 0.5
    assert certified(torch.tensor([[0.2, 0.7, 0.0]]), lower, upper).tolist() == [False]  # 0.5 < 0.6
    assert certified(torch.tensor([[0.2, 0.7, 0.0]]), lower, torch.tensor([[0.4, 0.9, 0.45]])).tolist() == [True]


def test_certified_margin_and_score_gap_known_answers():
    nominal, lower, upper = torch.tensor([[0.2, 0.7, 0.0]]), torch.tensor([[0.0, 0.5, -1.0]]), torch.tensor([[0.4, 0.9, 0.6]])
    # chosen action 1: its lower bound 0.5 against the others' largest upper bound 0.6
    assert certified_margin(nominal, lower, upper).tolist() == pytest.approx([-0.1])
    assert score_gap(nominal).tolist() == pytest.approx([0.5])  # 0.7 − 0.2, not 0.7 − 0.0


def test_certify_reports_the_median_gap_and_margin_of_a_linear_agent():
    """Q0 = x0 and Q1 = 0: each step's score gap is |x0| and its IBP margin |x0| − ε exactly (Q0's
    bounds are x0 ± ε, Q1's are 0), so the medians differ by ε and ACR is the share of |x0| > ε."""
    result = certify(_linear_victim(), "CartPole-v1", eps_grid="0.01,0.03", episodes=3, n_envs=2)
    for row in result["rows"]:
        assert row["certified_margin_median"] == pytest.approx(row["score_gap_median"] - row["eps_value"], abs=1e-6)
        assert row["score_gap_median"] > 0
    assert result["rows"][0]["score_gap_median"] == pytest.approx(result["rows"][1]["score_gap_median"])


@pytest.mark.parametrize("eps, expected", [(0.1, 1), (0.01, 0)])
def test_gwc_takes_the_worst_feasible_action(eps, expected):
    """x0 = 0.05: Q0 ∈ [0.05 − ε, 0.05 + ε], Q1 = 0. At ε = 0.1 both are feasible and the worst
    (lowest nominal) is action 1; at ε = 0.01 only action 0 can be the argmax."""
    victim = GreedyWorstCaseVictim(_linear_victim(), eps)
    x = torch.tensor([[0.05, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert victim.actions(victim.forward(x)).tolist() == [expected]


def test_at_eps_zero_gwc_and_awc_equal_the_clean_returns():
    victim = load_victim("zoo:cartpole-dqn")
    env_fn = lambda: gym.wrappers.TimeLimit(make_env("CartPole-v1"), 30)  # noqa: E731
    clean = sorted((r.episode, r.episode_return) for r in evaluate_episodes(env_fn, victim, None, range(3), 5))
    gwc = sorted((r.episode, r.episode_return) for r in evaluate_episodes(env_fn, GreedyWorstCaseVictim(victim, 0.0),
                                                                          None, range(3), 5))
    assert clean == gwc
    for k, ret in clean:
        search = absolute_worst_case(victim, env_fn(), 5 + k, 0.0, max_nodes=100)
        assert search == {"return": ret, "nodes": 30, "finished": True}


def test_awc_is_at_most_gwc_and_finds_the_worst_sequence():
    """A linear agent whose feasible sets are known: AWC over a 6-step horizon finishes and is
    never above GWC (GWC follows one of the sequences AWC searches)."""
    victim = load_victim("zoo:cartpole-dqn")
    result = certify(victim, "CartPole-v1", eps="0.02", episodes=3, awc_max_nodes=500, awc_horizon=6, n_envs=1)
    row = result["rows"][0]
    assert all(row["awc"]["finished"])
    for awc, gwc in zip(row["awc"]["returns"], row["gwc"]["returns"]):
        assert awc <= gwc


def test_certification_is_a_stored_run_with_its_metrics(tmp_path):
    store_path = tmp_path / "c.sqlite"
    result = certify("zoo:cartpole-dqn", "CartPole-v1", eps_grid="0,0.05", episodes=2, n_envs=2, store=store_path,
                     awc_max_nodes=50, awc_horizon=5)
    store = ResultsStore(store_path)
    runs = store.runs(kind="certification")
    assert [r for r, _ in runs] == [row["run_id"] for row in result["rows"]]
    zero, five = (store.metrics(row["run_id"]) for row in result["rows"])
    assert zero["acr"]["value"] == 1.0 and zero["awc_finished"]["value"] == 1.0  # at ε = 0 every action is certified
    # at ε = 0 the bounds are the scores: the margin is the gap
    assert zero["certified_margin_median"]["value"] == pytest.approx(zero["score_gap_median"]["value"])
    assert zero["awc"]["value"] == pytest.approx(np.mean(result["rows"][0]["awc"]["returns"]))  # a mean, not a sum
    assert 0.0 <= five["acr"]["value"] <= 1.0 and five["awc_nodes"]["value"] > 0
    assert len(store.episodes(result["rows"][1]["run_id"])) == 2


def test_continuous_agents_get_the_certified_action_deviation():
    result = certify("zoo:pendulum-td3", "Pendulum-v1", eps_grid="0,0.05", episodes=1)
    zero, five = result["rows"]
    assert zero["certified_action_deviation"] == 0.0 and five["certified_action_deviation"] > 0
    assert "gwc" not in zero


def test_cli_certify_table_and_json(tmp_path, cli_env, cli_main):
    import json
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "certify", "--agent", "zoo:cartpole-dqn", "--env",
                          "CartPole-v1", "--eps", "1/100", "--episodes", "2", "--store", str(tmp_path / "s.sqlite"),
                          "--out", str(tmp_path / "c.json")], capture_output=True, text=True, env=cli_env)
    assert res.returncode == 0, res.stderr
    assert "GWC" in res.stdout and "ACR" in res.stdout
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["rows"][0]["eps_value"] == 0.01
    bad = cli_main(["certify", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1"], cwd=tmp_path)
    assert bad.returncode == 2 and "give one of --eps or --eps-grid" in bad.stderr


# -- RADIAL losses -------------------------------------------------------------------------------------
def test_softmax_bounds_known_answer():
    from rlgauntlet.training.defences.radial import softmax_bounds

    lower = torch.tensor([[0.0, 1.0]])
    upper = torch.tensor([[2.0, 3.0]])
    low, high = softmax_bounds(lower, upper, torch.tensor([0]))
    assert low.item() == pytest.approx(np.log(np.exp(0) / (np.exp(0) + np.exp(3))))   # a at 0 vs other at 3
    assert high.item() == pytest.approx(np.log(np.exp(2) / (np.exp(2) + np.exp(1))))  # a at 2 vs other at 1


def test_radial_dqn_loss_reduces_to_the_standard_loss_at_eps_zero_and_ramps():
    from rlgauntlet.training.defences.radial import RadialDQN

    model = RadialDQN("MlpPolicy", "CartPole-v1", seed=0, radial_eps=0.1, learning_starts=64, train_freq=64,
                      gradient_steps=1, policy_kwargs=dict(net_arch=[16]))
    model._current_progress_remaining = 1.0
    assert model.current_eps() == 0.0 and model.current_kappa() == 1.0
    model._current_progress_remaining = 1 - 1 / 3
    assert model.current_eps() == pytest.approx(0.05) and model.current_kappa() == pytest.approx(0.75)
    model._current_progress_remaining = 0.0
    assert model.current_eps() == pytest.approx(0.1) and model.current_kappa() == pytest.approx(0.5)
    model.learn(256)  # trains through the worst-case branch without error
    assert model.logger.name_to_value.get("radial/worst_case_loss", 0) >= 0


def test_radial_geometric_ramp_starts_at_eps_start_and_multiplies_by_a_constant_factor():
    from rlgauntlet.training.defences.radial import RadialPPO

    model = RadialPPO("MlpPolicy", "CartPole-v1", seed=0, radial_eps=1e-2, eps_start=1e-6, ramp_fraction=0.5,
                      n_steps=64, batch_size=32, policy_kwargs=dict(net_arch=[16]))
    eps_at = []
    for done in (0.0, 0.125, 0.25, 0.375, 0.5, 0.75):
        model._current_progress_remaining = 1 - done
        eps_at.append(model.current_eps())
    # 1e-6 → 1e-2 over the first half: a factor 10 per eighth of the budget, then constant
    assert eps_at == pytest.approx([1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-2], rel=1e-9)


def test_radial_ppo_trains_and_widens_nothing_at_eps_zero():
    from rlgauntlet.training.defences.radial import RadialPPO

    model = RadialPPO("MlpPolicy", "CartPole-v1", seed=0, radial_eps=0.05, n_steps=64, batch_size=32, n_epochs=1,
                      policy_kwargs=dict(net_arch=[16]))
    model.learn(128)
    assert model.current_eps() > 0


def test_suite_certified_adds_gwc_evaluations_to_a_report():
    from rlgauntlet import evaluate

    report = evaluate("zoo:cartpole-dqn", "CartPole-v1", suite="certified", eps_grid="0,0.02", episodes=2, n_envs=2)
    specs = [e["spec"] for e in report.evaluations]
    assert specs == ["clean", "gwc:eps=0", "gwc:eps=0.02"]
    gwc0 = report.evaluations[1]
    assert gwc0["returns"] == report.evaluations[0]["returns"] and gwc0["metrics"]["acr"]["value"] == 1.0
    with pytest.raises(Exception, match="gives GWC for discrete agents"):
        evaluate("zoo:pendulum-td3", "Pendulum-v1", suite="certified", eps="0.1", episodes=1)


def test_awc_sums_rewards_on_a_plain_env_as_on_the_preset():
    victim = load_victim("zoo:cartpole-dqn")
    plain = absolute_worst_case(victim, gym.wrappers.TimeLimit(gym.make("CartPole-v1"), 6), 3, 0.02, 500)
    preset = absolute_worst_case(victim, gym.wrappers.TimeLimit(make_env("CartPole-v1"), 6), 3, 0.02, 500)
    assert plain == preset and plain["return"] > 0


def test_awc_metric_is_the_mean_of_finished_searches_and_none_when_nothing_ended():
    result = certify("zoo:cartpole-dqn", "CartPole-v1", eps="0", episodes=2, n_envs=1, awc_max_nodes=50, awc_horizon=5)
    row = result["rows"][0]
    assert row["awc"]["returns"] == [5.0, 5.0] and all(row["awc"]["finished"])
    victim = load_victim("zoo:cartpole-dqn")
    cut = absolute_worst_case(victim, gym.wrappers.TimeLimit(make_env("CartPole-v1"), 50), 0, 0.02, max_nodes=3)
    assert cut == {"return": None, "nodes": 3, "finished": False}


def test_certify_reads_agent_files_as_data_by_default(tmp_path):
    import json
    import zipfile

    from rlgauntlet.errors import UserError
    from rlgauntlet.zoo import zoo_dir

    src, evil = zoo_dir() / "cartpole-dqn.zip", tmp_path / "evil.zip"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(evil, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "data":
                content = json.loads(data)
                content["policy_class"] = {":type:": "<class 'type'>", ":serialized:": "gASV"}
                data = json.dumps(content).encode()
            zout.writestr(item, data)
    with pytest.raises(UserError, match="--allow-pickle"):
        certify(f"sb3:{evil}", "CartPole-v1", eps="0.01", episodes=1)


def test_a_saved_radial_model_holds_its_network_once(tmp_path):
    import json
    import zipfile

    from rlgauntlet.training.defences.radial import RadialDQN

    model = RadialDQN("MlpPolicy", "CartPole-v1", seed=0, radial_eps=0.1, learning_starts=10, train_freq=16,
                      policy_kwargs=dict(net_arch=[16]))
    model.learn(64)
    model._victim()
    model.save(tmp_path / "m.zip")
    data = json.loads(zipfile.ZipFile(tmp_path / "m.zip").read("data"))
    assert "_live_victim" not in data and data["radial_eps"] == 0.1
