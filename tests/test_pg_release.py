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


#: gym's MuJoCo env classes by module, as a release's env object names them
GYM_TASKS = {"hopper": "HopperEnv", "walker2d": "Walker2dEnv", "half_cheetah": "HalfCheetahEnv", "ant": "AntEnv"}


def _fake_release_modules() -> dict[str, types.ModuleType]:
    """Stand-ins for the release's classes, with their module paths, so that pickle writes the
    same globals the released files hold; removed before any load (nothing of them is imported)."""
    custom_env = types.ModuleType("policy_gradients.custom_env")
    torch_utils = types.ModuleType("policy_gradients.torch_utils")
    time_limit = types.ModuleType("gym.wrappers.time_limit")
    tasks = {f"gym.envs.mujoco.{module}": types.ModuleType(f"gym.envs.mujoco.{module}") for module in GYM_TASKS}
    for module, names in ((custom_env, ["Env"]), (torch_utils, ["RunningStat", "ZFilter", "Identity", "RewardFilter"]),
                          (time_limit, ["TimeLimit"]),
                          *((tasks[f"gym.envs.mujoco.{m}"], [cls]) for m, cls in GYM_TASKS.items())):
        for name in names:
            cls = type(name, (), {})
            cls.__module__ = module.__name__
            setattr(module, name, cls)
    return {"policy_gradients": types.ModuleType("policy_gradients"), "policy_gradients.custom_env": custom_env,
            "policy_gradients.torch_utils": torch_utils, "gym": types.ModuleType("gym"),
            "gym.wrappers": types.ModuleType("gym.wrappers"), "gym.wrappers.time_limit": time_limit,
            "gym.envs": types.ModuleType("gym.envs"), "gym.envs.mujoco": types.ModuleType("gym.envs.mujoco"), **tasks}


def _release(seed: int, recurrent: bool = False, center: bool = True, scale: bool = True, clip: float | None = 10.0,
             extra: dict | None = None, n: int = 1000, task: str | None = None, mean_bias: float = 0.05) -> tuple[dict, dict]:
    """``task``: the gym MuJoCo module whose env class the file's env object wraps (e.g. ``walker2d``),
    or None for none; ``mean_bias``: the spread of ``final_mean``'s bias (large: actions beyond ±1)."""
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
    weights["final_mean.bias"] = torch.tensor(rng.normal(size=ACT) * mean_bias, dtype=torch.float32)
    if recurrent:  # CtsLSTMPolicy keeps its parent's unused MLP weights beside its own
        weights.update(_lstm_weights(rng, ACT, output_scale=0.5, output_bias_scale=0.05))
    m, s = rng.normal(size=OBS), rng.uniform(1.0, 50.0, size=OBS) * 999
    rs = tu.RunningStat()
    rs.__dict__.update(_n=n, _M=m, _S=s)
    zfilter = tu.ZFilter()
    zfilter.__dict__.update(center=center, scale=scale, clip=clip, rs=rs, prev_filter=tu.Identity(), read_only=False)
    reward_rs = tu.RunningStat()
    reward_rs.__dict__.update(_n=5, _M=np.zeros(()), _S=np.ones(()))
    reward_filter = tu.RewardFilter()
    reward_filter.__dict__.update(gamma=0.99, prev_filter=tu.Identity(), rs=reward_rs, ret=np.zeros(()), clip=10.0)
    env = ce.Env()
    time_limit = mods["gym.wrappers.time_limit"].TimeLimit()
    if task is not None:
        time_limit.__dict__.update(env=getattr(mods[f"gym.envs.mujoco.{task}"], GYM_TASKS[task])(), _max_episode_steps=1000)
    env.__dict__.update(env=time_limit, state_filter=zfilter,
                        reward_filter=reward_filter, num_features=OBS, num_actions=ACT, is_discrete=False)
    content = {"policy_model": weights, "val_model": OrderedDict(w=torch.zeros(2)), "policy_opt": {"state": {}},
               "val_opt": {"state": {}}, "envs": [env], **(extra or {})}
    plain = {k: v.double().numpy() for k, v in weights.items()}
    plain.update(mean=m, std=np.sqrt(s / (n - 1)) if n > 1 else np.abs(m), clip=clip, center=center, scale=scale)
    return content, {"plain": plain, "modules": mods, "saved": saved}


def _lstm_weights(rng, outputs: int, output_scale: float, output_bias_scale: float = 0.0) -> dict:
    """A CtsLSTMPolicy's own weights (embedding, one LSTM layer, output layer of ``outputs``)."""
    weights = {"embedding_layer.weight": torch.tensor(rng.normal(size=(HIDDEN, OBS)) * 0.3, dtype=torch.float32),
               "embedding_layer.bias": torch.tensor(rng.normal(size=HIDDEN) * 0.1, dtype=torch.float32)}
    for name, shape in (("weight_ih_l0", (4 * HIDDEN, HIDDEN)), ("weight_hh_l0", (4 * HIDDEN, HIDDEN)),
                        ("bias_ih_l0", (4 * HIDDEN,)), ("bias_hh_l0", (4 * HIDDEN,))):
        weights[f"lstm.{name}"] = torch.tensor(rng.normal(size=shape) * 0.4, dtype=torch.float32)
    weights["output_layer.weight"] = torch.tensor(rng.normal(size=(outputs, HIDDEN)) * output_scale,
                                                  dtype=torch.float32)
    weights["output_layer.bias"] = (torch.tensor(rng.normal(size=outputs) * output_bias_scale, dtype=torch.float32)
                                    if output_bias_scale else torch.zeros(outputs))
    return weights


