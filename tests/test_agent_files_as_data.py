"""Agent files are data, not code: SB3 zips and VecNormalize statistics load without
unpickling anything but plain data; hostile files are refused and run nothing."""

import base64
import json
import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch.nn as nn

from rlgauntlet.errors import UserError
from rlgauntlet.victims import load_victim
from rlgauntlet.victims.sb3 import VecNormalizeStats, load_sb3


def _payload(target) -> bytes:
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {target}",))

    return pickle.dumps(Evil())


@pytest.fixture()
def no_unpickling(monkeypatch):
    """Any use of SB3's/cloudpickle's unpickling of the zip fails the test."""
    import cloudpickle
    import stable_baselines3.common.save_util as save_util

    def refuse(*args, **kwargs):
        raise AssertionError("unpickled a field of the agent file")

    monkeypatch.setattr(save_util, "json_to_data", refuse)
    monkeypatch.setattr(cloudpickle, "loads", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)


@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "sac", "td3", "ddpg", "ppo_cont"])
def test_sb3_agents_of_every_algorithm_load_as_data(tiny_models, name, no_unpickling):
    victim = load_victim(f"sb3:{tiny_models[name]}")
    assert victim.policy is not None


@pytest.mark.parametrize("name", ["cartpole-dqn", "cartpole-ppo", "hopper-ppo", "pendulum-td3", "pong-ppo"])
def test_zoo_agents_load_as_data(name, no_unpickling):
    assert load_victim(f"zoo:{name}").kind in ("q", "categorical", "gaussian", "deterministic")


def test_data_path_acts_exactly_like_sb3s_own_loader(tiny_models, tmp_path):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import stable_baselines3 as sb3

    for name, cls in (("a2c", sb3.A2C), ("sac", sb3.SAC)):
        safe = load_victim(f"sb3:{tiny_models[name]}", precision="float32")
        trusted = load_victim(f"sb3:{tiny_models[name]}", precision="float32", allow_pickle=True)
        obs = np.random.default_rng(0).normal(size=(16, *safe.observation_space.shape)).astype(np.float32)
        np.testing.assert_array_equal(safe.act(obs), trusted.act(obs))
        assert safe.observation_space == trusted.observation_space and safe.action_space == trusted.action_space
    venv = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=0))
    venv.reset()
    for _ in range(20):
        venv.step(np.zeros((1, 1), dtype=np.float32))
    venv.save(str(tmp_path / "vn.pkl"))
    safe, trusted = VecNormalizeStats(tmp_path / "vn.pkl"), VecNormalizeStats(tmp_path / "vn.pkl", allow_pickle=True)
    for field in ("mean", "var", "clip", "epsilon", "enabled"):
        assert np.array_equal(getattr(safe, field), getattr(trusted, field)), field
    assert safe.var.std() > 0  # real statistics, not defaults


def test_an_allowed_activation_in_policy_kwargs_loads(tmp_path):
    import stable_baselines3 as sb3

    model = sb3.PPO("MlpPolicy", "CartPole-v1", seed=0, n_steps=64, policy_kwargs=dict(activation_fn=nn.ReLU, net_arch=[8]))
    model.save(tmp_path / "relu.zip")
    victim = load_victim(f"sb3:{tmp_path / 'relu.zip'}", precision="float32")
    obs = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
    np.testing.assert_array_equal(victim.act(obs), model.predict(obs, deterministic=True)[0])
    assert any(isinstance(m, nn.ReLU) for m in victim.policy.modules())


def _tamper(src, dst, field, value):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "data":
                content = json.loads(data)
                content[field] = value
                data = json.dumps(content).encode()
            zout.writestr(item, data)


