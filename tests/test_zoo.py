"""Every zoo agent loads (sha256 checked) and meets its clean return over 20 episodes."""

import json
import shutil

import numpy as np
import pytest

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.victims import load_victim
from rlgauntlet.zoo import load_manifest

MANIFEST = load_manifest()
SLOW_ENVS = ("NoFrameskip", "dm_control/", "Hopper-v5")
#: the fast set keeps one dm_control agent (the cheapest), so the [dmc] path is checked in CI, and one
#: Hopper agent of the ten (20 Hopper episodes cost 5–7 s an agent, every one loaded the same way: SB3
#: PPO with its VecNormalize statistics); each is loaded, its sha256 checked, in the fast set below
FAST_ANYWAY = ("dmc-cartpole-balance-sac", "hopper-ppo")


def _params():
    for name, entry in sorted(MANIFEST.items()):
        slow = any(s in entry["env"] for s in SLOW_ENVS) and name not in FAST_ANYWAY
        marks = [pytest.mark.slow] if slow else []
        yield pytest.param(name, marks=marks, id=name)


def test_zoo_v0_agents_are_present():
    assert {"cartpole-dqn", "cartpole-ppo", "pendulum-td3"} <= set(MANIFEST)


@pytest.mark.parametrize("name", list(_params()))
def test_zoo_agent_meets_clean_return(name):
    entry = MANIFEST[name]
    victim = load_victim(f"zoo:{name}")
    env_id = entry["env"]
    records = evaluate_episodes(lambda: make_env(env_id), victim, None, range(20), seed=entry["clean_return"]["seed"],
                                n_envs=4)
    mean = float(np.mean([r.episode_return for r in records]))
    assert mean >= entry["clean_return"]["target"]
    assert mean == pytest.approx(entry["clean_return"]["mean"], rel=1e-6, abs=1e-6)  # reproduces the manifest
    for key in ("command", "seed", "sha256", "file"):
        assert key in entry
    for item in entry.get("members", []):  # an ensemble's file is its member list; each member is recorded too
        assert {"sha256", "file", "seed"} <= set(item)


@pytest.mark.parametrize("name", [n for n, e in sorted(MANIFEST.items()) if "Hopper-v5" in e["env"]])
def test_every_hopper_agent_of_the_zoo_loads_with_its_sha256_checked(name):
    victim = load_victim(f"zoo:{name}")  # refuses a file that does not match the manifest's sha256
    assert victim.kind == "gaussian" and victim.description.get("vecnormalize") is not None


def test_tampered_zoo_file_is_refused(tmp_path, monkeypatch):
    from rlgauntlet.zoo import zoo_dir

    src = zoo_dir()
    shutil.copy(src / "manifest.json", tmp_path / "manifest.json")
    shutil.copy(src / "cartpole-ppo.zip", tmp_path / "cartpole-ppo.zip")
    with open(tmp_path / "cartpole-ppo.zip", "ab") as f:
        f.write(b"x")
    monkeypatch.setenv("RLGAUNTLET_ZOO", str(tmp_path))
    with pytest.raises(UserError, match="does not match its manifest sha256"):
        load_victim("zoo:cartpole-ppo")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["cartpole-ppo"]["sha256"] != ""


def test_an_ensemble_whose_member_list_disagrees_with_the_manifest_is_refused(tmp_path, monkeypatch):
    import json as json_

    from rlgauntlet.common.hashing import sha256_file
    from rlgauntlet.zoo import zoo_dir

    shutil.copytree(zoo_dir(), tmp_path / "zoo")
    monkeypatch.setenv("RLGAUNTLET_ZOO", str(tmp_path / "zoo"))
    listing = tmp_path / "zoo" / MANIFEST["cartpole-dqn-ensemble"]["file"]
    data = json_.loads(listing.read_text())
    data["members"][0]["sha256"] = "0" * 64  # a member list edited to vouch for another file...
    listing.write_text(json_.dumps(data))
    manifest = json_.loads((tmp_path / "zoo" / "manifest.json").read_text())
    manifest["cartpole-dqn-ensemble"]["sha256"] = sha256_file(listing)  # ...with its own checksum updated
    (tmp_path / "zoo" / "manifest.json").write_text(json_.dumps(manifest))
    with pytest.raises(UserError, match="does not match the manifest's members"):
        load_victim("zoo:cartpole-dqn-ensemble")


# -- the zoo ships what evaluation needs, and travels ---------------------------------------------

def _zoo_files():
    from rlgauntlet.zoo import zoo_dir

    return sorted(p for p in zoo_dir().iterdir() if p.suffix == ".zip")


def test_zoo_agent_files_hold_weights_and_readable_fields_only():
    """No optimizer state, no target networks, no training state, no pickled VecNormalize:
    an SB3 zip with any of these would put them back (4× the bytes for Pong)."""
    import io
    import zipfile

    import torch

    from rlgauntlet.victims.sb3_files import AGENT_DATA_FIELDS, TARGET_NETWORKS
    from rlgauntlet.zoo import zoo_dir

    assert not list(zoo_dir().glob("*.pkl"))
    for path in _zoo_files():
        with zipfile.ZipFile(path) as archive:
            assert sorted(archive.namelist()) == ["data", "policy.pth"], path.name
            data = json.loads(archive.read("data"))
            state = torch.load(io.BytesIO(archive.read("policy.pth")), weights_only=True)
        assert set(data) <= set(AGENT_DATA_FIELDS), path.name
        assert not [k for k in state if k.startswith(tuple(TARGET_NETWORKS))], path.name