def _write(path, content, meta, legacy: bool) -> None:
    try:
        torch.save(content, path, _use_new_zipfile_serialization=not legacy)
    finally:
        for name, module in meta["saved"].items():  # the stand-ins leave: a load must not need them
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def by_hand(plain: dict, obs: np.ndarray | None = None, x: np.ndarray | None = None) -> np.ndarray:
    """The authors' forward pass in numpy: ZFilter (center, scale, clip), tanh MLP, final_mean
    (``x``: an input already filtered)."""
    if x is not None:
        return _mlp_by_hand(plain, x)
    x = obs.astype(np.float64)
    if plain["center"]:
        x = x - plain["mean"]
    if plain["scale"]:
        x = x / (plain["std"] + 1e-8) if plain["center"] else (x - plain["mean"]) / (plain["std"] + 1e-8) + plain["mean"]
    if plain["clip"]:
        x = np.clip(x, -plain["clip"], plain["clip"])
    return _mlp_by_hand(plain, x)


def _mlp_by_hand(plain: dict, x: np.ndarray) -> np.ndarray:
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
    # the mean as the authors' evaluation sends it to env.step: not clipped to the action bounds
    np.testing.assert_allclose(victim.act(obs), expected, rtol=1e-9, atol=1e-12)
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


@pytest.mark.parametrize("n", [1, 2])
def test_a_running_stat_of_one_or_two_samples_gives_the_authors_std(tmp_path, n):
    # RunningStat.var: S / (n − 1) from the second sample on, M² for a single one
    content, meta = _release(17, n=n)
    path = tmp_path / "a.model"
    _write(path, content, meta, legacy=False)
    np.testing.assert_allclose(read_release(path).state_filter.std, meta["plain"]["std"], rtol=1e-12)
    rs = content["envs"][0].state_filter.rs
    expected = np.abs(rs._M) if n == 1 else np.sqrt(rs._S)
    np.testing.assert_allclose(meta["plain"]["std"], expected, rtol=1e-12)


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
    content, meta = _release(7)
    mlp = tmp_path / "model-ppo-hopper.model"
    _write(mlp, content, meta, legacy=False)
    walker_obs = gym.spaces.Box(-np.inf, np.inf, (17,), np.float64)
    with pytest.raises(UserError, match="observes 11 numbers and the env gives 17"):
        load_victim(f"pg:{mlp}", walker_obs, SPACES[1])
    with pytest.raises(UserError, match="does not exist"):
        load_victim(f"pg:{tmp_path / 'missing.model'}", *SPACES)


