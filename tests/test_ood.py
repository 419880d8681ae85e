"""The OOD-detection benchmark (paper 002): metrics, shift grids, detectors, scan and bench."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.metrics.detection import auroc, best_threshold, fpr_at_tpr, trial_summary
from rlgauntlet.threats import parse_threat
from rlgauntlet.threats.suites import OOD_SUITES, ood_suite
from rlgauntlet.victims.base import PolicyOutput
from rlgauntlet.victims.uncertainty import (DropConnectConv2d, DropConnectLinear, EnsembleVictim,
                                            add_dropout, mc_forward, spread_score)


def _rng(n: int, seed: int = 0) -> BatchRNG:
    return BatchRNG([episode_generator(seed, k, "uncertainty") for k in range(n)])


# -- metrics --------------------------------------------------------------------------------

def test_auroc_separable_identical_and_reversed_scores():
    assert auroc([0.1, 0.2, 0.3], [0.4, 0.5]) == 1.0
    assert auroc([0.7, 0.7, 0.7], [0.7, 0.7]) == 0.5
    assert auroc([0.4, 0.5], [0.1, 0.2, 0.3]) == 0.0


def test_auroc_equals_the_mann_whitney_statistic():
    from scipy.stats import mannwhitneyu

    gen = np.random.default_rng(0)
    ids, oods = gen.normal(0, 1, 300).round(1), gen.normal(0.4, 1, 200).round(1)  # rounded: many ties
    u = mannwhitneyu(oods, ids).statistic
    assert auroc(ids, oods) == pytest.approx(u / (len(ids) * len(oods)), abs=1e-12)


def test_fpr_at_95_tpr_and_best_threshold_known_answers():
    ids = np.arange(100) / 100.0           # ID scores 0.00 … 0.99
    oods = 0.5 + np.arange(20) / 40.0      # OOD scores 0.50 … 0.975
    # flagging 95% of OOD (19 of 20) needs the threshold at 0.525: the ID scores ≥ 0.525 are 0.53 … 0.99
    assert fpr_at_tpr(ids, oods) == pytest.approx(47 / 100)
    assert best_threshold([0.0, 0.1], [0.5, 0.6]) == 0.5


def test_trial_summary_reproduces_the_papers_appendix_numbers():
    # paper 002, CartPole ensemble, length x4: trials .862 .826 .993 .864 .870 -> 0.883 ± 0.064, best 0.993
    s = trial_summary([0.862, 0.826, 0.993, 0.864, 0.870])
    assert (round(s["mean"], 3), round(s["std"], 3), s["best"]) == (0.883, 0.064, 0.993)
    # MC DropConnect, force /10: .748 .921 .906 .768 .612 -> 0.791 ± 0.127 (the sample std, ddof = 1;
    # the population std would be 0.114)
    s = trial_summary([0.748, 0.921, 0.906, 0.768, 0.612])
    assert (round(s["mean"], 3), round(s["std"], 3)) == (0.791, 0.127)


def test_auroc_refuses_an_empty_side():
    with pytest.raises(UserError, match="both the ID and the OOD"):
        auroc([], [0.1])


# -- shift grids ----------------------------------------------------------------------------

def test_cartpole_grid_gives_the_papers_table_1_values():
    specs = ood_suite("ood-cartpole", "CartPole-v1")
    assert len(specs) == 90
    env = make_env("CartPole-v1")
    values = {}
    for spec in specs:
        threat = parse_threat(spec)
        values.setdefault(threat.params.param, []).append(round(threat.enter_world(env)["value"], 4))
        threat.exit_world(env)
    assert values["gravity"] == [0.98, 1.0889, 1.225, 1.4, 1.6333, 1.96, 2.45, 3.2667, 4.9, 19.6, 29.4, 39.2, 49.0,
                                 58.8, 68.6, 78.4, 88.2, 98.0]
    assert values["length"][:9] == [0.05, 0.0556, 0.0625, 0.0714, 0.0833, 0.1, 0.125, 0.1667, 0.25]
    assert values["force_mag"][-1] == 100.0 and values["masscart"][9] == 2.0 and values["masspole"][-1] == 1.0
    assert env.unwrapped.length == 0.5 and env.unwrapped.gravity == 9.8  # every shift was undone


def test_pendulum_grid_and_a_shifted_step_matches_the_dynamics():
    specs = ood_suite("ood-pendulum", "Pendulum-v1")
    assert len(specs) == 40 and "physics:param=max_speed,scale=20" in specs
    env = make_env("Pendulum-v1")
    env.reset(seed=0)
    threat = parse_threat("physics:param=l,scale=5")
    threat.enter_world(env)
    env.unwrapped.state = np.array([0.4, 0.5])
    obs = env.step(np.array([1.5], dtype=np.float32))[0]
    g, m, length, dt, u = 10.0, 1.0, 5.0, 0.05, 1.5
    thdot = 0.5 + (3 * g / (2 * length) * math.sin(0.4) + 3.0 / (m * length ** 2) * u) * dt
    theta = 0.4 + thdot * dt
    np.testing.assert_allclose(obs, [math.cos(theta), math.sin(theta), thdot], rtol=1e-5)
    threat.exit_world(env)
    assert env.unwrapped.l == 1.0


def test_pong_grid_and_suites_refuse_the_wrong_env():
    specs = ood_suite("ood-pong")
    assert len(specs) == 20 and specs[0] == "gaussian_noise:severity=1" and specs[-1] == "pixelate:severity=5"
    for spec in specs:
        parse_threat(spec)
    with pytest.raises(UserError, match="use it with a CartPole env"):
        ood_suite("ood-cartpole", "Pendulum-v1")
    with pytest.raises(UserError, match="unknown OOD suite"):
        ood_suite("ood-hopper")
    assert set(OOD_SUITES) == {"ood-cartpole", "ood-pendulum", "ood-pong", "ood-minatar"}


# -- detectors ------------------------------------------------------------------------------

def _mlp(p: float, kind: str, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)).double()
    return add_dropout(net, p, kind)


def test_add_dropout_places_layers_as_documented_and_keeps_parameter_names():
    plain = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Tanh())
    names = list(plain.state_dict())
    weights = add_dropout(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Tanh()), 0.2, "weights")
    acts = add_dropout(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.Tanh()), 0.2, "activations")
    assert [type(m).__name__ for m in weights] == ["DropConnectLinear", "ReLU", "DropConnectLinear", "Tanh"]
    assert [type(m).__name__ for m in acts] == ["Linear", "ActivationDropout", "Linear", "Tanh"]  # not the output tanh
    assert list(weights.state_dict()) == names and list(acts.state_dict()) == names


@pytest.mark.parametrize("kind", ["weights", "activations"])
def test_dropout_is_active_in_training_and_off_in_evaluation(kind):
    net = _mlp(0.5, kind)
    x = torch.randn(64, 4, dtype=torch.float64)
    plain = _mlp(0.0, kind).eval()(x)
    # same init seed: the deterministic net is the plain one (float64, a few ulps of rounding)
    torch.testing.assert_close(net.eval()(x), plain, rtol=1e-12, atol=1e-12)
    net.train()
    assert not torch.allclose(net(x), net(x))


def test_dropconnect_training_draws_a_mask_per_example_or_group():
    """One mask for the whole batch collapses a DQN (decisions.md): examples must differ."""
    import rlgauntlet.victims.uncertainty as uncertainty

    torch.manual_seed(0)
    layer = DropConnectLinear(3, 2, p=0.5).double().train()
    x = torch.ones(64, 3, dtype=torch.float64)
    assert len({tuple(row) for row in layer(x).tolist()}) > 10  # 64 masks of 6 weights: many distinct rows
    big = DropConnectLinear(256, 256, p=0.5).train()
    out = big(torch.ones(64, 256))
    groups = 64 // -(-64 // max(1, uncertainty.TRAIN_MASK_ELEMENTS // big.weight.numel()))
    assert len({tuple(row) for row in out.round(decimals=4).tolist()}) == groups  # consecutive rows share a mask
    torch.manual_seed(1)
    mean = DropConnectLinear(3, 2, p=0.3).double()
    many = torch.full((100_000, 3), 0.7, dtype=torch.float64)
    torch.testing.assert_close(mean.train()(many).mean(dim=0), mean.eval()(many[:1])[0], atol=0.01, rtol=0.0)


@pytest.mark.parametrize("kind", ["weights", "activations"])
def test_mc_forward_with_p_zero_or_identical_members_has_zero_spread(kind):
    x = torch.randn(5, 4, dtype=torch.float64)
    net = _mlp(0.0, kind).eval()
    samples = mc_forward(list(net), x, _rng(5), samples=5)
    assert torch.allclose(samples, net(x).unsqueeze(1).expand_as(samples))
    # identical samples: the spread is zero up to the rounding of the mean (a few ulps of the
    # values; AVX2 and AVX-512 sum in different orders, so 4.6e-18 is seen where 0 is exact)
    tol = 8 * torch.finfo(samples.dtype).eps * float(samples.abs().max())
    assert torch.all(spread_score(samples) <= tol)
    assert torch.all(spread_score(mc_forward(list(_mlp(0.3, kind).eval()), x, _rng(5))) > 0)


@pytest.mark.parametrize("kind", ["weights", "activations"])
def test_mc_samples_average_to_the_deterministic_network(kind):
    """Inverted scaling: the mean of many MC passes is the weight-scaled network (exactly, in
    expectation, for a single linear layer after the masks; here checked statistically)."""
    torch.manual_seed(1)
    layer = nn.Sequential(nn.Linear(6, 3), nn.ReLU(), nn.Linear(3, 2)).double()
    net = add_dropout(layer, 0.3, kind).eval()
    x = torch.randn(2, 6, dtype=torch.float64)
    samples = mc_forward(list(net), x, _rng(2), samples=40_000)
    if kind == "weights":  # the first layer's output is linear in the mask: compare before the ReLU
        first = mc_forward(list(net)[:1], x, _rng(2), samples=40_000).mean(dim=1)
        torch.testing.assert_close(first, net[0](x), atol=0.03, rtol=0.0)
    else:
        torch.testing.assert_close(samples.mean(dim=1), net(x), atol=0.03, rtol=0.0)


def test_mc_dropconnect_uses_the_rows_own_masks_linear_and_conv():
    torch.manual_seed(0)
    lin = DropConnectLinear(3, 2, p=0.4).double().eval()
    conv = DropConnectConv2d(2, 3, 3, stride=2, p=0.4).double().eval()
    x_lin, x_conv = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 2, 7, 7, dtype=torch.float64)
    got_lin = mc_forward([lin], x_lin, _rng(2), samples=3)
    got_conv = mc_forward([conv], x_conv, _rng(2), samples=3)
    for b in range(2):  # the same draws, made by hand: each row from its own generator
        g = episode_generator(0, b, "uncertainty")
        keep = (torch.rand((3, 2, 3), generator=g) >= 0.4).double() / 0.6
        for t in range(3):
            torch.testing.assert_close(got_lin[b, t], F.linear(x_lin[b], lin.weight * keep[t], lin.bias))
    for b in range(2):
        g = episode_generator(0, b, "uncertainty")
        keep = (torch.rand((3, *conv.weight.shape), generator=g) >= 0.4).double() / 0.6
        for t in range(3):
            want = F.conv2d(x_conv[b:b + 1], conv.weight * keep[t], conv.bias, stride=2)[0]
            torch.testing.assert_close(got_conv[b, t], want)


def test_spread_score_is_the_sample_std_mean_or_max_over_actions():
    samples = torch.tensor([[[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]]])  # std over T: [2, 0]
    assert spread_score(samples, "mean").item() == pytest.approx(1.0)
    assert spread_score(samples, "max").item() == pytest.approx(2.0)
    with pytest.raises(UserError, match="unknown uncertainty reduction"):
        spread_score(samples, "median")


class _Fixed:
    """A minimal member: Q = x @ W (fixed), enough for the ensemble's arithmetic."""

    def __init__(self, weight):
        import gymnasium as gym

        self.weight = torch.as_tensor(weight, dtype=torch.float64)
        self.kind, self.budget_space, self.device, self.dtype = "q", "raw", torch.device("cpu"), torch.float64
        self.observation_space = gym.spaces.Box(-1, 1, (2,))
        self.action_space = gym.spaces.Discrete(2)
        self.description = {}

    def preprocess(self, obs):
        return torch.as_tensor(obs, dtype=torch.float64)

    def forward(self, x):
        return PolicyOutput("q", q=x @ self.weight)

    def actions(self, out, deterministic=True, noise=None):
        return out.q.argmax(dim=-1)

    input_bounds = None