def test_tracked_tree_and_checkpoints_fit_the_limits():
    """The working tree travels to machines that take at most 64 MiB; no checkpoint carries a
    replay buffer (they are rebuilt, never shipped)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    names = [n for n in files.decode().split("\0") if n]
    size = sum((root / n).stat().st_size for n in names if (root / n).is_file() and not (root / n).is_symlink())
    assert size <= 60 * 2**20, f"tracked tree {size / 2**20:.1f} MiB"
    assert not [n for n in names if "replay_buffer" in n]
    # the zoo is a wheel of its own (rlgauntlet-zoo), and its weights barely compress: at most 30 MiB
    # keeps that wheel near 32 MB (30.7 MB on 2026-11-27; docs/decisions.md)
    zoo = sum((root / n).stat().st_size for n in names if n.startswith("zoo/"))
    assert zoo <= 30 * 2**20, f"zoo {zoo / 2**20:.1f} MiB"


@pytest.mark.parametrize("name", ["dqn", "td3", "sac", "ppo"])
def test_slim_agent_file_acts_like_the_full_one(tiny_models, tmp_path, name):
    import torch

    from rlgauntlet.victims.sb3 import load_sb3
    from rlgauntlet.victims.sb3_files import write_agent_zip

    slim = tmp_path / f"{name}.zip"
    write_agent_zip(tiny_models[name], slim)
    full, small = load_sb3(tiny_models[name]), load_sb3(slim)
    assert slim.stat().st_size < tiny_models[name].stat().st_size
    a, b = full.policy.state_dict(), small.policy.state_dict()
    assert a.keys() == b.keys()
    for k in a:  # online weights copied, target networks rebuilt as copies of them (SB3's initialisation)
        online = k.replace("_target.", ".", 1)
        assert torch.equal(b[k], a[online] if "_target." in k else a[k]), k  # bit-exact: copies, no arithmetic
    space = full.policy.observation_space
    space.seed(1)
    obs = np.stack([space.sample() for _ in range(32)])
    np.testing.assert_allclose(small.act(obs), full.act(obs), rtol=0, atol=0)  # same weights, same code path


def test_vecnormalize_as_plain_numbers_normalises_like_the_pickle(tmp_path):
    import torch
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.victims.sb3 import VecNormalizeStats
    from rlgauntlet.victims.sb3_files import write_vecnormalize_json

    env = VecNormalize(make_vec_env("Pendulum-v1", 2, seed=0), clip_obs=3.0)
    env.reset()
    for _ in range(50):
        env.step(np.stack([env.action_space.sample() for _ in range(2)]))
    env.save(str(tmp_path / "vn.pkl"))
    write_vecnormalize_json(tmp_path / "vn.pkl", tmp_path / "vn.json")
    a, b = VecNormalizeStats(tmp_path / "vn.pkl"), VecNormalizeStats(tmp_path / "vn.json")
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(8, 3)) * 5)
    assert torch.equal(a.apply(obs), b.apply(obs))  # bit-exact: the same float64 numbers (JSON round-trips them)
    assert (a.clip, a.epsilon, a.enabled, a.count) == (b.clip, b.epsilon, b.enabled, b.count) == \
        (3.0, env.epsilon, True, env.obs_rms.count)


@pytest.mark.parametrize("name", ["cartpole-dqn", "hopper-ppo"])
def test_zoo_export_gives_a_zip_sb3_loads_that_acts_like_the_zoo_agent(tmp_path, name):
    import pickle

    from stable_baselines3 import DQN, PPO

    from rlgauntlet.training.export import export_sb3

    written = export_sb3(name, tmp_path / "agent.zip")
    model = {"cartpole-dqn": DQN, "hopper-ppo": PPO}[name].load(tmp_path / "agent.zip")
    victim = load_victim(f"zoo:{name}")
    space = model.observation_space
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(64)]).clip(-5, 5)
    if name == "hopper-ppo":  # SB3's own VecNormalize, from the exported statistics
        with open(written[1], "rb") as f:
            norm = pickle.load(f)
        expected, _ = model.predict(norm.normalize_obs(obs), deterministic=True)
        np.testing.assert_allclose(expected, victim.act(obs), atol=1e-5)  # float32 SB3 vs float64 victim
        with pytest.raises(UserError, match="has VecNormalize statistics beside it"):  # not raw, silently
            load_victim(f"sb3:{tmp_path / 'agent.zip'}")
        exported = load_victim(f"sb3:{tmp_path / 'agent.zip'}", vecnormalize=written[1])
        np.testing.assert_allclose(exported.act(obs), victim.act(obs), atol=1e-5)
    else:
        expected, _ = model.predict(obs, deterministic=True)
        np.testing.assert_array_equal(expected, victim.act(obs))
        assert all(torch_equal(model.q_net_target.state_dict()[k], v) for k, v in model.q_net.state_dict().items())
    assert model.num_timesteps == MANIFEST[name]["total_timesteps"]


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def test_zoo_export_never_overwrites(tmp_path):
    from rlgauntlet.training.export import export_sb3

    foreign = tmp_path / "agent.zip"
    foreign.write_bytes(b"mine")
    with pytest.raises(UserError, match="exists"):
        export_sb3("cartpole-ppo", foreign)
    assert foreign.read_bytes() == b"mine"
    with pytest.raises(UserError, match="ensemble of 5 agents"):
        export_sb3("cartpole-dqn-ensemble", tmp_path / "e.zip")