def test_the_cli_refuses_a_foreign_global_with_exit_2_and_one_line(tmp_path, cli_main):
    content, meta = _release(8, extra={"hook": os.system})
    path = tmp_path / "evil.model"
    _write(path, content, meta, legacy=True)
    proc = cli_main(["evaluate", "--agent", f"pg:{path}", "--env", "Hopper-v5", "--episodes", "1"])
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
    from rlgauntlet.envs.presets import check_env_id
    from rlgauntlet.published import catalogue, releases

    entries = releases()
    # 6 ATLA methods × 4 envs, PA-ATLA × 4, WocaR-PPO × 4 and WocaR's earlier HalfCheetah file, SA_PPO's 18
    # Hopper, Walker2d and Humanoid files but the 4 that are ATLA's (listed once), RADIAL-PPO's 3; SA-DQN's 3 and
    # WocaR-DQN's 1 per game × 2
    assert len(entries) == 58 and len({e["name"] for e in entries}) == 58
    # no file twice: a sha256, or (SA-DQN's files, only their repository's tree readable) the tree's git blob id
    assert len({e["sha256"] or e["git_blob"] for e in entries}) == 58
    # the MuJoCo releases on their own physics: gym's -v2 as MuJoCo 1.5 simulated it (envs.mujoco15)
    papers_eps = {"HopperMuJoCo15-v4": 0.075, "Walker2dMuJoCo15-v4": 0.05, "HalfCheetahMuJoCo15-v4": 0.15,
                  "AntMuJoCo15-v4": 0.15, "HumanoidMuJoCo15-v4": 0.075, "SADQN/Pong-v0": 1 / 255, "SADQN/Freeway-v0": 1 / 255}
    for e in entries:
        assert e["repository"] in catalogue()["repositories"]
        if e.get("format") == "sa_dqn":
            assert e["sha256"] is None and len(e["git_blob"]) == 40 and int(e["git_blob"], 16) >= 0
        else:
            assert len(e["sha256"]) == 64 and int(e["sha256"], 16) >= 0
        assert papers_eps[e["env"]] == pytest.approx(e["eps"], rel=1e-6)
        task = e["env"].rpartition("/")[2].split("-")[0]
        assert e["name"].endswith(task.lower().replace("mujoco15", ""))
        check_env_id(e["env"])  # a Gymnasium id, registered (the Ant and SA-DQN ones by rlgauntlet)
    readme = {e["name"]: e["readme"] for e in entries if e["readme"]}
    assert readme["ppo-hopper"] == {**readme["ppo-hopper"], "natural": 3167.3, "strongest_attack": 636.4}
    assert readme["atla-lstm-sappo-walker2d"]["strongest_attack"] == 3662.9
    assert readme["wocar-ppo-hopper"] == {**readme["wocar-ppo-hopper"], "natural": 3624, "strongest_attack": 2642}
    assert "wocar-ppo-2023-01-halfcheetah" not in readme  # the README's table is of the September 2023 files
    assert readme["median-sa-ppo-sgld-hopper"]["strongest_attack"] == 1403.3 and "best-sa-ppo-sgld-hopper" not in readme
    assert readme["median-sa-ppo-sgld-humanoid"] == {**readme["median-sa-ppo-sgld-humanoid"], "natural": 6624.0,
                                                     "strongest_attack": 6073.8}
    assert readme["median-ppo-humanoid"]["strongest_attack"] == 884.1 and "best-ppo-humanoid" not in readme


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

    assert len(json.loads(listed.stdout)["releases"]) == 58
    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", "published:sa-ppo-hopper",
                           "--env", "Hopper-v5", "--episodes", "1"], capture_output=True, text=True,
                          env={**cli_env, "RLGAUNTLET_RELEASES": str(tmp_path)})
    assert proc.returncode == 2 and "git clone https://github.com/huanzhang12/ATLA_robust_RL" in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1



# --- recurrent victims: the LSTM policies ---------------------------------------------------

