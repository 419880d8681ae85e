"""TorchScript agents as users export them (traced SB3 policies, scripted modules) load by
default and act exactly as the sb3: path on the same zip."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.threats import parse_threat
from rlgauntlet.victims import load_victim
from rlgauntlet.zoo import zoo_dir


class PPOLogits(nn.Module):
    """The actor's logits through SB3's own modules (SB3's documented export recipe)."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, obs):
        features = self.policy.extract_features(obs, self.policy.pi_features_extractor)
        return self.policy.action_net(self.policy.mlp_extractor.forward_actor(features))


class TD3Action(nn.Module):
    """The TD3 actor's tanh output scaled to env units."""

    def __init__(self, actor, low, high):
        super().__init__()
        self.actor = actor
        self.register_buffer("low", torch.as_tensor(low))
        self.register_buffer("high", torch.as_tensor(high))

    def forward(self, obs):
        return self.low + (self.actor(obs) + 1.0) * 0.5 * (self.high - self.low)


def _trace(module, obs_dim, path):
    module = module.eval()
    torch.jit.save(torch.jit.trace(module, torch.zeros(1, obs_dim)), str(path))
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    import stable_baselines3 as sb3

    from rlgauntlet.training.export import export_sb3

    out = tmp_path_factory.mktemp("exports")
    for name in ("cartpole-ppo", "cartpole-dqn", "pendulum-td3"):  # the zoo's files as SB3 zips
        export_sb3(name, out / f"{name}.zip")
    ppo = sb3.PPO.load(out / "cartpole-ppo.zip", device="cpu")
    dqn = sb3.DQN.load(out / "cartpole-dqn.zip", device="cpu")
    td3 = sb3.TD3.load(out / "pendulum-td3.zip", device="cpu")
    space = td3.action_space
    return {
        "ppo": _trace(PPOLogits(ppo.policy), 4, out / "ppo_logits.pt"),
        "dqn": _trace(dqn.q_net, 4, out / "dqn_q.pt"),
        "td3": _trace(TD3Action(td3.actor, space.low, space.high), 3, out / "td3_action.pt"),
    }


CASES = [("ppo", "cartpole-ppo", "categorical", "CartPole-v1", "pgd:eps=0.2,steps=10"),
         ("dqn", "cartpole-dqn", "q", "CartPole-v1", "pgd:eps=0.1,steps=10"),
         ("td3", "pendulum-td3", "deterministic", "Pendulum-v1", "pgd:eps=0.3,steps=5,objective=maxdiff")]


@pytest.mark.parametrize("export, zoo, kind, env_id, attack", CASES)
def test_traced_export_loads_by_default_and_matches_the_sb3_path(exports, export, zoo, kind, env_id, attack):
    env = make_env(env_id)
    ts = load_victim(f"torchscript:{exports[export]}", env.observation_space, env.action_space, kind=kind,
                     input_space="raw")
    assert ts.dtype == torch.float32 and ts.description["precision"] == "float32"
    assert "float64 failed" in ts.description["precision_note"]
    sb3 = load_victim(f"sb3:{zoo_dir() / (zoo + '.zip')}", precision="float32")
    capped = lambda: gym.wrappers.TimeLimit(make_env(env_id), 200)  # noqa: E731
    for threat in (None, attack):
        runs = [sorted((r.episode, r.episode_return, r.length) for r in evaluate_episodes(
            capped, v, parse_threat(threat) if threat else None, range(4), seed=0, n_envs=2)) for v in (ts, sb3)]
        if kind == "deterministic":
            # the export scales tanh to torque as low + (a + 1)/2·(high − low), our loader as a·s + o:
            # float32 rounds them differently in the 7th digit; the pendulum's dynamics (and the
            # attack's gradients) carry that into the returns' 4th digit at most
            assert [r[2] for r in runs[0]] == [r[2] for r in runs[1]], threat
            np.testing.assert_allclose([r[1] for r in runs[0]], [r[1] for r in runs[1]], rtol=1e-3)
        else:
            assert runs[0] == runs[1], threat
    attacked = [r.episode_return for r in evaluate_episodes(capped, ts, parse_threat(attack), range(4), 0, n_envs=2)]
    clean = [r.episode_return for r in evaluate_episodes(capped, ts, None, range(4), 0, n_envs=2)]
    assert np.mean(attacked) < np.mean(clean)  # the attack reached the exported network


@pytest.mark.parametrize("export, zoo, kind, env_id, attack", CASES[:2])
def test_float32_exports_do_not_depend_on_n_envs_in_practice(exports, export, zoo, kind, env_id, attack):
    env = make_env(env_id)
    ts = load_victim(f"torchscript:{exports[export]}", env.observation_space, env.action_space, kind=kind,
                     input_space="raw")
    runs = [sorted((r.episode, r.episode_return, r.length, r.action_changes) for r in evaluate_episodes(
        lambda: make_env(env_id), ts, parse_threat(attack), range(4), seed=1, n_envs=n)) for n in (1, 4)]
    assert runs[0] == runs[1]


def test_scripted_module_runs_in_float64(tmp_path):
    path = tmp_path / "scripted.pt"
    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))), str(path))
    env = make_env("CartPole-v1")
    victim = load_victim(f"torchscript:{path}", env.observation_space, env.action_space, kind="q", input_space="raw")
    assert victim.dtype == torch.float64 and victim.description["precision"] == "float64"
    assert "precision_note" not in victim.description


def test_explicit_float64_that_cannot_run_names_float32(exports):
    env = make_env("CartPole-v1")
    with pytest.raises(UserError, match="cannot run in float64 .*use --precision float32"):
        load_victim(f"torchscript:{exports['ppo']}", env.observation_space, env.action_space, kind="categorical",
                    input_space="raw", precision="float64")


@pytest.mark.parametrize("env_id, kind, message", [
    ("Acrobot-v1", "categorical", "does not run on this env's observations"),  # 6 inputs, not 4
    ("CartPole-v1", "q", None),
])
def test_a_module_that_does_not_fit_the_env_is_refused(exports, env_id, kind, message):
    env = make_env(env_id)
    load = lambda: load_victim(f"torchscript:{exports['ppo']}", env.observation_space, env.action_space,  # noqa: E731
                               kind=kind, input_space="raw")
    if message is None:
        load()
    else:
        with pytest.raises(UserError, match=message):
            load()


def test_cli_runs_a_traced_export_by_default(exports, tmp_path, cli_env):
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", f"torchscript:{exports['ppo']}",
                          "--kind", "categorical", "--input-space", "raw", "--env", "CartPole-v1", "--episodes", "2",
                          "--out", str(out)], capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())
    assert report["agent"]["precision"] == "float32" and report["evaluations"][0]["return_mean"] == 500.0
