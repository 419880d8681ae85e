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
SLOW_ENVS = ("NoFrameskip", "dm_control/")
#: the fast set keeps one dm_control agent (the cheapest), so the [dmc] path is checked in CI
FAST_ANYWAY = ("dmc-cartpole-balance-sac",)


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

    from rlgauntlet.victims.sb3 import sha256_file
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