def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstm_by_hand(plain: dict, obs: np.ndarray | None, h: np.ndarray, c: np.ndarray, x: np.ndarray | None = None):
    """One step of the release's CtsLSTMPolicy in numpy: filter (of ``obs``, unless the filtered
    ``x`` is given), embedding, LSTM (gates i, f, g, o), output_layer on the new h. Returns
    (mean, h, c)."""
    if x is None:
        x = np.clip((obs - plain["mean"]) / (plain["std"] + 1e-8), -plain["clip"], plain["clip"])
    e = x @ plain["embedding_layer.weight"].T + plain["embedding_layer.bias"]
    z = e @ plain["lstm.weight_ih_l0"].T + plain["lstm.bias_ih_l0"] + h @ plain["lstm.weight_hh_l0"].T \
        + plain["lstm.bias_hh_l0"]
    i, f, g, o = np.split(z, 4, axis=-1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    h = _sigmoid(o) * np.tanh(c)
    return h @ plain["output_layer.weight"].T + plain["output_layer.bias"], h, c


@pytest.fixture()
def lstm_file(tmp_path):
    content, meta = _release(6, recurrent=True)
    path = tmp_path / "model-lstm-ppo-hopper.model"
    _write(path, content, meta, legacy=True)
    return path, meta["plain"]


def test_an_lstm_agent_acts_as_the_release_carrying_its_state_and_resetting_it_each_episode(lstm_file):
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env

    path, plain = lstm_file
    victim = load_victim(f"pg:{path}", *_hopper_spaces())
    assert victim.recurrent and victim.description["policy"] == "CtsLSTMPolicy"
    steps: dict[int, list] = {}
    records = evaluate_episodes(lambda: make_env("Hopper-v5"), victim, None, [0, 1, 2], seed=0, n_envs=1,
                                on_transition=lambda ep, obs, action, nxt: steps.setdefault(ep, []).append((obs, action)))
    assert [r.episode for r in records] == [0, 1, 2]
    for episode, transitions in steps.items():
        h = c = np.zeros(HIDDEN)  # a fresh memory at every episode's start, though the env slot is reused
        for obs, action in transitions:
            mean, h, c = lstm_by_hand(plain, obs, h, c)
            np.testing.assert_allclose(action, np.clip(mean, -1.0, 1.0).astype(np.float32), rtol=1e-5, atol=1e-6)
    assert max(len(t) for t in steps.values()) > 3  # the memory was carried over several steps
    side_by_side = evaluate_episodes(lambda: make_env("Hopper-v5"), victim, None, [0, 1, 2], seed=0, n_envs=3)
    assert sorted((r.episode, r.episode_return, r.length) for r in side_by_side) == \
        sorted((r.episode, r.episode_return, r.length) for r in records)  # each env's own state


def _hopper_spaces():
    env = gym.make("Hopper-v5")
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def test_a_gradient_attack_on_an_lstm_agent_holds_its_state_and_its_budget(lstm_file):
    from rlgauntlet.common.seeding import BatchRNG
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env
    from rlgauntlet.threats import parse_threat

    path, _ = lstm_file
    victim = load_victim(f"pg:{path}", *_hopper_spaces())
    x = victim.preprocess(np.random.default_rng(0).normal(size=(4, OBS)))
    state = [(torch.randn(HIDDEN, dtype=torch.float64), torch.randn(HIDDEN, dtype=torch.float64)) for _ in range(4)]
    victim.use_state(state)
    before = victim.forward(x).mean.clone()
    attack = parse_threat("pgd:objective=maxdiff,eps=0.1")
    with torch.enable_grad():
        adv = attack.perturb(x, victim, BatchRNG([torch.Generator().manual_seed(i) for i in range(4)]))
    # bit-exact is the property: the same forward on the same input in one process gives the same
    # bits unless the attack's forwards moved the held state
    assert torch.equal(victim.forward(x).mean, before)
    assert (adv - x).abs().max() <= 0.1 + 1e-9 and not torch.allclose(victim.forward(adv).mean, before)
    clean = evaluate_episodes(lambda: make_env("Hopper-v5"), victim, None, [0, 1], 0, 2)
    attacked = evaluate_episodes(lambda: make_env("Hopper-v5"), victim, parse_threat("pgd:objective=maxdiff,eps=0.1"),
                                 [0, 1], 0, 2)
    assert max(r.linf_max for r in attacked) <= 0.1 + 1e-9 and any(r.action_changes for r in attacked)
    assert [r.episode_return for r in clean] != [r.episode_return for r in attacked]


def test_what_cannot_handle_a_recurrent_agent_says_so_in_one_line(lstm_file, tmp_path):
    from rlgauntlet.bounds.ibp import ibp
    from rlgauntlet.gauntlet.plan import plan_gauntlet
    from rlgauntlet.threats import parse_threat

    path, _ = lstm_file
    victim = load_victim(f"pg:{path}", *_hopper_spaces())
    with pytest.raises(UserError, match="cannot attack a recurrent \\(LSTM\\) agent: its rollouts"):
        parse_threat("rand_u:eps=0.1,m=2,target=height:0").check_victim(victim)
    with pytest.raises(UserError, match="an LSTM policy is not a chain of layers"):
        ibp(victim, torch.zeros(1, OBS, dtype=torch.float64), 0.1)
    plan = plan_gauntlet(f"pg:{path}", "Hopper-v5", level="quick", store=tmp_path / "g.sqlite")
    assert "robust-sarsa" not in {t.method for t in plan.tasks} and {t.method for t in plan.tasks} == {"paad", "sarl"}
    assert any("robust-sarsa" in row["spec"] and "recurrent" in row["reason"] for row in plan.skipped)
    # mujoco v5: an LSTM director of each method beside the memoryless ones, a folder and a row of its own
    lstm = [t for t in plan.tasks if t.recurrent]
    assert [(t.method, t.setting, t.select) for t in lstm] == [("paad", "default", "best"), ("sarl", "default", "best")]
    assert all(t.folder.endswith("steps") and "-best-lstm-" in t.folder for t in lstm)
    assert len({t.folder for t in plan.tasks}) == len(plan.tasks) == 6
    assert {plan.labels[s] for s in plan.learned} >= {"paad@lstm:eps=0.075", "sarl@lstm:eps=0.075"}
    assert not plan.lstm_directors  # the protocol's own rule, not an option


def test_an_attacker_trains_against_an_lstm_agent_with_a_state_per_env(lstm_file):
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.threats.learned.actor import AttackActor
    from rlgauntlet.training.attackers.attack_mdp import AttackVecEnv

    path, _ = lstm_file
    victim = load_victim(f"pg:{path}", *_hopper_spaces())
    venv = AttackVecEnv(make_train_vec_env("Hopper-v5", 2, 0), victim, AttackActor("sarl", 0.1))
    venv.reset()
    # exact: a fresh state is made as zeros, not computed (any arithmetic on it would be a bug)
    assert all(torch.equal(h, torch.zeros(HIDDEN, dtype=torch.float64)) for h, _ in venv._states)
    finished = 0
    for _ in range(300):
        _, _, dones, _ = venv.step(np.random.default_rng(0).uniform(-1, 1, size=(2, OBS)))
        for i in np.flatnonzero(dones):
            finished += 1
            # exact: a new episode's memory is made as zeros, not computed
            assert torch.equal(venv._states[i][0], torch.zeros(HIDDEN, dtype=torch.float64))
        moving = [i for i in range(2) if not dones[i]]
        assert all(venv._states[i][0].abs().sum() > 0 for i in moving)
    assert finished > 0 and venv.core.steps == 600
    venv.close()


def test_an_lstm_adversary_carries_its_own_memory_through_the_episode(tmp_path):
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env
    from rlgauntlet.threats import parse_threat

    rng = np.random.default_rng(14)
    # a CtsLSTMPolicy from the 11 state numbers to 11 perturbations
    adversary = OrderedDict(log_stdev=torch.zeros(OBS), **_lstm_weights(rng, OBS, output_scale=2.0))
    content, meta = _release(12, extra={"adversary_policy_model": adversary})  # an MLP agent, an LSTM adversary
    path = tmp_path / "attack-ppo-hopper.model"
    _write(path, content, meta, legacy=False)
    victim = load_victim(f"pg:{path}", *_hopper_spaces())
    threat = parse_threat(f"released_attacker:path={path},eps=0.075")
    assert threat.recurrent and not victim.recurrent
    seen: dict[int, list] = {}
    records = evaluate_episodes(lambda: make_env("Hopper-v5"), victim, threat, [0, 1], 0, 2,
                                on_transition=lambda ep, obs, action, nxt: seen.setdefault(ep, []).append((obs, action)))
    assert 0 < max(r.linf_max for r in records) <= 0.075 + 1e-9
    plain = {k: v.double().numpy() for k, v in adversary.items()}
    plain.update({k: meta["plain"][k] for k in ("mean", "std", "clip")})  # it reads the agent's filtered state
    for transitions in seen.values():
        h = c = np.zeros(HIDDEN)  # the adversary's memory starts at zero in every episode
        for obs, action in transitions:
            x = np.clip((obs - plain["mean"]) / (plain["std"] + 1e-8), -10.0, 10.0)
            direction, h, c = lstm_by_hand(plain, obs, h, c)
            expected = by_hand(meta["plain"], x=x + 0.075 * np.clip(direction, -1.0, 1.0))
            np.testing.assert_allclose(action, np.clip(expected, -1, 1).astype(np.float32), rtol=1e-5, atol=1e-6)
    assert max(len(t) for t in seen.values()) > 3


def test_a_published_agents_plan_reports_the_authors_attacker_beside_the_worst_case(tmp_path, monkeypatch):
    from rlgauntlet import published
    from rlgauntlet.common.hashing import sha256_file
    from rlgauntlet.gauntlet.plan import plan_gauntlet

    rng = np.random.default_rng(15)
    adversary = OrderedDict(log_stdev=torch.zeros(OBS))
    adversary["affine_layers.0.weight"] = torch.tensor(rng.normal(size=(HIDDEN, OBS)), dtype=torch.float32)
    adversary["affine_layers.0.bias"] = torch.zeros(HIDDEN)
    adversary["final_mean.weight"] = torch.tensor(rng.normal(size=(OBS, HIDDEN)), dtype=torch.float32)
    adversary["final_mean.bias"] = torch.zeros(OBS)
    clone = tmp_path / "ATLA_robust_RL"
    clone.mkdir()
    content, meta = _release(16)
    _write(clone / "model.model", content, meta, legacy=False)
    content, meta = _release(16, extra={"adversary_policy_model": adversary})
    _write(clone / "attack.model", content, meta, legacy=False)
    entry = {"name": "test-hopper", "repository": "huanzhang12/ATLA_robust_RL", "path": "model.model",
             "sha256": sha256_file(clone / "model.model"), "method": "ppo", "policy": "mlp", "env": "Hopper-v5",
             "eps": 0.075, "attacker": {"path": "attack.model", "sha256": sha256_file(clone / "attack.model")}}
    fake = {**published.catalogue(), "releases": [entry]}
    monkeypatch.setattr(published, "catalogue", lambda: fake)
    monkeypatch.setenv("RLGAUNTLET_RELEASES", str(tmp_path))
    plan = plan_gauntlet("published:test-hopper", "Hopper-v5", level="quick", store=tmp_path / "g.sqlite")
    [spec] = plan.authors
    assert spec.startswith("released_attacker:path=") and spec.endswith(",eps=0.075")
    assert plan.labels[spec] == "authors' attacker" and spec in plan.parsed  # parsed once, with the plan's
    from rlgauntlet.gauntlet.outcome import Outcome

    assert spec not in Outcome(plan).adversarial  # beside the worst case, not in it: the protocol is every agent's


def test_the_board_page_draws_published_agents_against_their_papers_numbers(tmp_path):
    from rlgauntlet.experiments.store import ResultsStore, run_key
    from rlgauntlet.gauntlet.leaderboard import leaderboard
    from rlgauntlet.report.leaderboard import render_leaderboard

    path = tmp_path / "board.sqlite"
    store = ResultsStore(path)
    for agent, method, clean, worst in (("published:sa-ppo-hopper", "SA-PPO (released)", 3441.0, 900.0),
                                         ("zoo:hopper-sa-ppo", "SA-PPO (zoo)", 3358.0, 700.0)):
        meta = {"protocol": "mujoco", "version": 4, "level": "standard", "env": "Hopper-v5", "agent": agent,
                "sha256": agent, "method": method}
        run = store.create_run(run_key(meta), meta, kind="gauntlet")
        store.add_metric(run, "worst_case@0.075", worst)
        store.add_metric(run, "clean_return", clean)
    store.close()
    board = leaderboard([path])
    members = {m["agent"]: m for row in board["boards"][0]["rows"] for m in row["members"]}
    assert members["published:sa-ppo-hopper"]["paper"]["strongest_attack"] == 1076.3
    assert members["zoo:hopper-sa-ppo"]["paper"] is None
    page = render_leaderboard(board, tmp_path / "board.html").read_text()
    assert page.count('<figure class="papers"><img') == 1


def test_an_lstm_agent_under_an_lstm_adversary_moves_each_memory_as_the_release_does(tmp_path):
    """The release's evaluation (``ATTACK_METHOD=advpolicy`` on an LSTM agent): the adversary's
    memory reads the clean filtered state, the agent's memory the perturbed state it acted on,
    both zero at each episode's start. Swapping the two inputs, or advancing either memory twice
    (or not at all) in a step, changes the actions checked here."""
    from rlgauntlet.engine.rollout import evaluate_episodes
    from rlgauntlet.envs import make_env
    from rlgauntlet.threats import parse_threat

    rng = np.random.default_rng(16)
    adversary = OrderedDict(log_stdev=torch.zeros(OBS), **_lstm_weights(rng, OBS, output_scale=2.0))
    content, meta = _release(6, recurrent=True, extra={"adversary_policy_model": adversary})
    path = tmp_path / "attack-lstm-ppo-hopper.model"
    _write(path, content, meta, legacy=False)
    victim = load_victim(f"pg:{path}", *_hopper_spaces())
    threat = parse_threat(f"released_attacker:path={path},eps=0.075")
    assert threat.recurrent and victim.recurrent
    seen: dict[int, list] = {}
    evaluate_episodes(lambda: make_env("Hopper-v5"), victim, threat, [0, 1], 0, 2,
                      on_transition=lambda ep, obs, action, nxt: seen.setdefault(ep, []).append((obs, action)))
    agent = meta["plain"]
    attacker = {k: v.double().numpy() for k, v in adversary.items()}
    attacker.update({k: agent[k] for k in ("mean", "std", "clip")})
    for transitions in seen.values():
        zeros = np.zeros(HIDDEN)
        (h_adv, c_adv), (h_agent, c_agent) = (zeros, zeros), (zeros, zeros)
        for obs, action in transitions:
            x = np.clip((obs - agent["mean"]) / (agent["std"] + 1e-8), -10.0, 10.0)
            direction, h_adv, c_adv = lstm_by_hand(attacker, obs, h_adv, c_adv)
            mean, h_agent, c_agent = lstm_by_hand(agent, None, h_agent, c_agent,
                                                  x=x + 0.075 * np.clip(direction, -1.0, 1.0))
            np.testing.assert_allclose(action, np.clip(mean, -1.0, 1.0).astype(np.float32), rtol=1e-5, atol=1e-6)
    assert max(len(t) for t in seen.values()) > 3


# --- hardening v4: scored as the authors score, on the task the file names, malformed files refused ---------

def _cheetah_release(tmp_path, monkeypatch, task: str | None = "half_cheetah", mean_bias: float = 3.0):
    """A HalfCheetah-sized release (17 observations, 6 actions) whose mean lies far outside ±1."""
    monkeypatch.setattr(sys.modules[__name__], "OBS", 17)
    monkeypatch.setattr(sys.modules[__name__], "ACT", 6)
    content, meta = _release(21, task=task, mean_bias=mean_bias)
    path = tmp_path / "model-ppo-halfcheetah.model"
    _write(path, content, meta, legacy=False)
    return path, meta["plain"]


def test_a_release_is_scored_on_its_unclipped_mean_as_the_authors_evaluation_sends_it(tmp_path, monkeypatch):
    """policy_gradients sends the raw mean to env.step: MuJoCo clamps the control for the physics,
    Gymnasium charges the control cost on the action as given. The engine's return equals a hand
    loop that steps the unclipped mean; the clipped loop has the same trajectory (same forward
    reward) and a return higher by exactly 0.1·Σ(‖a‖² − ‖clip(a)‖²), HalfCheetah's control cost."""
    from rlgauntlet.envs import make_env, resolve_preset
    from rlgauntlet.experiments.evaluate import evaluate

    path, plain = _cheetah_release(tmp_path, monkeypatch)
    report = evaluate(f"pg:{path}", "HalfCheetah-v5", episodes=1, seed=3, n_envs=1, impact=False)
    engine_return = report.evaluations[0]["returns"][0]

    def hand_loop(clip: bool) -> tuple[float, float, float]:
        env = make_env("HalfCheetah-v5", resolve_preset("HalfCheetah-v5", None))
        obs, _ = env.reset(seed=3)
        total, forward, excess = 0.0, 0.0, 0.0
        for _ in range(1000):
            action = by_hand(plain, obs[None])[0].astype(np.float32)
            sent = np.clip(action, -1.0, 1.0) if clip else action
            obs, reward, terminated, truncated, info = env.step(sent)
            total += reward
            forward += info["reward_forward"]
            excess += 0.1 * float(np.sum(action.astype(np.float64) ** 2) - np.sum(np.clip(action, -1, 1).astype(np.float64) ** 2))
            if terminated or truncated:
                break
        env.close()
        return total, forward, excess

    unclipped, forward, excess = hand_loop(clip=False)
    clipped, forward_clipped, _ = hand_loop(clip=True)
    assert excess > 100.0  # the case matters: far more than rounding
    assert engine_return == pytest.approx(unclipped, rel=1e-6, abs=1e-6)
    assert forward == pytest.approx(forward_clipped, rel=1e-9)  # MuJoCo clamps: one trajectory
    assert clipped - unclipped == pytest.approx(excess, rel=1e-4)


def test_an_sb3_agent_keeps_sb3s_clip():
    """SB3's predict clips a Gaussian policy's action to the bounds: the zoo's agents are scored so."""
    from rlgauntlet.victims.base import PolicyOutput, Victim

    class Linear(Victim):
        kind, budget_space = "gaussian", "raw"
        observation_space = gym.spaces.Box(-1, 1, (2,))
        action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

        def preprocess(self, obs):
            return torch.as_tensor(obs)

        def forward(self, x):
            return PolicyOutput("gaussian", mean=x * 5.0, log_std=torch.zeros_like(x))

    victim = Linear()
    np.testing.assert_allclose(victim.act(np.array([[0.5, -0.1]])), [[1.0, -0.5]])
    victim.clip_actions = False
    np.testing.assert_allclose(victim.act(np.array([[0.5, -0.1]])), [[2.5, -0.5]])


def test_a_release_is_refused_on_another_task_with_spaces_of_the_same_size(tmp_path, monkeypatch, cli_main):
    """A Walker2d release on HalfCheetah-v5 (both 17 observations and 6 actions) would run and store
    a number as that agent's; refused in one line naming the task, unless --other-env."""
    from rlgauntlet.experiments.agents import load_for_env

    monkeypatch.setattr(sys.modules[__name__], "OBS", 17)
    monkeypatch.setattr(sys.modules[__name__], "ACT", 6)
    content, meta = _release(22, task="walker2d")
    path = tmp_path / "model-walker.model"
    _write(path, content, meta, legacy=False)
    victim, _ = load_for_env(f"pg:{path}", "Walker2d-v5")
    assert victim.trained_for == ("Walker2d",) and victim.description["trained_on"] == "Walker2dEnv"
    load_for_env(f"pg:{path}", "Walker2d-v4")  # another version of the same task is the same task
    with pytest.raises(UserError, match=r"trained on Walker2d .* HalfCheetah-v5 is another task.*--other-env"):
        load_for_env(f"pg:{path}", "HalfCheetah-v5")
    victim, _ = load_for_env(f"pg:{path}", "HalfCheetah-v5", other_env=True)
    assert victim.trained_for == ("Walker2d",)
    store = tmp_path / "s.sqlite"
    proc = cli_main(["evaluate", "--agent", f"pg:{path}", "--env", "HalfCheetah-v5", "--episodes", "1", "--store",
                     str(store)])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Walker2d" in lines[0], proc.stderr
    assert not store.exists()
    # a file that names no task is not refused (nothing to check against)
    content, meta = _release(23, task=None)
    bare = tmp_path / "bare.model"
    _write(bare, content, meta, legacy=False)
    assert load_for_env(f"pg:{bare}", "HalfCheetah-v5")[0].trained_for is None


def _malformed(content: dict, case: str) -> dict:
    policy = content["policy_model"]
    if case == "no log_stdev":
        del policy["log_stdev"]
    elif case == "no first layer":
        del policy["affine_layers.0.weight"]
    elif case == "policy is a list":
        content["policy_model"] = list(policy.values())
    elif case == "mlp shape":
        policy["affine_layers.1.weight"] = torch.zeros(HIDDEN, HIDDEN + 1)
    elif case == "bias shape":
        policy["affine_layers.0.bias"] = torch.zeros(HIDDEN + 2)
    elif case == "final shape":
        policy["final_mean.weight"] = torch.zeros(ACT + 1, HIDDEN)
    elif case == "lstm shape":
        policy["lstm.weight_hh_l0"] = torch.zeros(4 * HIDDEN, HIDDEN + 1)
    elif case == "lstm gates":
        policy["lstm.weight_ih_l0"] = torch.zeros(3 * HIDDEN, HIDDEN)
    elif case == "output shape":
        policy["output_layer.weight"] = torch.zeros(ACT, HIDDEN - 1)
    elif case == "non-tensor weight":
        policy["final_mean.bias"] = [0.0] * ACT
    elif case == "integer weight":
        policy["final_mean.bias"] = torch.zeros(ACT, dtype=torch.int64)
    elif case == "filter size":
        content["envs"][0].state_filter.rs._M = np.zeros(OBS + 1)
        content["envs"][0].state_filter.rs._S = np.ones(OBS + 1)
    elif case == "no running stat":
        del content["envs"][0].state_filter.rs.__dict__["_n"]
    elif case == "empty envs":
        content["envs"] = []
    return content


MALFORMED = ["no log_stdev", "no first layer", "policy is a list", "mlp shape", "bias shape", "final shape",
             "lstm shape", "lstm gates", "output shape", "non-tensor weight", "integer weight", "filter size",
             "no running stat", "empty envs"]


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_release_is_one_line_naming_the_file_and_what_is_wrong(tmp_path, case):
    content, meta = _release(31, recurrent=case.startswith(("lstm", "output")))
    path = tmp_path / "model-bad.model"
    _write(path, _malformed(content, case), meta, legacy=False)
    with pytest.raises(UserError) as err:
        load_victim(f"pg:{path}", *SPACES)
    message = str(err.value)
    assert str(path) in message and "\n" not in message


def test_the_cli_refuses_malformed_releases_before_writing_anything(tmp_path, cli_env):
    content, meta = _release(32, recurrent=True)
    path = tmp_path / "model-bad.model"
    _write(path, _malformed(content, "lstm shape"), meta, legacy=True)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", f"pg:{path}", "--env",
                           "Hopper-v5", "--episodes", "1", "--out", str(out / "r.json")], capture_output=True, text=True,
                          env=cli_env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "lstm.weight_hh_l0" in lines[0], proc.stderr
    assert not out.exists()