def test_ensemble_acts_on_the_mean_q_and_scores_the_spread_across_members():
    a, b = _Fixed([[1.0, 0.0], [0.0, 1.0]]), _Fixed([[0.0, 3.0], [1.0, 0.0]])
    ensemble = EnsembleVictim([a, b])
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # Q_a = [1, 0], Q_b = [0, 3]: mean [0.5, 1.5]
    torch.testing.assert_close(ensemble.forward(x).q, torch.tensor([[0.5, 1.5]], dtype=torch.float64))
    assert ensemble.actions(ensemble.forward(x)).item() == 1  # member a alone would take 0
    # per-action sample std over 2 members: |1-0|/√2 and |0-3|/√2, mean 2/√2
    assert ensemble.uncertainty(x, None).item() == pytest.approx(2 / math.sqrt(2))
    assert EnsembleVictim([a, _Fixed(a.weight)]).uncertainty(x, None).item() == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(UserError, match="at least 2 members"):
        EnsembleVictim([a])


# -- SB3 agents with dropout ----------------------------------------------------------------

@pytest.fixture(scope="module")
def dropout_agents(tmp_path_factory):
    from stable_baselines3 import DQN, TD3

    from rlgauntlet.victims.dropout_policies import DropoutDQNPolicy, DropoutTD3Policy

    out = tmp_path_factory.mktemp("dropout")
    paths = {}
    for kind in ("weights", "activations"):
        model = DQN(DropoutDQNPolicy, "CartPole-v1", seed=0, learning_starts=50, buffer_size=1000,
                    policy_kwargs=dict(net_arch=[32, 32], dropout=0.2, dropout_kind=kind))
        model.learn(200)
        model.save(out / f"dqn-{kind}.zip")
        paths[f"dqn-{kind}"] = out / f"dqn-{kind}.zip"
    model = TD3(DropoutTD3Policy, "Pendulum-v1", seed=0, learning_starts=50, buffer_size=1000,
                policy_kwargs=dict(net_arch=[32, 32], dropout=0.2, dropout_kind="weights"))
    model.learn(100)
    model.save(out / "td3-weights.zip")
    paths["td3-weights"] = out / "td3-weights.zip"
    return paths


