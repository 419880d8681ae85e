"""Impact, timing, perceptual records, spectrum and calibration."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.experiments.calibrate import SearchSpace, calibrate
from rlgauntlet.metrics.impact import ArgminVictim, default_min_score, impact
from rlgauntlet.metrics.spectrum import band_energy, radial_psd, spectrum_report
from rlgauntlet.threats import parse_threat
from rlgauntlet.threats.suites import NATURAL_IMAGE
from rlgauntlet.victims import TorchVictim, load_victim


def test_impact_closed_form_and_defaults():
    assert impact(20.0, 20.0, -21.0) == 0.0
    assert impact(20.0, -21.0, -21.0) == 1.0
    assert impact(20.0, -0.5, -21.0) == pytest.approx(0.5)
    assert impact(5.0, 1.0, 5.0) is None and impact(5.0, 1.0, None) is None
    assert default_min_score("PongNoFrameskip-v4", "atari") == -21.0
    assert default_min_score("BreakoutNoFrameskip-v4", "atari") == 0.0
    assert default_min_score("CartPole-v1", "classic") is None


def test_impact_zero_for_clean_and_one_for_argmin_agent():
    victim = load_victim("zoo:cartpole-dqn")
    run = lambda v: np.mean([r.episode_return for r in  # noqa: E731
                             evaluate_episodes(lambda: make_env("CartPole-v1"), v, None, range(5), 0, n_envs=5)])
    clean, worst = run(victim), run(ArgminVictim(victim))
    assert worst < 0.1 * clean  # the worst action every step drops the pole at once
    assert impact(clean, clean, worst) == 0.0
    assert impact(clean, worst, worst) == 1.0


def test_cli_reports_impact(tmp_path, cli_env):
    out = tmp_path / "i.json"
    subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", "zoo:cartpole-dqn", "--env",
                    "CartPole-v1", "--threat", "pgd:eps=0.2", "--episodes", "3", "--out", str(out)],
                   check=True, capture_output=True, env=cli_env)
    report = json.loads(out.read_text())
    clean, attacked = report["evaluations"]
    assert clean["impact"] == 0.0 and 0.5 < attacked["impact"] <= 1.05
    assert report["score_min"] < 50


@pytest.mark.parametrize("p", [0.06, 0.3])
def test_timing_fraction_within_binomial_band(p, tiny_models):
    victim = load_victim(f"sb3:{tiny_models['sac']}")
    recs = evaluate_episodes(lambda: make_env("Pendulum-v1"), victim, parse_threat(f"gaussian_noise:std=0.01,p={p}"),
                             range(10), 0, n_envs=5)
    n = sum(r.length for r in recs)
    e_adv = sum(r.perturbed_steps for r in recs) / n
    assert abs(e_adv - p) < 4 * (p * (1 - p) / n) ** 0.5  # 4 standard deviations of a binomial proportion


def _pixel_env():
    return gym.wrappers.TimeLimit(make_env("PongNoFrameskip-v4"), max_episode_steps=25)


@pytest.fixture(scope="module")
def pixel_victim():
    env = make_env("PongNoFrameskip-v4")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(4, 8, 8, 4), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 20 * 20, 6))
    return TorchVictim(net, "q", env.observation_space, env.action_space)


@pytest.mark.parametrize("spec", NATURAL_IMAGE)
def test_every_natural_threat_changes_what_the_victim_sees(spec, pixel_victim):
    (rec,) = evaluate_episodes(_pixel_env, pixel_victim, parse_threat(spec), [0], seed=0)
    assert rec.perturbed_steps == rec.length == 25
    assert rec.linf_sum / rec.perturbed_steps > 0.01, "the threat did not reach the observation"
    assert rec.perceptual_steps == 3 and rec.ssim_sum / rec.perceptual_steps < 0.999


def test_spectrum_of_known_signals():
    h = 64
    yy, xx = torch.meshgrid(torch.arange(h), torch.arange(h), indexing="ij")
    wave = 0.5 + 0.5 * torch.cos(2 * torch.pi * 20 * xx / h)  # all AC energy at radius 20
    radii, psd = radial_psd(wave[None].double())
    assert int(radii[1:][psd[1:].argmax()]) == 20
    bands = band_energy(radii, psd)
    assert bands["mid"] > 100 * (bands["low"] + bands["high"])  # 20 lies in (64/6, 64/3]
    blur = torch.nn.functional.avg_pool2d(wave[None, None], 3, 1, 1)[0]
    report = spectrum_report(wave[None], {"blur": blur})
    assert report["threats"]["blur"]["relative_change"]["mid"] < -0.5


def test_calibrate_bisection_finds_threshold_on_synthetic_response():
    # return falls linearly with the severity: impact = value / 10, target 0.42 -> 4.2
    def evaluate(spec):
        value = float(spec.split("degrees=")[1])
        return {"return_mean": 100 - 10 * value, "return_sem": 0.01}

    result = calibrate("rotation", 0.42, evaluate, score_max=100.0, score_min=0.0,
                       space=SearchSpace("degrees", 0.0, 10.0), iterations=12)
    assert result["reached"] and result["severity"] == pytest.approx(4.2, abs=0.01)
    assert result["impact"] >= 0.42
    # only probes within the 95% interval of the target (se = 1e-4) are flagged as uncertain
    assert all(abs(v - 4.2) < 0.003 for v in result["uncertain_probes"])
    unreachable = calibrate("rotation", 0.99, evaluate, 100.0, 0.0, SearchSpace("degrees", 0.0, 5.0))
    assert not unreachable["reached"] and "raise --high" in unreachable["message"]
    odd = SearchSpace("kernel", 1, 21, "odd")
    assert all(odd.value(t) % 2 == 1 for t in np.linspace(0, 1, 17))


def test_lpips_from_user_weights(tmp_path):
    from rlgauntlet.errors import UserError
    from rlgauntlet.metrics.perceptual import AlexLPIPS, PerceptualMeter

    torch.manual_seed(0)
    reference = AlexLPIPS()
    for i in range(5):  # LPIPS heads are non-negative
        lin = getattr(reference, f"lin{i}").model[1]
        lin.weight.data = lin.weight.data.abs()
    path = tmp_path / "lpips_alex.pt"
    torch.save(reference.state_dict(), path)
    model = AlexLPIPS.from_file(path)
    keys = set(model.state_dict())
    assert {"net.slice1.0.weight", "net.slice5.10.bias", "lin0.model.1.weight", "lin4.model.1.weight"} <= keys
    a = torch.rand(3, 4, 84, 84)
    b = (a + 0.2 * torch.randn_like(a)).clamp(0, 1)
    d = PerceptualMeter(model).measure(a, b)
    assert torch.allclose(model(a, a), torch.zeros(3), atol=1e-6)
    assert bool((d["lpips"] > 0).all()) and torch.allclose(model(a, b), model(b, a))
    assert bool((model(a, (a + 0.4 * torch.randn_like(a)).clamp(0, 1)) > d["lpips"]).all())
    torch.save({"something": torch.zeros(1)}, tmp_path / "bad.pt")
    with pytest.raises(UserError, match="is not an LPIPS"):
        AlexLPIPS.from_file(tmp_path / "bad.pt")
    with pytest.raises(UserError, match="not found"):
        AlexLPIPS.from_file(tmp_path / "missing.pt")


def test_visited_inputs_are_the_clean_agents_states_across_episodes():
    """The engine collects what the clean agent sees, episode after episode (seeds s, s+1, ...)."""
    import numpy as np

    from rlgauntlet.envs import make_env
    from rlgauntlet.experiments.spectrum import visited_inputs
    from rlgauntlet.victims import load_victim

    victim = load_victim("zoo:cartpole-dqn")
    capped = lambda: __import__("gymnasium").wrappers.TimeLimit(make_env("CartPole-v1"), 20)  # noqa: E731
    states = visited_inputs(victim, capped, 50, seed=3)
    env, manual = capped(), []
    for episode in range(3):
        obs, _ = env.reset(seed=3 + episode)
        done = False
        while not done and len(manual) < 50:
            manual.append(obs)
            obs, _, term, trunc, _ = env.step(int(victim.act(obs[None])[0]))
            done = term or trunc
    assert states.shape == (50, 4)
    # bit-exact on purpose: the same env states under per-episode seeds, widened to float64, nothing computed
    np.testing.assert_array_equal(states.numpy(), np.array(manual, dtype=np.float64))


def test_spectrum_cli_on_the_pong_agent(tmp_path, cli_env):
    import json
    import subprocess
    import sys

    out = tmp_path / "spec.png"
    res = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "spectrum", "--agent", "zoo:pong-ppo", "--env",
                          "PongNoFrameskip-v4", "--threat", "rotation:degrees=3", "--steps", "12", "--out", str(out)],
                         capture_output=True, text=True, env=cli_env)
    assert res.returncode == 0, res.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["steps"] == 12 and report["env"] == "PongNoFrameskip-v4" and "rotation:degrees=3" in report["threats"]