def test_a_torchscript_archive_given_as_pg_is_refused_before_torch_opens_it(tmp_path, monkeypatch):
    scripted = torch.jit.script(torch.nn.Linear(OBS, ACT))
    path = tmp_path / "agent.pt"
    torch.jit.save(scripted, str(path))
    opened = []
    monkeypatch.setattr(torch.jit, "load", lambda *a, **k: opened.append(a))
    monkeypatch.setattr(torch, "load", lambda *a, **k: opened.append(a))
    with pytest.raises(UserError, match=r"TorchScript archive.*torchscript:"):
        read_release(path)
    assert opened == []


@pytest.mark.parametrize("name", ["load", "save", "set_default_dtype"])
def test_the_release_unpickler_hands_out_no_torch_global_but_storages(tmp_path, name):
    """A release naming ``torch.load`` (or any torch global that is not a storage class) is refused
    by name, and the global is never called."""
    called = []

    class Hook:
        def __reduce__(self):
            return getattr(torch, name), ("never",)

    content, meta = _release(33, extra={"hook": Hook()})
    path = tmp_path / "evil.model"
    _write(path, content, meta, legacy=False)
    with pytest.raises(UserError, match=rf"holds the global torch[\w.]*\.{name}\b") as err:
        read_release(path)
    assert "\n" not in str(err.value) and called == []


