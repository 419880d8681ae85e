"""The policy_gradients release format (``pg:PATH.model``), read as data: synthetic files with the
release's structure in both torch formats, and a loaded policy's action against a forward pass
computed by hand (numpy), with the released state filter applied."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlgauntlet.errors import UserError
from rlgauntlet.victims import load_victim
from rlgauntlet.victims.pg_release import read_release

OBS, ACT, HIDDEN = 11, 3, 16


def _fake_release_modules() -> dict[str, types.ModuleType]:
    """Stand-ins for the release's classes, with their module paths, so that pickle writes the
    same globals the released files hold; removed before any load (nothing of them is imported)."""
    custom_env = types.ModuleType("policy_gradients.custom_env")
    torch_utils = types.ModuleType("policy_gradients.torch_utils")
    time_limit = types.ModuleType("gym.wrappers.time_limit")
    for module, names in ((custom_env, ["Env"]), (torch_utils, ["RunningStat", "ZFilter", "Identity", "RewardFilter"]),
                          (time_limit, ["TimeLimit"])):
        for name in names:
            cls = type(name, (), {})
            cls.__module__ = module.__name__
            setattr(module, name, cls)
    return {"policy_gradients": types.ModuleType("policy_gradients"), "policy_gradients.custom_env": custom_env,
            "policy_gradients.torch_utils": torch_utils, "gym": types.ModuleType("gym"),
            "gym.wrappers": types.ModuleType("gym.wrappers"), "gym.wrappers.time_limit": time_limit}


def _release(seed: int, recurrent: bool = False, center: bool = True, scale: bool = True, clip: float | None = 10.0,
             extra: dict | None = None) -> tuple[dict, dict]:
    """A release file's content built with the stand-in classes, and the plain numbers behind it."""
    rng = np.random.default_rng(seed)
    mods = _fake_release_modules()
    saved = {name: sys.modules.get(name) for name in mods}
    sys.modules.update(mods)
    tu, ce = mods["policy_gradients.torch_utils"], mods["policy_gradients.custom_env"]
    weights = OrderedDict()
    weights["log_stdev"] = torch.tensor(rng.normal(size=ACT) * 0.1, dtype=torch.float32)
    weights["affine_layers.0.weight"] = torch.tensor(rng.normal(size=(HIDDEN, OBS)) * 0.3, dtype=torch.float32)
    weights["affine_layers.0.bias"] = torch.tensor(rng.normal(size=HIDDEN) * 0.1, dtype=torch.float32)
    weights["affine_layers.1.weight"] = torch.tensor(rng.normal(size=(HIDDEN, HIDDEN)) * 0.3, dtype=torch.float32)
    weights["affine_layers.1.bias"] = torch.tensor(rng.normal(size=HIDDEN) * 0.1, dtype=torch.float32)
    weights["final_mean.weight"] = torch.tensor(rng.normal(size=(ACT, HIDDEN)) * 0.2, dtype=torch.float32)
    weights["final_mean.bias"] = torch.tensor(rng.normal(size=ACT) * 0.05, dtype=torch.float32)
    if recurrent:
        weights["embedding_layer.weight"] = torch.zeros(HIDDEN, OBS)
        weights["lstm.weight_ih_l0"] = torch.zeros(4 * HIDDEN, HIDDEN)
    n, m, s = 1000, rng.normal(size=OBS), rng.uniform(1.0, 50.0, size=OBS) * 999
    rs = tu.RunningStat()
    rs.__dict__.update(_n=n, _M=m, _S=s)
    zfilter = tu.ZFilter()
    zfilter.__dict__.update(center=center, scale=scale, clip=clip, rs=rs, prev_filter=tu.Identity(), read_only=False)
    reward_rs = tu.RunningStat()
    reward_rs.__dict__.update(_n=5, _M=np.zeros(()), _S=np.ones(()))
    reward_filter = tu.RewardFilter()
    reward_filter.__dict__.update(gamma=0.99, prev_filter=tu.Identity(), rs=reward_rs, ret=np.zeros(()), clip=10.0)
    env = ce.Env()
    env.__dict__.update(env=mods["gym.wrappers.time_limit"].TimeLimit(), state_filter=zfilter,
                        reward_filter=reward_filter, num_features=OBS, num_actions=ACT, is_discrete=False)
    content = {"policy_model": weights, "val_model": OrderedDict(w=torch.zeros(2)), "policy_opt": {"state": {}},
               "val_opt": {"state": {}}, "envs": [env], **(extra or {})}
    plain = {k: v.double().numpy() for k, v in weights.items()}
    plain.update(mean=m, std=np.sqrt(s / (n - 1)), clip=clip, center=center, scale=scale)
    return content, {"plain": plain, "modules": mods, "saved": saved}