def test_dropout_agents_load_as_data_and_report_their_method(dropout_agents):
    from stable_baselines3 import DQN

    from rlgauntlet.victims import load_victim

    for name, method in (("dqn-weights", "mc_dropconnect"), ("dqn-activations", "mc_dropout"),
                         ("td3-weights", "mc_dropconnect")):
        victim = load_victim(f"sb3:{dropout_agents[name]}")
        assert victim.uncertainty_method == method and victim.description["uncertainty"]["p"] == 0.2
    victim = load_victim(f"sb3:{dropout_agents['dqn-weights']}")
    reference = DQN.load(dropout_agents["dqn-weights"], device="cpu")  # SB3's own loading agrees (eval mode)
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    np.testing.assert_array_equal(victim.act(obs), reference.predict(obs, deterministic=True)[0])


def test_agents_without_uncertainty_are_refused(tiny_models):
    from rlgauntlet.victims import load_victim

    victim = load_victim(f"sb3:{tiny_models['dqn']}")
    with pytest.raises(UserError, match="reports no uncertainty"):
        evaluate_episodes(lambda: make_env("CartPole-v1"), victim, None, range(1), 0, uncertainty="mean")


@pytest.mark.parametrize("name, env_id", [("dqn-weights", "CartPole-v1"), ("dqn-activations", "CartPole-v1"),
                                          ("td3-weights", "Pendulum-v1")])
