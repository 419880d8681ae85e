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
SLOW_ENVS = ("NoFrameskip",)


def _params():
    for name, entry in sorted(MANIFEST.items()):
        marks = [pytest.mark.slow] if any(s in entry["env"] for s in SLOW_ENVS) else []
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
    for key in ("command", "seed"):
        assert key in entry
    for item in entry.get("members", [entry]):  # an ensemble records each member's file, sha256 and seed
        assert {"sha256", "file", "seed"} <= set(item) or item is entry and {"sha256", "file"} <= set(item)


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