def test_hostile_policy_class_is_refused_and_runs_nothing(tiny_models, tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.zip"
    _tamper(tiny_models["ppo"], evil, "policy_class",
            {":type:": "<class 'type'>", ":serialized:": base64.b64encode(_payload(marker)).decode(),
             "__module__": "os", "__init__": "<function system.__init__ at 0x0>"})
    with pytest.raises(UserError, match="is not one of Stable-Baselines3's own; .*--allow-pickle"):
        load_victim(f"sb3:{evil}")
    assert not marker.exists()


def test_hostile_payload_in_another_field_is_never_unpickled(tiny_models, tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.zip"
    _tamper(tiny_models["ppo"], evil, "learning_rate",
            {":type:": "<class 'function'>", ":serialized:": base64.b64encode(_payload(marker)).decode()})
    load_victim(f"sb3:{evil}")  # loads: the field is not needed, so it is never read
    assert not marker.exists()


def test_hostile_vecnormalize_file_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "vn.pkl"
    evil.write_bytes(_payload(marker))
    with pytest.raises(UserError, match="refers to posix.system, which is not plain data"):
        VecNormalizeStats(evil)
    assert not marker.exists()


def test_custom_policy_class_needs_allow_pickle(tmp_path):
    code = (
        "import stable_baselines3 as sb3\n"
        "from stable_baselines3.common.policies import ActorCriticPolicy\n"
        "class MyPolicy(ActorCriticPolicy):\n"
        "    def __init__(self, *a, **k):\n"
        "        super().__init__(*a, **k)\n"
        f"sb3.PPO(MyPolicy, 'CartPole-v1', n_steps=64).save(r'{tmp_path / 'custom.zip'}')\n"
    )
    (tmp_path / "mypol.py").write_text(code)
    subprocess.run([sys.executable, "mypol.py"], cwd=tmp_path, check=True, capture_output=True)
    with pytest.raises(UserError, match="__main__.MyPolicy is not one of Stable-Baselines3's own"):
        load_sb3(tmp_path / "custom.zip")


def test_cli_refuses_a_hostile_zip_with_exit_2(tiny_models, tmp_path, cli_env):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.zip"
    _tamper(tiny_models["ppo"], evil, "policy_class",
            {":type:": "<class 'type'>", ":serialized:": base64.b64encode(_payload(marker)).decode()})
    res = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", f"sb3:{evil}", "--env",
                          "CartPole-v1"], capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert res.returncode == 2 and "--allow-pickle" in res.stderr and "Traceback" not in res.stderr
    assert not marker.exists()


def test_init_from_an_sb3_zip_reads_it_as_data(tiny_models, tmp_path, no_unpickling):
    """Fine-tuning (``train --init-from sb3:PATH.zip``) takes the weights only: a payload in the
    zip's observation space never runs, and the weights still arrive."""
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.training.recipes import PRESETS
    from rlgauntlet.training.kit import build_model, init_from_agent

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.zip"
    _tamper(tiny_models["dqn"], evil, "observation_space",
            {":type:": "<class 'gymnasium.spaces.box.Box'>", ":serialized:": base64.b64encode(_payload(marker)).decode()})
    preset = PRESETS["cartpole-dqn"]
    env = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    preset = type(preset)(**{**preset.__dict__, "hyperparams": {**preset.hyperparams,
                                                                   "policy_kwargs": {"net_arch": [32, 32]}}})
    model = build_model(preset, env, "cpu")
    init_from_agent(model, env, f"sb3:{evil}", preset)
    assert not marker.exists()
    source = load_sb3(tiny_models["dqn"], precision="float32").policy.state_dict()
    assert all(torch.equal(model.policy.state_dict()[k], v) for k, v in source.items())  # bit-exact: copied


def test_a_checkpoint_is_resumed_as_data_with_everything_restored(tmp_path, no_unpickling):
    """A checkpoint found in a --run-dir is resumed without unpickling: a payload in its zip's
    fields never runs, and the weights, both optimizers' states, the step counters, the replay
    buffer and the VecNormalize statistics come back exactly (bit-exact: copies)."""
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.training.checkpoints import load_checkpoint_zip, load_replay_buffer
    from rlgauntlet.training.recipes import PRESETS
    from rlgauntlet.training.kit import build_model
    from rlgauntlet.training.sb3_train import train_preset

    run_dir = tmp_path / "run"
    ckpt = train_preset("cartpole-dqn", run_dir, total_timesteps=1200, stop_at_target=False, log=lambda s: None)
    assert (ckpt / "replay_buffer.npz").exists() and not (ckpt / "replay_buffer.pkl").exists()
    marker = tmp_path / "pwned"
    clean = tmp_path / "clean.zip"
    (ckpt / "model.zip").rename(clean)
    _tamper(clean, ckpt / "model.zip", "learning_rate",
            {":type:": "<class 'function'>", ":serialized:": base64.b64encode(_payload(marker)).decode()})
    model = build_model(PRESETS["cartpole-dqn"], make_vec_env("CartPole-v1", n_envs=1, seed=5), "cpu")
    load_checkpoint_zip(model, ckpt / "model.zip")
    assert load_replay_buffer(model, ckpt)
    with zipfile.ZipFile(clean) as archive:
        saved = torch.load(__import__("io").BytesIO(archive.read("policy.pth")), weights_only=True)
        optimizer = torch.load(__import__("io").BytesIO(archive.read("policy.optimizer.pth")), weights_only=True)
        data = json.loads(archive.read("data"))
    assert all(torch.equal(model.policy.state_dict()[k], v) for k, v in saved.items())  # bit-exact: loaded copies
    assert model.policy.optimizer.state_dict()["state"].keys() == optimizer["state"].keys() != set()
    assert (model.num_timesteps, model._n_updates, model._n_calls) == \
        (data["num_timesteps"], data["_n_updates"], data["_n_calls"]) and model.num_timesteps >= 1200
    assert model.replay_buffer.pos == model.num_timesteps % model.replay_buffer.buffer_size and \
        float(abs(model.replay_buffer.observations[:model.num_timesteps]).sum()) > 0
    train_preset("cartpole-dqn", run_dir, total_timesteps=1300, stop_at_target=False, log=lambda s: None)
    assert json.loads((ckpt / "progress.json").read_text())["num_timesteps"] >= 1300
    assert not marker.exists()


def test_a_pickled_replay_buffer_needs_allow_pickle(tmp_path):
    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.training.checkpoints import load_replay_buffer
    from rlgauntlet.training.recipes import PRESETS
    from rlgauntlet.training.kit import build_model

    model = build_model(PRESETS["cartpole-dqn"], make_vec_env("CartPole-v1", n_envs=1, seed=5), "cpu")
    marker = tmp_path / "pwned"
    (tmp_path / "replay_buffer.pkl").write_bytes(_payload(marker))
    with pytest.raises(UserError, match="pickled replay buffer.*--allow-pickle"):
        load_replay_buffer(model, tmp_path)
    assert not marker.exists()