def test_per_step_scores_do_not_depend_on_n_envs(dropout_agents, name, env_id):
    from rlgauntlet.victims import load_victim

    victim = load_victim(f"sb3:{dropout_agents[name]}")
    shift = parse_threat("physics:param=length,scale=2" if env_id.startswith("CartPole") else "physics:param=m,scale=2")

    def run(n_envs):
        records = evaluate_episodes(lambda: make_env(env_id), victim, shift, range(3), 7, n_envs=n_envs,
                                    uncertainty="mean", uncertainty_series=True)
        return {r.episode: r for r in records}

    one, three = run(1), run(3)
    for k in range(3):
        # the same masks and actions; batched float64 sums may differ in the last bit
        assert one[k].episode_return == three[k].episode_return
        assert one[k].uncertainty_series == pytest.approx(three[k].uncertainty_series, rel=1e-12, abs=1e-15)
        assert len(one[k].uncertainty_series) == one[k].length == one[k].uncertainty_steps
        assert one[k].uncertainty_sum == pytest.approx(sum(one[k].uncertainty_series))
        assert one[k].uncertainty_max == max(one[k].uncertainty_series) > 0


def test_uncertainty_series_survive_the_store(dropout_agents, tmp_path):
    from rlgauntlet.experiments.runs import run_evaluation
    from rlgauntlet.experiments.store import ResultsStore
    from rlgauntlet.victims import load_victim

    victim = load_victim(f"sb3:{dropout_agents['dqn-weights']}")
    store = ResultsStore(tmp_path / "s.sqlite")
    env_fn = lambda: make_env("CartPole-v1")  # noqa: E731
    ev = run_evaluation(store, env_fn, {"id": "CartPole-v1"}, victim, None, 2, 0, uncertainty="max",
                        uncertainty_series=True)
    stored = store.episodes(ev["run_id"])
    direct = evaluate_episodes(env_fn, victim, None, range(2), 0, uncertainty="max", uncertainty_series=True)
    assert [r.uncertainty_series for r in stored] == [r.uncertainty_series for r in sorted(direct, key=lambda r: r.episode)]
    assert ev["uncertainty_steps"] == sum(r.length for r in stored)
    plain = run_evaluation(store, env_fn, {"id": "CartPole-v1"}, victim, None, 2, 0)  # unscored: another run
    assert plain["run_id"] != ev["run_id"] and "uncertainty_mean" not in plain