def _write(path, content, meta, legacy: bool) -> None:
    try:
        torch.save(content, path, _use_new_zipfile_serialization=not legacy)
    finally:
        for name, module in meta["saved"].items():  # the stand-ins leave: a load must not need them
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def by_hand(plain: dict, obs: np.ndarray) -> np.ndarray:
    """The authors' forward pass in numpy: ZFilter (center, scale, clip), tanh MLP, final_mean."""
    x = obs.astype(np.float64)
    if plain["center"]:
        x = x - plain["mean"]
    if plain["scale"]:
        x = x / (plain["std"] + 1e-8) if plain["center"] else (x - plain["mean"]) / (plain["std"] + 1e-8) + plain["mean"]
    if plain["clip"]:
        x = np.clip(x, -plain["clip"], plain["clip"])
    h = np.tanh(x @ plain["affine_layers.0.weight"].T + plain["affine_layers.0.bias"])
    h = np.tanh(h @ plain["affine_layers.1.weight"].T + plain["affine_layers.1.bias"])
    return h @ plain["final_mean.weight"].T + plain["final_mean.bias"]


SPACES = (gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float64), gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32))


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("flags", [dict(), dict(center=False), dict(clip=None), dict(scale=False)],
                         ids=["filter", "no-center", "no-clip", "no-scale"])
def test_a_loaded_release_acts_as_the_authors_forward_pass_by_hand(tmp_path, legacy, flags):
    content, meta = _release(3, **flags)
    path = tmp_path / "model-ppo-hopper.model"
    _write(path, content, meta, legacy)
    assert "policy_gradients.custom_env" not in sys.modules
    victim = load_victim(f"pg:{path}", *SPACES)
    assert victim.budget_space == "normalized" and victim.kind == "gaussian"
    obs = np.random.default_rng(0).normal(size=(6, OBS)) * 30.0  # large: the clip at 10 matters
    expected = by_hand(meta["plain"], obs)
    x = victim.preprocess(obs)
    out = victim.forward(x)
    np.testing.assert_allclose(out.mean.numpy(), expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out.log_std.numpy(), np.broadcast_to(meta["plain"]["log_stdev"], (6, ACT)), rtol=1e-12)
    np.testing.assert_allclose(victim.act(obs), np.clip(expected, -1.0, 1.0), rtol=1e-9, atol=1e-12)
    assert "policy_gradients.custom_env" not in sys.modules and "gym.wrappers.time_limit" not in sys.modules
    # the bound chain computes the same mean (IBP walks it)
    chain_out = x
    for layer in victim.layer_chain():
        chain_out = layer(chain_out)
    np.testing.assert_allclose(chain_out.numpy(), expected, rtol=1e-9, atol=1e-12)


def test_the_filter_uses_the_running_stats_sample_std_not_the_population_one(tmp_path):
    content, meta = _release(4)
    path = tmp_path / "a.model"
    _write(path, content, meta, legacy=False)
    release = read_release(path)
    rs = content["envs"][0].state_filter.rs
    np.testing.assert_allclose(release.state_filter.std, np.sqrt(rs._S / (rs._n - 1)), rtol=1e-12)
    np.testing.assert_allclose(release.state_filter.mean, rs._M, rtol=1e-12)


