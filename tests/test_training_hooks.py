"""Training hooks: seeds, fine-tuning, our own SB3 subclasses as presets, training under a
threat (after VecNormalize), multi-file zoo entries, the zoo in a non-editable install."""

import json
import os
from pathlib import Path
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO

from rlgauntlet.errors import UserError
from rlgauntlet.training.algorithms import algorithm_class, base_algorithm, register_algorithm
from rlgauntlet.training.recipes import PRESETS, TrainPreset, linear_schedule, recipe_digest, register_preset
from rlgauntlet.training.sb3_train import train_preset
from rlgauntlet.zoo import zoo_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CountingPPO(PPO):
    """An SB3 subclass as a preset's algorithm: counts its gradient phases."""

    trains = 0

    def train(self) -> None:
        CountingPPO.trains += 1
        super().train()


def _small(name, **kw):
    base = dict(name=name, env_id="CartPole-v1", algo="ppo", total_timesteps=512, n_envs=2, seed=0,
                hyperparams=dict(policy="MlpPolicy", n_steps=128, batch_size=64, n_epochs=1,
                                 policy_kwargs=dict(net_arch=[16])),
                target_return=0.0, checkpoint_every=256)
    return TrainPreset(**{**base, **kw})


@pytest.fixture()
def temp_zoo(tmp_path, monkeypatch):
    zoo = tmp_path / "zoo"
    shutil.copytree(zoo_dir(), zoo)
    monkeypatch.setenv("RLGAUNTLET_ZOO", str(zoo))
    return zoo


def test_subclass_preset_trains_registers_and_loads_as_its_sb3_base(tmp_path, temp_zoo):
    from rlgauntlet.training.register import register_zoo_agent
    from rlgauntlet.victims import load_victim

    register_algorithm("counting_ppo", CountingPPO)
    register_preset(_small("test-counting", algo="counting_ppo"))
    assert algorithm_class("counting_ppo") is CountingPPO and base_algorithm("counting_ppo") == "ppo"
    CountingPPO.trains = 0
    ckpt = train_preset("test-counting", tmp_path / "run", log=lambda s: None, seed=5)
    assert CountingPPO.trains == 2  # 512 steps in rollouts of 2 × 128
    assert json.loads((ckpt / "progress.json").read_text())["seed"] == 5
    entry = register_zoo_agent("test-counting", ckpt, n_envs=2, zoo_name="counting", command="rlgauntlet train --preset test-counting --seed 5")
    assert entry["algorithm"] == "ppo" and entry["trainer"] == "counting_ppo" and entry["seed"] == 5
    assert entry["preset"] == "test-counting" and entry["recipe_sha256"] == recipe_digest("test-counting")  # pinned
    victim = load_victim("zoo:counting")
    assert victim.kind == "categorical"
    del PRESETS["test-counting"]


def test_seed_changes_the_run_and_same_seed_repeats_it(tmp_path):
    register_preset(_small("test-seed", total_timesteps=256))
    weights = {}
    for run, seed in (("a", 1), ("b", 1), ("c", 2)):
        ckpt = train_preset("test-seed", tmp_path / run, log=lambda s: None, seed=seed)
        weights[run] = torch.load(ckpt / "policy.pt")
    same = all(torch.equal(weights["a"][k], weights["b"][k]) for k in weights["a"])
    differ = any(not torch.equal(weights["a"][k], weights["c"][k]) for k in weights["a"])
    assert same and differ
    del PRESETS["test-seed"]


def test_init_from_loads_the_agents_weights_and_refuses_a_misfit(tmp_path):
    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.training.kit import build_model, init_from_agent
    from rlgauntlet.victims import load_victim

    preset = PRESETS["cartpole-ppo"]
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = build_model(preset, env, "cpu")
    record = init_from_agent(model, env, "zoo:cartpole-ppo", preset)
    zoo_policy = load_victim("zoo:cartpole-ppo", precision="float32").policy
    for (k, a), b in zip(model.policy.state_dict().items(), zoo_policy.state_dict().values()):
        assert torch.equal(a, b), k
    assert len(record["sha256"]) == 64
    with pytest.raises(UserError, match="does not fit the PPO policy of preset cartpole-ppo"):
        init_from_agent(build_model(preset, env, "cpu"), env, "zoo:cartpole-dqn", preset)