# -- the protocol ---------------------------------------------------------------------------

def test_uniform_policy_draws_every_action_evenly_and_within_bounds(tiny_models):
    from rlgauntlet.experiments.ood_benchmark import UniformPolicy
    from rlgauntlet.victims import load_victim

    dqn = UniformPolicy(load_victim(f"sb3:{tiny_models['dqn']}"))
    u = torch.linspace(0, 0.999, 1000)
    counts = torch.bincount(dqn.actions(None, False, u), minlength=2)
    assert counts.tolist() == [500, 500]
    td3 = UniformPolicy(load_victim(f"sb3:{tiny_models['td3']}"))
    z = torch.randn(20_000, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    a = td3.actions(None, False, z)
    assert a.min() >= -2.0 and a.max() <= 2.0
    assert abs(a.mean().item()) < 0.05 and a.var().item() == pytest.approx(16 / 12, rel=0.05)  # U(-2, 2)


def test_scan_marks_failing_shifts_by_the_normalised_return():
    from rlgauntlet.experiments.ood_benchmark import ood_scan

    result = ood_scan("zoo:cartpole-dqn", "CartPole-v1", shifts=["physics:param=gravity,scale=10",
                                                                 "physics:param=masscart,scale=1/2"], episodes=4)
    clean, floor = result["clean"]["return_mean"], result["random_policy"]["return_mean"]
    assert clean == 500.0 and 10 < floor < 40
    rows = {r["spec"]: r for r in result["rows"]}
    heavy = rows["physics:param=gravity,scale=10"]
    assert heavy["normalised_return"] == pytest.approx((heavy["return_mean"] - floor) / (clean - floor))
    assert heavy["fails"] and not rows["physics:param=masscart,scale=1/2"]["fails"]
    assert result["failing"] == ["physics:param=gravity,scale=10"]


def test_bench_stores_auroc_per_trial_and_resumes_to_the_same_numbers(dropout_agents, tmp_path):
    from rlgauntlet.experiments.ood_benchmark import ood_bench
    from rlgauntlet.experiments.store import ResultsStore

    store = tmp_path / "ood.sqlite"
    agent = f"sb3:{dropout_agents['dqn-weights']}"
    kwargs = dict(shifts=["physics:param=gravity,scale=10"], trials=2, episodes=2, store=store)
    first = ood_bench(agent, "CartPole-v1", **kwargs)
    row = first["rows"][0]
    assert len(row["auroc"]["trials"]) == 2 and all(0.0 <= a <= 1.0 for a in row["auroc"]["trials"])
    assert first["detector"] == "mc_dropconnect" and row["id_steps"][0] > 0 and row["ood_steps"][0] > 0
    again = ood_bench(agent, "CartPole-v1", resume=True, **kwargs)
    assert again["rows"][0]["auroc"] == row["auroc"]
    results = ResultsStore(store)
    metrics = results.metrics(row["run_id"])
    assert results.run_kind(row["run_id"]) == "ood"
    assert metrics["auroc"]["trials"] == row["auroc"]["trials"] and metrics["auroc"]["value"] == row["auroc"]["mean"]


def test_cli_ood_errors_are_one_line_exit_2(tmp_path, cli_main, tiny_models):
    cases = [
        (["scan", "--agent", "zoo:cartpole-dqn", "--env", "Pendulum-v1", "--suite", "ood-cartpole"], "use it with a CartPole"),
        (["bench", "--agent", f"sb3:{tiny_models['dqn']}", "--env", "CartPole-v1", "--shift",
          "physics:param=length,scale=4"], "reports no uncertainty"),
        (["scan", "--agent", "zoo:cartpole-dqn", "--env", "CartPole-v1"], "give --suite"),
    ]
    for args, message in cases:
        proc = cli_main(["ood", *args, "--store", str(tmp_path / "s.sqlite")], cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_bench_writes_json_and_plot(tmp_path, cli_env, dropout_agents):
    import json

    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "ood", "bench", "--agent",
                           f"sb3:{dropout_agents['dqn-activations']}", "--env", "CartPole-v1", "--shift",
                           "physics:param=gravity,scale=10", "--trials", "2", "--episodes", "1", "--out",
                           str(tmp_path / "ood.json"), "--plot", str(tmp_path / "ood.png")],
                          capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "ood.json").read_text())
    assert result["detector"] == "mc_dropout" and len(result["rows"][0]["auroc"]["trials"]) == 2
    assert (tmp_path / "ood.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "rlgauntlet-results.sqlite").exists()


def test_critic_value_is_sb3s_own_critic_at_the_scaled_action(tiny_models):
    from stable_baselines3 import TD3

    from rlgauntlet.victims import load_victim

    victim = load_victim(f"sb3:{tiny_models['td3']}")
    model = TD3.load(tiny_models["td3"], device="cpu")
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    action = np.random.default_rng(1).uniform(-2, 2, size=(5, 1))
    with torch.no_grad():
        ours = victim.critic_value(victim.preprocess(obs), torch.as_tensor(action))
        theirs = model.critic(torch.as_tensor(obs), torch.as_tensor(action / 2.0, dtype=torch.float32))[0]
    torch.testing.assert_close(ours.float(), theirs, rtol=1e-5, atol=1e-5)


def test_critic_scores_of_ensembles_and_mc_agents(tiny_models, dropout_agents):
    from rlgauntlet.victims import load_sb3, load_victim

    x = torch.as_tensor(np.random.default_rng(0).normal(size=(4, 3)), dtype=torch.float64)
    twins = EnsembleVictim([load_sb3(tiny_models["td3"]), load_sb3(tiny_models["td3"])])
    twins.uncertainty_output = "critic"
    assert torch.all(twins.uncertainty(x, None).abs() <= 1e-12)  # identical members: zero up to rounding
    pair = EnsembleVictim([load_sb3(tiny_models["td3"]), load_sb3(tiny_models["ddpg"])])
    pair.uncertainty_output = "critic"
    action = pair.actions(pair.forward(x))
    values = torch.stack([m.critic_value(x, action) for m in pair.members], dim=1)  # (B, 2, 1)
    torch.testing.assert_close(pair.uncertainty(x, None), (values[:, 0] - values[:, 1]).abs()[:, 0] / math.sqrt(2))
    mc = load_victim(f"sb3:{dropout_agents['td3-weights']}")
    mc.uncertainty_output = "critic"
    assert torch.all(mc.uncertainty(x, _rng(4)) > 0)


def test_score_of_critic_is_refused_for_a_dqn(dropout_agents):
    from rlgauntlet.experiments.ood_benchmark import ood_bench

    with pytest.raises(UserError, match="actor-critic"):
        ood_bench(f"sb3:{dropout_agents['dqn-weights']}", "CartPole-v1", shifts=["physics:param=length,scale=4"],
                  trials=1, episodes=1, score_of="critic")


def test_ensemble_training_keeps_the_first_seeds_that_solve(tmp_path, monkeypatch):
    import json

    from rlgauntlet.training.recipes import PRESETS, TrainPreset
    from rlgauntlet.training.sb3_train import train_ensemble

    monkeypatch.setitem(PRESETS, "test-tiny-ensemble", TrainPreset(
        name="test-tiny-ensemble", env_id="CartPole-v1", algo="dqn", total_timesteps=128, n_envs=1, seed=10,
        hyperparams=dict(policy="MlpPolicy", learning_starts=32, buffer_size=256, policy_kwargs=dict(net_arch=[8])),
        target_return=0.0, members=2, checkpoint_every=128))  # only for this test
    seed_of = lambda ckpt: json.loads((ckpt / "progress.json").read_text())["seed"]  # noqa: E731
    accepted, rejected = train_ensemble("test-tiny-ensemble", tmp_path, solves=lambda ckpt: seed_of(ckpt) != 11,
                                        log=lambda s: None)
    assert [seed_of(c) for c in accepted] == [10, 12] and [seed_of(c) for c in rejected] == [11]
    with pytest.raises(UserError, match="only 1 of 2 seeds"):
        train_ensemble("test-tiny-ensemble", tmp_path, solves=lambda ckpt: seed_of(ckpt) != 11, max_seeds=2,
                       log=lambda s: None)


def test_actor_critic_dropout_policy_trains_saves_and_loads_as_data(tmp_path):
    """The PPO/A2C path (shared with the Nature-CNN policy meant for a DropConnect Pong agent)."""
    from stable_baselines3 import PPO

    from rlgauntlet.victims import load_victim
    from rlgauntlet.victims.dropout_policies import DropoutActorCriticPolicy

    model = PPO(DropoutActorCriticPolicy, "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, seed=0,
                policy_kwargs=dict(net_arch=[16], dropout=0.2, dropout_kind="weights"))
    assert type(model.policy.action_net).__name__ == "DropConnectLinear"
    before = model.policy.action_net.weight.detach().clone()
    model.learn(64)
    assert not torch.equal(model.policy.action_net.weight, before)  # the optimizer still holds the swapped weights
    model.save(tmp_path / "ppo.zip")
    victim = load_victim(f"sb3:{tmp_path / 'ppo.zip'}")
    assert victim.uncertainty_method == "mc_dropconnect"
    x = victim.preprocess(np.zeros((3, 4), dtype=np.float32))
    assert torch.all(victim.uncertainty(x, _rng(3)) > 0)


def test_bench_puts_ood_on_the_positive_side():
    """A long pole is the ensemble's clearest shift (AUROC 0.986 ± 0.009 over 5 × 10 episodes):
    swapping ID and OOD would give about 0.01, a score of the wrong steps about 0.5."""
    from rlgauntlet.experiments.ood_benchmark import ood_bench

    result = ood_bench("zoo:cartpole-dqn-ensemble", "CartPole-v1", shifts=["physics:param=length,scale=8"],
                       trials=1, episodes=2)
    row = result["rows"][0]
    assert row["auroc"]["mean"] > 0.9 and row["fpr95"]["mean"] < 0.2
    assert row["world"]["value"] == 4.0 and row["id_steps"] == [1000]


def test_ood_scan_takes_an_sb3_agent_with_its_vecnormalize_file(tmp_path, cli_env):
    """A user's SB3 Hopper with its VecNormalize statistics (here: the zoo agent exported as SB3
    writes it, outside the zoo) is scanned like the zoo's own; its clean return is the zoo agent's."""
    import json
    import subprocess
    import sys

    from rlgauntlet.training.export import export_sb3

    model, stats = export_sb3("hopper-ppo", tmp_path / "hopper.zip")
    out = tmp_path / "scan.json"
    done = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "ood", "scan", "--agent", f"sb3:{model}",
                           "--vecnormalize", str(stats), "--env", "Hopper-v5", "--shift",
                           "physics:param=body_mass,body=torso,scale=1.5", "--episodes", "2", "--out", str(out)],
                          capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["agent"]["vecnormalize"]["sha256"] and len(result["rows"]) == 1
    from rlgauntlet.experiments.ood_benchmark import ood_scan

    zoo = ood_scan("zoo:hopper-ppo", "Hopper-v5", shifts=["physics:param=body_mass,body=torso,scale=1.5"], episodes=2)
    assert result["clean"]["return_mean"] == pytest.approx(zoo["clean"]["return_mean"], rel=1e-4)  # float32 vs float64 nets


def test_mc_dropout_reaches_every_hidden_activation_of_a_convolutional_body():
    """The MinAtar network nests its layers (cnn, linear, then SB3's head): both ReLUs are hidden
    units and get dropout; an output squashing does not; a second call adds nothing. (A rule
    that looked for a later Linear in the same container only wrapped none of them.)"""
    import gymnasium as gym

    from rlgauntlet.victims.minatar_cnn import MinAtarCNN
    from rlgauntlet.victims.uncertainty import ActivationDropout

    body = MinAtarCNN(gym.spaces.Box(0, 255, (4, 10, 10), np.uint8))
    q_net = add_dropout(nn.Sequential(body, nn.Linear(128, 3)), 0.1, "activations")
    assert isinstance(body.cnn[1], ActivationDropout) and isinstance(body.linear[1], ActivationDropout)
    add_dropout(q_net, 0.1, "activations")
    assert isinstance(body.cnn[1].activation, nn.ReLU)  # not wrapped twice
    actor = add_dropout(nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1), nn.Tanh()), 0.1, "activations")
    assert isinstance(actor[1], ActivationDropout) and isinstance(actor[3], nn.Tanh)