def test_a_global_outside_the_allow_list_is_refused_by_name_and_never_called(tmp_path):
    marker = tmp_path / "ran"
    content, meta = _release(5, extra={"hook": os.system})
    path = tmp_path / "evil.model"
    _write(path, content, meta, legacy=False)
    with pytest.raises(UserError, match=r"holds the global (posix|nt)\.system") as err:
        read_release(path)
    assert "\n" not in str(err.value) and not marker.exists()


def test_another_format_an_lstm_policy_and_a_wrong_env_are_one_line_errors(tmp_path):
    text = tmp_path / "notes.model"
    text.write_text("not a torch file")
    with pytest.raises(UserError, match="is not a policy_gradients release file"):
        read_release(text)
    other = tmp_path / "state.model"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(UserError, match="without policy_model and envs"):
        read_release(other)
    content, meta = _release(6, recurrent=True)
    lstm = tmp_path / "model-lstm-ppo-hopper.model"
    _write(lstm, content, meta, legacy=True)
    with pytest.raises(UserError, match="LSTM policy"):
        load_victim(f"pg:{lstm}", *SPACES)
    content, meta = _release(7)
    mlp = tmp_path / "model-ppo-hopper.model"
    _write(mlp, content, meta, legacy=False)
    walker_obs = gym.spaces.Box(-np.inf, np.inf, (17,), np.float64)
    with pytest.raises(UserError, match="observes 11 numbers and the env gives 17"):
        load_victim(f"pg:{mlp}", walker_obs, SPACES[1])
    with pytest.raises(UserError, match="does not exist"):
        load_victim(f"pg:{tmp_path / 'missing.model'}", *SPACES)


def test_the_cli_refuses_a_foreign_global_with_exit_2_and_one_line(tmp_path, cli_env):
    content, meta = _release(8, extra={"hook": os.system})
    path = tmp_path / "evil.model"
    _write(path, content, meta, legacy=True)
    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", f"pg:{path}", "--env",
                           "Hopper-v5", "--episodes", "1"], capture_output=True, text=True, env=cli_env)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "system" in lines[0] and "Traceback" not in proc.stderr


def test_the_released_attacker_is_eps_times_hardtanh_of_its_mean_on_the_filtered_state(tmp_path):
    from rlgauntlet.common.seeding import BatchRNG
    from rlgauntlet.threats import parse_threat

    rng = np.random.default_rng(9)
    adversary = OrderedDict()
    adversary["log_stdev"] = torch.zeros(OBS)
    adversary["affine_layers.0.weight"] = torch.tensor(rng.normal(size=(HIDDEN, OBS)), dtype=torch.float32)
    adversary["affine_layers.0.bias"] = torch.tensor(rng.normal(size=HIDDEN) * 0.1, dtype=torch.float32)
    adversary["final_mean.weight"] = torch.tensor(rng.normal(size=(OBS, HIDDEN)) * 2.0, dtype=torch.float32)
    adversary["final_mean.bias"] = torch.tensor(rng.normal(size=OBS) * 0.1, dtype=torch.float32)
    content, meta = _release(10, extra={"adversary_policy_model": adversary, "adversary_val_model": OrderedDict()})
    path = tmp_path / "attack-ppo-hopper.model"
    _write(path, content, meta, legacy=True)
    victim = load_victim(f"pg:{path}", *SPACES)
    threat = parse_threat(f"released_attacker:path={path},eps=0.075")
    threat.check_victim(victim)
    x = victim.preprocess(np.random.default_rng(1).normal(size=(5, OBS)) * 3.0)
    perturbed = threat.perturb(x, victim, BatchRNG([torch.Generator() for _ in range(5)]))
    a = {k: v.double().numpy() for k, v in adversary.items()}
    mean = np.tanh(x.numpy() @ a["affine_layers.0.weight"].T + a["affine_layers.0.bias"]) @ a["final_mean.weight"].T \
        + a["final_mean.bias"]
    np.testing.assert_allclose(perturbed.numpy(), x.numpy() + 0.075 * np.clip(mean, -1.0, 1.0), rtol=1e-9, atol=1e-12)
    assert np.abs(mean).max() > 1.0  # the hardtanh clips some coordinates: the budget holds exactly
    assert np.abs(perturbed.numpy() - x.numpy()).max() <= 0.075 + 1e-12
    zoo_like = load_victim("zoo:cartpole-ppo")
    with pytest.raises(UserError, match="give a pg:PATH.model agent"):
        threat.check_victim(zoo_like)