def test_threat_acts_after_vecnormalize_in_normalized_units():
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.threats import parse_threat
    from rlgauntlet.training.threat_env import ThreatVecEnv

    norm = VecNormalize(make_vec_env("CartPole-v1", n_envs=4, seed=0), norm_reward=False)
    norm.obs_rms.mean[:] = [1.0, -1.0, 0.5, 2.0]  # statistics far from identity: units matter
    norm.obs_rms.var[:] = [4.0, 0.25, 9.0, 1.0]
    norm.training = False
    env = ThreatVecEnv(norm, parse_threat("random:eps=0.05"), seed=0)  # ε·sign(N(0, I)): |δ| = ε everywhere
    env.attach(PPO("MlpPolicy", env, n_steps=64, seed=0))
    seen = env.reset()
    clean = norm.normalize_obs(norm.get_original_obs())
    np.testing.assert_allclose(np.abs(seen - clean), 0.05, rtol=1e-4)  # before normalisation it would be 0.05/σ
    env.step(np.zeros(4, dtype=int))
    assert env.perturbed_steps == env.total_steps == 8


def test_train_under_threat_records_what_was_applied(tmp_path):
    register_preset(_small("test-threat", total_timesteps=256, normalize=True))
    ckpt = train_preset("test-threat", tmp_path / "run", log=lambda s: None, threat="uniform_noise:eps=0.1,p=0.5")
    progress = json.loads((ckpt / "progress.json").read_text())
    applied = progress["threat_applied"]
    assert progress["threat"] == "uniform_noise:eps=0.1,p=0.5" and 0.1 - 1e-6 >= applied["linf_max"] > 0.09
    assert abs(applied["perturbed_steps"] / applied["steps"] - 0.5) < 0.1 and (ckpt / "vecnormalize.pkl").exists()
    with pytest.raises(UserError, match="resume it with the same --seed and --threat"):
        train_preset("test-threat", tmp_path / "run", log=lambda s: None, total_timesteps=512)
    with pytest.raises(UserError, match="takes observation threats; action_noise:std=0.1 acts on the action"):
        train_preset("test-threat", tmp_path / "other", log=lambda s: None, threat="action_noise:std=0.1")
    del PRESETS["test-threat"]


def test_cli_train_with_a_changed_recipe_needs_a_zoo_name(tmp_path, cli_env):
    res = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "train", "--preset", "cartpole-ppo", "--seed", "3"],
                         capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert res.returncode == 2 and "give --zoo-name NAME" in res.stderr and not (tmp_path / "runs").exists()


def sha256_file(path):
    from rlgauntlet.victims.sb3 import sha256_file as digest

    return digest(path)


def test_multi_file_entries_are_verified_and_attackers_pinned_to_their_victim(tmp_path, temp_zoo, tiny_models):
    from rlgauntlet.victims.sb3_files import write_zoo_form
    from rlgauntlet.zoo import add_zoo_entry, zoo_entry, zoo_files

    members = [(tiny_models[name], {"seed": k}) for k, name in enumerate(("dqn", "ppo", "a2c"))]
    add_zoo_entry("tiny-ensemble", {"env": "CartPole-v1", "algorithm": "dqn", "kind": "ensemble"}, members=members,
                  write_file=write_zoo_form)
    assert len(zoo_files(zoo_entry("tiny-ensemble"))) == 3
    # stored as agent files: the trained file's sha256 stays on record
    assert [m["source_sha256"] for m in zoo_entry("tiny-ensemble")["members"]] == [sha256_file(p) for p, _ in members]
    attacker = tiny_models["ppo"]
    add_zoo_entry("tiny-attacker", {"env": "CartPole-v1", "kind": "attacker"}, files={"file": attacker},
                  victim="cartpole-ppo", write_file=write_zoo_form)
    entry = zoo_entry("tiny-attacker")
    assert entry["victim"] == {"name": "cartpole-ppo", "sha256": zoo_entry("cartpole-ppo")["sha256"]}
    assert len(zoo_files(entry)) == 1
    with open(temp_zoo / "tiny-ensemble.member-1.zip", "ab") as f:
        f.write(b"x")
    with pytest.raises(UserError, match="tiny-ensemble.member-1.zip does not match its manifest sha256"):
        zoo_files(zoo_entry("tiny-ensemble"))
    manifest = json.loads((temp_zoo / "manifest.json").read_text())
    manifest["cartpole-ppo"]["sha256"] = "0" * 64  # the victim was retrained
    (temp_zoo / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="trained against cartpole-ppo with sha256"):
        zoo_files(zoo_entry("tiny-attacker"))


def _wheel(source: Path, tmp_path: Path, name: str) -> Path:
    """Build the wheel of ``source`` from a clean copy (no build/ leftovers of the working tree)."""
    import shutil

    copy = tmp_path / f"src-{name}"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".venv", ".git",
                                                                "runs", "checkpoints", "out", "benchmarks", "tests"))
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(copy), "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    assert "Deprecat" not in build.stderr + build.stdout  # no deprecation warnings of our own
    (wheel,) = wheels.glob(f"{name}-*.whl")
    return wheel