def test_other_env_travels_with_the_agent_spec_into_sweep_and_board_cells(tmp_path, monkeypatch):
    """`other_env: true` in a sweep or board entry is honoured where the work is loaded (a cell's
    load options), and absent from every other agent's options (their cells stay as they were)."""
    from rlgauntlet.experiments.agents import AgentSpec, load_for_env

    monkeypatch.setattr(sys.modules[__name__], "OBS", 17)
    monkeypatch.setattr(sys.modules[__name__], "ACT", 6)
    content, meta = _release(24, task="walker2d")
    path = tmp_path / "model-walker.model"
    _write(path, content, meta, legacy=False)
    refused = AgentSpec(agent=f"pg:{path}")
    assert "other_env" not in refused.load_options()
    with pytest.raises(UserError, match="--other-env"):
        load_for_env(refused.agent, "HalfCheetah-v5", **refused.load_options())
    meant = AgentSpec(agent=f"pg:{path}", other_env=True)
    assert meant.load_options()["other_env"] is True
    victim, _ = load_for_env(meant.agent, "HalfCheetah-v5", **meant.load_options())  # as a cell loads it
    assert victim.trained_for == ("Walker2d",)
    assert meant.load("HalfCheetah-v5")[0].trained_for == ("Walker2d",)


@pytest.mark.slow
def test_every_local_release_is_the_kind_of_policy_the_catalogue_lists():
    """The catalogue's ``policy`` (what ``published list`` shows, and what a user reads to know
    whether the protocol will train LSTM directors against it) against what the loader finds in
    each file present in the user's clones. WocaR-PPO's HalfCheetah and Ant files are LSTM
    policies (``history_length`` 10 in their configs) and were listed as MLP until 2026-12-01.
    Skipped where no clone is present (CI has none: the files are never downloaded here)."""
    from rlgauntlet.experiments.agents import AgentSpec
    from rlgauntlet.published import local_problem, releases

    present = [e for e in releases() if e["policy"] in ("mlp", "lstm") and local_problem(e) is None]
    if not present:
        pytest.skip("no release file in $RLGAUNTLET_RELEASES (rlgauntlet published fetch --run clones them)")
    wrong = []
    for entry in present:
        victim, _ = AgentSpec(agent=f"published:{entry['name']}").load(entry["env"])
        if victim.recurrent != (entry["policy"] == "lstm"):
            wrong.append((entry["name"], entry["policy"], victim.description.get("policy")))
    assert wrong == []