# --- the catalogue of published agents --------------------------------------------------------

def test_the_catalogue_names_every_release_once_with_its_hash_env_and_the_papers_eps():
    from rlgauntlet.published import catalogue, releases

    entries = releases()
    assert len(entries) == 28 and len({e["name"] for e in entries}) == 28  # 6 ATLA methods × 4 envs + PA-ATLA × 4
    papers_eps = {"Hopper-v5": 0.075, "Walker2d-v5": 0.05, "HalfCheetah-v5": 0.15, "Ant-v4": 0.15}
    for e in entries:
        assert e["repository"] in catalogue()["repositories"]
        assert len(e["sha256"]) == 64 and int(e["sha256"], 16) >= 0
        assert papers_eps[e["env"]] == e["eps"] and e["name"].endswith(e["env"].split("-")[0].lower())
        assert gym.spec(e["env"]) is not None
    readme = {e["name"]: e["readme"] for e in entries if e["readme"]}
    assert readme["ppo-hopper"] == {**readme["ppo-hopper"], "natural": 3167.3, "strongest_attack": 636.4}
    assert readme["atla-lstm-sappo-walker2d"]["strongest_attack"] == 3662.9


def test_a_published_name_resolves_to_the_users_clone_checked_by_sha256(tmp_path, monkeypatch):
    from rlgauntlet.common.hashing import sha256_file
    from rlgauntlet.published import local_file

    content, meta = _release(11)
    clone = tmp_path / "ATLA_robust_RL" / "src" / "models"
    clone.mkdir(parents=True)
    path = clone / "model-ppo-hopper.model"
    _write(path, content, meta, legacy=False)
    entry = {"name": "ppo-hopper", "repository": "huanzhang12/ATLA_robust_RL", "path": "src/models/model-ppo-hopper.model",
             "sha256": sha256_file(path)}
    monkeypatch.setenv("RLGAUNTLET_RELEASES", str(tmp_path))
    assert local_file(entry) == path
    with pytest.raises(UserError, match="another version of the file"):
        local_file({**entry, "sha256": "0" * 64})
    monkeypatch.setenv("RLGAUNTLET_RELEASES", str(tmp_path / "empty"))
    with pytest.raises(UserError, match=r"run `git clone https://github.com/huanzhang12/ATLA_robust_RL .*empty/ATLA_robust_RL`"):
        local_file(entry)


def test_published_list_and_a_missing_clone_on_the_cli(tmp_path, cli_env):
    listed = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "published", "list", "--json"], capture_output=True,
                            text=True, env={**cli_env, "RLGAUNTLET_RELEASES": str(tmp_path)})
    assert listed.returncode == 0, listed.stderr
    import json

    assert len(json.loads(listed.stdout)["releases"]) == 28
    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", "published:sa-ppo-hopper",
                           "--env", "Hopper-v5", "--episodes", "1"], capture_output=True, text=True,
                          env={**cli_env, "RLGAUNTLET_RELEASES": str(tmp_path)})
    assert proc.returncode == 2 and "git clone https://github.com/huanzhang12/ATLA_robust_RL" in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1