def test_the_code_wheel_is_small_and_the_zoo_is_a_wheel_of_its_own(tmp_path):
    """The core wheel carries code only (at most 2 MB, no agent file); the zoo's wheel carries the
    agents; installed side by side elsewhere, a zoo agent lists and loads; without the zoo, a
    zoo: spec is one line naming the extra."""
    import zipfile

    core = _wheel(Path(REPO), tmp_path, "rlgauntlet")
    zoo = _wheel(Path(REPO) / "zoo", tmp_path, "rlgauntlet_zoo")
    names = zipfile.ZipFile(core).namelist()
    assert core.stat().st_size <= 2 * 1024 * 1024, core.stat().st_size
    assert not [n for n in names if n.endswith(".zip") or "manifest.json" in n]
    assert "rlgauntlet_zoo/manifest.json" in zipfile.ZipFile(zoo).namelist()
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(core),
                    str(zoo)], check=True, capture_output=True)
    code = ("import rlgauntlet, rlgauntlet.zoo as z; from rlgauntlet.victims import load_victim; "
            "print(rlgauntlet.__file__); print(z.zoo_dir()); print(sorted(z.load_manifest())); "
            "print(load_victim('zoo:cartpole-ppo').act(__import__('numpy').zeros((1, 4), 'float32')))")
    env = {k: v for k, v in os.environ.items() if k != "RLGAUNTLET_ZOO"}
    env["PYTHONPATH"] = str(target)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    where, folder, names, action = res.stdout.splitlines()
    assert where.startswith(str(target)) and folder.startswith(str(target))
    assert "cartpole-ppo" in names and action in ("[0]", "[1]")
    # without the zoo (rlgauntlet_zoo made unimportable, as where it is not installed)
    missing = ("import sys; sys.modules['rlgauntlet_zoo'] = None; from rlgauntlet.cli import main; "
               "sys.argv = ['rlgauntlet', 'evaluate', '--agent', 'zoo:cartpole-ppo', '--env', 'CartPole-v1']; main()")
    res = subprocess.run([sys.executable, "-c", missing], capture_output=True, text=True, env=env, cwd=tmp_path)
    lines = [line for line in res.stderr.splitlines() if line.startswith("rlgauntlet:")]
    assert res.returncode == 2 and len(lines) == 1 and "rlgauntlet[zoo]" in lines[0], res.stderr


def test_threat_on_image_training_envs_acts_in_pixel01_units():
    """Atari frames: random:eps=2/255 moves every pixel by exactly 2 grey levels (0 where the
    [0, 1] range clips it), and the learner still gets channel-last frames."""
    from rlgauntlet.envs import make_train_vec_env
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.training.threat_env import ThreatVecEnv

    venv = make_train_vec_env("PongNoFrameskip-v4", 1, 0)
    env = ThreatVecEnv(venv, parse_threat("random:eps=2/255"), seed=0)
    env.attach(PPO("CnnPolicy", env, n_steps=64, seed=0))
    seen = env.reset()
    clean = venv.stacked_obs.stacked_obs.astype(np.float32)  # what the frame stack holds, uint8 → float
    delta = np.abs(seen - clean)
    assert seen.shape == clean.shape == (1, 84, 84, 4)
    assert np.allclose(delta.max(), 2.0, atol=1e-3)
    assert np.all(np.isclose(delta, 2.0, atol=1e-3) | np.isclose(delta, 0.0, atol=1e-3))
    assert env.linf_max == pytest.approx(2 / 255, rel=1e-4)


def test_training_leaves_nothing_in_the_users_temp_dir(tmp_path, monkeypatch):
    """SB3's default logger makes an empty SB3-<date> folder per learn() call in the temp dir;
    our trainers give it a logger that writes nowhere."""
    import tempfile

    temp = tmp_path / "user-temp"
    temp.mkdir()
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    register_preset(_small("test-quiet", total_timesteps=256))
    train_preset("test-quiet", tmp_path / "run", log=lambda s: None)
    del PRESETS["test-quiet"]
    assert list(temp.glob("SB3-*")) == []


@pytest.mark.parametrize("env_id", ["PongNoFrameskip-v4", "MinAtar/Breakout-v1"])
def test_worker_process_envs_register_their_family_and_step_as_in_process_envs(env_id):
    """SubprocVecEnv workers start without this process's Gymnasium registrations (ALE,
    MinAtar): they must make them, and then give the same observations, seed for seed."""
    from rlgauntlet.envs import make_train_vec_env

    here, there = make_train_vec_env(env_id, 2, seed=3), make_train_vec_env(env_id, 2, seed=3, subproc=True)
    try:
        steps = [(here.reset(), there.reset())]
        for _ in range(5):
            actions = np.array([1, 0])
            steps.append((here.step(actions)[0], there.step(actions)[0]))
        for a, b in steps:  # the same emulator, seeds and actions: bit-identical frames
            np.testing.assert_array_equal(a, b)
    finally:
        here.close()
        there.close()


def test_checkpoint_to_zip_writes_the_parts_checkpoint_as_the_same_policy(tmp_path):
    from rlgauntlet.training.sb3_train import checkpoint_to_zip

    ckpt = train_preset("cartpole-ppo", tmp_path / "run", total_timesteps=256, stop_at_target=False,
                        log=lambda line: None)
    (ckpt / "model.zip").unlink()  # what a lent machine returns: policy and optimizer apart
    target = checkpoint_to_zip("cartpole-ppo", tmp_path / "run", tmp_path / "model.zip")
    weights = torch.load(ckpt / "policy.pt", weights_only=True)
    loaded = PPO.load(target, device="cpu").policy.state_dict()
    assert weights.keys() == loaded.keys()
    # bit-exact on purpose: saving and loading copies the stored float32 values, it computes nothing
    for name, tensor in weights.items():
        assert torch.equal(tensor, loaded[name]), name
    with pytest.raises(UserError, match="holds no checkpoint"):
        checkpoint_to_zip("cartpole-ppo", tmp_path / "empty", tmp_path / "other.zip")


def test_the_recipe_digest_changes_with_every_setting_and_not_with_prose(monkeypatch):
    """Which wrong digest fails here: one that skips the hyperparameters, reads a schedule by its
    address (two schedules of one rate would differ) or by its name only (3e-4 and 1e-4 would
    match), leaves out an alternating preset's adversary or its agent's recipe, or counts notes."""
    import dataclasses

    from rlgauntlet.training.recipes import ATLA_PRESETS

    assert len({recipe_digest(name) for name in [*PRESETS, *ATLA_PRESETS]}) == len(PRESETS) + len(ATLA_PRESETS)
    base = recipe_digest("hopper-ppo")
    hopper = PRESETS["hopper-ppo"]
    changed = {
        "notes": dataclasses.replace(hopper, notes="other words", source="elsewhere"),
        "same schedule": dataclasses.replace(hopper, hyperparams={**hopper.hyperparams,
                                                                  "learning_rate": linear_schedule(3e-4)}),
        "other schedule": dataclasses.replace(hopper, hyperparams={**hopper.hyperparams,
                                                                   "learning_rate": linear_schedule(1e-4)}),
        "gamma": dataclasses.replace(hopper, hyperparams={**hopper.hyperparams, "gamma": 0.995}),
        "steps": dataclasses.replace(hopper, total_timesteps=2_000_000),
    }
    digests = {}
    for what, preset in changed.items():
        monkeypatch.setitem(PRESETS, "hopper-ppo", preset)
        digests[what] = recipe_digest("hopper-ppo")
    assert digests["notes"] == base and digests["same schedule"] == base
    assert len({base, digests["other schedule"], digests["gamma"], digests["steps"]}) == 4
    monkeypatch.setitem(PRESETS, "hopper-ppo", hopper)

    pool = ATLA_PRESETS["hopper-pool-pa-atla-ppo"]
    pool_digest = recipe_digest(pool.name)
    monkeypatch.setitem(ATLA_PRESETS, pool.name, dataclasses.replace(pool, adversary={**pool.adversary,
                                                                                      "learning_rate": 3e-3}))
    assert recipe_digest(pool.name) != pool_digest
    monkeypatch.setitem(ATLA_PRESETS, pool.name, dataclasses.replace(pool, push_share=0.25))
    assert recipe_digest(pool.name) != pool_digest
    monkeypatch.setitem(ATLA_PRESETS, pool.name, pool)
    monkeypatch.setitem(PRESETS, "hopper-ppo", changed["gamma"])  # the agent's recipe under the alternation
    assert recipe_digest(pool.name) != pool_digest


def test_every_pinned_zoo_recipe_is_still_its_presets_recipe():
    """A zoo agent's recorded recipe digest is its preset's current one: editing a recipe that a
    zoo agent was trained with fails here (the rule: a changed recipe gets a new preset name)."""
    manifest = json.loads((zoo_dir() / "manifest.json").read_text())
    pinned = {name: e for name, e in manifest.items() if "recipe_sha256" in e}
    assert "hopper-pool-pa-atla-ppo" in pinned
    for name, entry in pinned.items():
        assert entry["recipe_sha256"] == recipe_digest(entry["preset"]), name
