"""ATLA-PPO and PA-ATLA-PPO: the alternation schedule step by step, resume of both networks,
optimizers, counters and schedules, the adversary's budget, and refused resumes."""

from __future__ import annotations

import dataclasses
import json
import time
import zipfile

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO

from rlgauntlet.errors import UserError
from rlgauntlet.training import recipes as presets
from rlgauntlet.training.defences import atla
from rlgauntlet.training.defences.atla import LiveAdversary, train_atla
from rlgauntlet.training.recipes import ATLAPreset

ROLLOUT = 256  # the cartpole-ppo recipe: 8 envs × 32 steps


@pytest.fixture()
def tiny_presets(monkeypatch):
    """The CartPole presets with a few iterations, from scratch (no zoo agent needed)."""
    for method in ("atla", "pa_atla"):
        name = f"tiny-{method}"
        monkeypatch.setitem(presets.ATLA_PRESETS, name, ATLAPreset(
            name, "cartpole-ppo", method, eps=0.1, total_agent_steps=3 * ROLLOUT, checkpoint_every=1,
            agent_overrides={"n_epochs": 2}, adversary={"n_epochs": 2}))
    return monkeypatch


def test_the_alternation_is_one_agent_iteration_then_one_adversary_iteration(tiny_presets, tmp_path):
    calls = []
    learn = PPO.learn

    def recording(self, total_timesteps, **kwargs):
        role = "adversary" if type(self.env).__name__ == "AttackVecEnv" else "agent"
        before = self.num_timesteps
        out = learn(self, total_timesteps, **kwargs)
        calls.append((role, before, self.num_timesteps))
        return out

    tiny_presets.setattr(PPO, "learn", recording)
    started = time.time()
    ckpt = train_atla("tiny-pa_atla", tmp_path / "run", log=lambda line: None)
    assert [c[0] for c in calls] == ["agent", "adversary"] * 3
    for i, (role, before, after) in enumerate(calls):  # each call is exactly one rollout of 256 steps
        assert (before, after) == ((i // 2) * ROLLOUT, (i // 2 + 1) * ROLLOUT), (role, before, after)
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["iteration"] == 3 and progress["agent_steps"] == progress["adversary_steps"] == 3 * ROLLOUT
    assert 0 < progress["train_seconds"] < time.time() - started + 1  # wall time spent training, counted up
    assert [h["iteration"] for h in progress["history"]] == [1, 2, 3]
    assert (ckpt / "agent" / "model.zip").is_file() and (ckpt / "adversary" / "policy.pt").is_file()
    # the adversary acted in both envs, at its budget: every agent observation perturbed, by up to
    # ε exactly (PA-AD's FGSM actor steps every coordinate by ε; CartPole inputs are unbounded)
    applied = progress["history"][-1]["applied"]
    agent_side, adversary_side = applied["agent_envs"], applied["adversary_envs"]
    assert agent_side["perturbed_steps"] == agent_side["steps"] >= 3 * ROLLOUT
    assert agent_side["linf_max"] == pytest.approx(0.1, rel=1e-6)
    assert adversary_side["steps"] == 3 * ROLLOUT and adversary_side["linf_max"] == pytest.approx(0.1, rel=1e-6)
    assert adversary_side["agent_action_changed"] > 0


def test_resume_restores_both_networks_optimizers_counters_and_schedule(tiny_presets, tmp_path):
    run = tmp_path / "run"
    train_atla("tiny-atla", run, deadline=time.monotonic(), log=lambda line: None)  # stops after iteration 1
    ckpt = run / "checkpoint"
    first = json.loads((ckpt / "progress.json").read_text())
    assert first["iteration"] == 1 and not first["finished"]
    saved = {part: torch.load(ckpt / part / "policy.pt", weights_only=True) for part in ("agent", "adversary")}
    saved_optim = {part: torch.load(ckpt / part / "optimizer.pt", weights_only=True) for part in ("agent", "adversary")}

    seen = {}
    restore = atla._restore

    def checking(folder, agent, adversary, progress):
        how = restore(folder, agent, adversary, progress)
        for part, model in (("agent", agent), ("adversary", adversary)):
            for key, value in model.policy.state_dict().items():
                assert torch.equal(value, saved[part][key]), (part, key)  # bit-exact: weights are copied
            state = model.policy.optimizer.state_dict()["state"]
            assert {k: int(v["step"]) for k, v in state.items()} == \
                {k: int(v["step"]) for k, v in saved_optim[part]["state"].items()}
        seen["steps"] = (agent.num_timesteps, adversary.num_timesteps)
        return how

    tiny_presets.setattr(atla, "_restore", checking)
    progress_after = []
    learn = PPO.learn

    def recording(self, total_timesteps, **kwargs):
        out = learn(self, total_timesteps, **kwargs)
        progress_after.append(self._current_progress_remaining)
        return out

    tiny_presets.setattr(PPO, "learn", recording)
    train_atla("tiny-atla", run, log=lambda line: None)
    assert seen["steps"] == (ROLLOUT, ROLLOUT)
    final = json.loads((ckpt / "progress.json").read_text())
    assert final["iteration"] == 3 and final["finished"] and [h["iteration"] for h in final["history"]] == [1, 2, 3]
    # schedules run over the whole budget (3 rollouts), not over each one-rollout call
    assert progress_after == pytest.approx([1 / 3, 1 / 3, 0.0, 0.0])


@pytest.mark.parametrize("method", ["atla", "pa_atla"])
def test_an_alternating_run_stopped_by_its_time_budget_goes_on_as_if_never_stopped(tiny_presets, tmp_path, method):
    """The alternation's exact resume: both models' envs, last observations and episode windows,
    the attack layers' generators (the live adversary in the agent's envs, the agent in the
    adversary's) and the random streams. Stopped after its first iteration and resumed, the run
    ends with both networks and both optimizers of the run never stopped, bit for bit (the
    property under test), and its resume is recorded as exact."""
    train_atla(f"tiny-{method}", tmp_path / "one", log=lambda line: None)
    lines = []
    train_atla(f"tiny-{method}", tmp_path / "two", deadline=0.0, log=lambda line: None)  # stops after iteration 1
    train_atla(f"tiny-{method}", tmp_path / "two", log=lines.append)
    assert any("resuming at iteration 1 (256 agent steps), exactly" in line for line in lines), lines
    for part in ("agent", "adversary"):
        for name in ("policy.pt", "optimizer.pt"):
            one, two = (torch.load(tmp_path / run / "checkpoint" / part / name, weights_only=True)
                        for run in ("one", "two"))
            flat = [[t for t in _tensors(state)] for state in (one, two)]
            assert len(flat[0]) == len(flat[1]) > 0
            assert all(torch.equal(a, b) for a, b in zip(*flat)), (part, name)  # bit-exactness under test
    progress = json.loads((tmp_path / "two" / "checkpoint" / "progress.json").read_text())
    assert progress["resumes"] == [{"steps": ROLLOUT, "exact": True}] and "inexact_resume" not in progress


def _tensors(tree):
    """Every tensor of a state dict (nested dicts and lists), in a fixed order."""
    if torch.is_tensor(tree):
        yield tree
    elif isinstance(tree, dict):
        for key in sorted(tree, key=str):
            yield from _tensors(tree[key])
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)


def test_a_resume_from_another_methods_checkpoint_is_refused(tiny_presets, tmp_path):
    run = tmp_path / "run"
    train_atla("tiny-pa_atla", run, total_agent_steps=ROLLOUT, log=lambda line: None)
    with pytest.raises(UserError, match="holds a tiny-pa_atla run"):
        train_atla("tiny-atla", run, total_agent_steps=ROLLOUT, log=lambda line: None)
    with pytest.raises(UserError, match="unknown alternating-training preset"):
        train_atla("nope", run)


def test_a_vecnormalize_agent_shares_its_normaliser_with_the_adversary_and_resumes_it(monkeypatch, tmp_path):
    """Hopper (VecNormalize, as the zoo's hopper-ppo): the adversary's view of the agent
    normalises with the agent's own statistics object (so ε is in the same normalised units on
    both sides), the checkpoint holds them, and a resume restores them."""
    from rlgauntlet.training.checkpoints import load_data_pickle
    from rlgauntlet.training.kit import find_vecnormalize

    monkeypatch.setitem(presets.ATLA_PRESETS, "tiny-hopper", ATLAPreset(
        "tiny-hopper", "hopper-ppo", "pa_atla", eps=0.075, total_agent_steps=2 * 128, checkpoint_every=1,
        agent_overrides={"n_steps": 128, "batch_size": 64, "n_epochs": 1}, adversary={"n_epochs": 1}))
    run = tmp_path / "run"
    train_atla("tiny-hopper", run, deadline=time.monotonic(), log=lambda line: None)  # one iteration
    saved = load_data_pickle(run / "checkpoint" / "agent" / "vecnormalize.pkl")
    assert saved.obs_rms.count > 128 and saved.norm_obs and saved.norm_reward
    seen = {}
    restore = atla._restore

    def checking(folder, agent, adversary, progress):
        how = restore(folder, agent, adversary, progress)
        norm = find_vecnormalize(agent.get_env())
        np.testing.assert_array_equal(norm.obs_rms.mean, saved.obs_rms.mean)  # bit-exact: copied numbers
        np.testing.assert_array_equal(norm.ret_rms.var, saved.ret_rms.var)
        seen["shared"] = adversary.get_env().core.victim.vecnormalize._source is norm
        seen["space"] = adversary.get_env().core.victim.budget_space
        return how

    monkeypatch.setattr(atla, "_restore", checking)
    train_atla("tiny-hopper", run, log=lambda line: None)
    assert seen == {"shared": True, "space": "normalized"}
    progress = json.loads((run / "checkpoint" / "progress.json").read_text())
    assert progress["finished"] and progress["history"][-1]["applied"]["agent_envs"]["linf_max"] == \
        pytest.approx(0.075, rel=1e-5)


@pytest.mark.parametrize("variant", ["sarl", "stochastic"])
def test_the_live_adversary_stays_in_its_budget(variant):
    from rlgauntlet.common.seeding import BatchRNG, episode_generator
    from rlgauntlet.threats.learned.actor import AttackActor, director_action_space
    from rlgauntlet.victims.sb3 import SB3Victim

    agent = PPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu")
    victim = SB3Victim.from_model(agent)
    actor = AttackActor(variant, 0.1)
    import gymnasium as gym

    adversary_space = director_action_space(variant, victim, (4,))
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)

    class Env(gym.Env):
        observation_space, action_space = obs_space, adversary_space

    adversary = PPO("MlpPolicy", Env(), seed=0, device="cpu")
    threat = LiveAdversary(adversary, actor)
    x = torch.randn(16, 4, dtype=victim.dtype)
    rng = BatchRNG([episode_generator(0, k, "threat") for k in range(16)])
    x_adv = threat.perturb(x, victim, rng)
    assert (x_adv - x).abs().max() <= 0.1 + 1e-6
    assert (x_adv - x).abs().max() > 0.01  # it does act
    # the director's sample is SB3 predict()'s: the same draws give the same (clipped) actions
    torch.manual_seed(7)
    fast = threat.perturb(x, victim, BatchRNG([episode_generator(0, k, "threat") for k in range(16)]))
    torch.manual_seed(7)
    expected, _ = adversary.predict(x.to(torch.float32).numpy(), deterministic=False)
    slow = actor.perturb(x, victim, torch.as_tensor(expected), BatchRNG([episode_generator(0, k, "threat")
                                                                         for k in range(16)]))
    torch.testing.assert_close(fast, slow)


def test_the_adversarys_budget_ramps_over_the_stated_fraction(tiny_presets, tmp_path):
    tiny_presets.setitem(presets.ATLA_PRESETS, "tiny-ramp", ATLAPreset(
        "tiny-ramp", "cartpole-ppo", "pa_atla", eps=0.1, total_agent_steps=3 * ROLLOUT, checkpoint_every=1,
        eps_ramp=1.0, agent_overrides={"n_epochs": 1}, adversary={"n_epochs": 1}))
    ckpt = train_atla("tiny-ramp", tmp_path / "run", log=lambda line: None)
    history = json.loads((ckpt / "progress.json").read_text())["history"]
    assert [h["eps"] for h in history] == pytest.approx([0.0, 0.1 / 3, 0.2 / 3])  # ε·steps/(ramp·budget)


def test_train_cli_runs_an_alternating_preset_and_refuses_init_from(tmp_path, cli_env):
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "train", *args], capture_output=True, text=True,
                              env=cli_env)

    res = run("--preset", "cartpole-pa-atla-ppo", "--init-from", "zoo:cartpole-dqn", "--no-register",
              "--run-dir", str(tmp_path / "a"))
    assert res.returncode == 2 and "drop --init-from" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = run("--preset", "cartpole-pa-atla-ppo", "--steps", str(ROLLOUT), "--no-register", "--run-dir",
              str(tmp_path / "b"))
    assert res.returncode == 0, res.stderr
    progress = json.loads((tmp_path / "b" / "checkpoint" / "agent" / "progress.json").read_text())
    assert progress["adversary"] == {"method": "pa_atla", "eps": 0.05, "steps": ROLLOUT}
    assert progress["init_from"]["agent"] == "zoo:cartpole-ppo"


@pytest.mark.parametrize("agent", ["zoo:cartpole-sa-ppo", "zoo:cartpole-atla-ppo", "zoo:cartpole-pa-atla-ppo"])
def test_the_zoo_atla_agents_hold_under_pgd_at_the_known_answers_budget(agent):
    """ε = 0.05 raw, where the vanilla zoo PPO falls below 100 under PA-AD (docs/reproduction.md)."""
    from rlgauntlet import evaluate

    report = evaluate(agent, "CartPole-v1", ["pgd:steps=10,eps=0.05"], episodes=5, n_envs=5, impact=False)
    clean, pgd = report.evaluations
    assert clean["return_mean"] >= 475 and pgd["return_mean"] >= 400


@pytest.mark.slow
def test_pa_ad_breaks_vanilla_ppo_but_not_the_atla_agents(tmp_path):
    """The issue's known answer at ε = 0.05: a PA-AD attacker trained for 50k steps against each
    agent leaves vanilla PPO below 100 and the SA-PPO, ATLA and PA-ATLA agents at 400 or more."""
    from rlgauntlet.experiments.attacker_job import train_attacker

    strength = {}
    robust = ("zoo:cartpole-sa-ppo", "zoo:cartpole-atla-ppo", "zoo:cartpole-pa-atla-ppo")
    for agent in ("zoo:cartpole-ppo", *robust):
        manifest = train_attacker(agent, "CartPole-v1", "paad", eps=0.05, steps=50_000, run_dir=tmp_path / agent[4:],
                                  log=lambda line: None)
        strength[agent] = manifest["strength"]["attacked_mean"]
    assert strength["zoo:cartpole-ppo"] < 100, strength
    assert all(strength[agent] >= 400 for agent in robust), strength


def test_each_checkpoint_records_the_clean_greedy_return_of_the_agent_it_saves(tiny_presets, tmp_path):
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.greedy_eval import greedy_returns
    from rlgauntlet.training.kit import GREEDY_SEED_OFFSET

    ckpt = train_atla("tiny-pa_atla", tmp_path / "run", log=lambda line: None)
    history = json.loads((ckpt / "progress.json").read_text())["history"]
    assert len(history) == 3 and all(h["clean_greedy_return"] > 0 for h in history)
    from rlgauntlet.victims.sb3_files import read_sb3_zip

    data, weights = read_sb3_zip(ckpt / "agent" / "model.zip")  # the file evaluation reads, as data
    with zipfile.ZipFile(ckpt / "agent" / "model.zip") as archive:  # weights only: the optimizer is optimizer.pt's
        assert sorted(archive.namelist()) == ["data", "policy.pth"]
    saved = PPO("MlpPolicy", "CartPole-v1", device="cpu")
    saved.policy.load_state_dict(weights)
    games = make_train_vec_env("CartPole-v1", atla.CLEAN_GAMES, 0 + GREEDY_SEED_OFFSET)
    replayed = greedy_returns(saved, games, 0 + GREEDY_SEED_OFFSET)  # the same games, no perturbation
    assert history[-1]["clean_greedy_return"] == pytest.approx(sum(replayed) / len(replayed))


def _point(iteration, attacked, clean, eps=0.075):
    return {"iteration": iteration, "agent_steps": iteration * 2048, "eps": eps,
            "recent_return_attacked": attacked, "clean_greedy_return": clean}


def test_the_selection_rule_ranks_by_the_attacked_return_among_full_budget_checkpoints_clean_enough():
    preset = presets.ATLA_PRESETS["hopper-pool-pa-atla-ppo-select"]
    assert preset.select_clean_min == 3000.0 and preset.eps == 0.075
    history = [_point(10, 2500.0, 3600.0, eps=0.05),  # the highest attacked return, but before the full ε
               _point(20, 2400.0, 2999.0),             # clean one short of the bar
               _point(30, 1800.0, 3000.0),             # qualifies (the bar is inclusive)
               _point(40, 1900.0, 3400.0),             # qualifies, the highest that does
               _point(50, None, 3500.0)]               # no finished episode to rank it by
    scores = [atla.selection_score(p, preset) for p in history]
    assert scores == [None, None, 1800.0, 1900.0, None]
    # a preset without the rule never selects (its run's agent is the last checkpoint)
    assert atla.selection_score(_point(40, 1900.0, 3400.0), presets.ATLA_PRESETS["hopper-pool-pa-atla-ppo"]) is None


def test_a_selecting_run_keeps_every_snapshot_and_the_best_one_by_its_rule(tiny_presets, tmp_path):
    import dataclasses

    tiny = presets.ATLA_PRESETS["tiny-pa_atla"]
    tiny_presets.setitem(presets.ATLA_PRESETS, "tiny-select", dataclasses.replace(
        tiny, name="tiny-select", total_agent_steps=4 * ROLLOUT, select_clean_min=0.0))
    run = tmp_path / "run"
    ckpt = train_atla("tiny-select", run, deadline=time.monotonic(), log=lambda line: None)  # stops after one iteration
    assert json.loads((ckpt / "progress.json").read_text())["iteration"] == 1
    train_atla("tiny-select", run, log=lambda line: None)  # resumed: the best so far must survive the resume
    history = json.loads((ckpt / "progress.json").read_text())["history"]
    assert [h["iteration"] for h in history] == [1, 2, 3, 4]
    assert sorted(p.name for p in (run / "snapshots").iterdir()) == ["iter-0001", "iter-0002", "iter-0003", "iter-0004"]
    # the last snapshot is the last checkpoint's agent, byte for byte (a copy, not a re-save)
    assert (run / "snapshots" / "iter-0004" / "model.zip").read_bytes() == (ckpt / "agent" / "model.zip").read_bytes()
    scored = [h for h in history if h["recent_return_attacked"] is not None]
    chosen = max(scored, key=lambda h: h["recent_return_attacked"])  # the first of equal scores stays
    selection = json.loads((run / "best" / "selection.json").read_text())
    assert selection["iteration"] == chosen["iteration"] and selection["score"] == chosen["recent_return_attacked"]
    snapshot = run / "snapshots" / f"iter-{chosen['iteration']:04d}"
    assert (run / "best" / "model.zip").read_bytes() == (snapshot / "model.zip").read_bytes()
    assert atla.run_agent("tiny-select", run) == run / "best"
    assert atla.run_agent("tiny-pa_atla", run) == run / "checkpoint" / "agent"
    # the zoo entry of the kept agent says which checkpoint it is and by what rule
    import shutil

    from rlgauntlet.training.register import register_zoo_agent
    from rlgauntlet.zoo import zoo_dir

    shutil.copytree(zoo_dir(), tmp_path / "zoo")
    tiny_presets.setenv("RLGAUNTLET_ZOO", str(tmp_path / "zoo"))
    entry = register_zoo_agent("tiny-select", run / "best", n_envs=2, force=True)
    assert entry["selection"] == selection and entry["total_timesteps"] == chosen["agent_steps"]


def test_a_selecting_run_that_selected_nothing_gives_the_zoo_nothing(tiny_presets, tmp_path):
    import dataclasses

    tiny = presets.ATLA_PRESETS["tiny-pa_atla"]
    tiny_presets.setitem(presets.ATLA_PRESETS, "tiny-select", dataclasses.replace(
        tiny, name="tiny-select", select_clean_min=1e9))  # no CartPole game reaches it
    run = tmp_path / "run"
    train_atla("tiny-select", run, log=lambda line: None)
    assert len(list((run / "snapshots").iterdir())) == 3 and not (run / "best").exists()
    assert atla.run_agent("tiny-select", run) == run / "checkpoint" / "agent"
    with pytest.raises(UserError, match="selected no agent for the zoo; rerun the same command with --no-register"):
        atla.run_agent("tiny-select", run, for_zoo=True)


def test_best_is_replaced_only_by_a_higher_score_and_holds_that_checkpoints_files(tmp_path):
    """Checkpoints scored 1700, 1900, 1800, unqualified, 1900 (a tie): best must hold the second's
    files (a keep-the-last or keep-the-first rule, or a tie that replaces, would not)."""
    preset = presets.ATLA_PRESETS["hopper-pool-pa-atla-ppo-select"]
    run, ckpt = tmp_path / "run", tmp_path / "run" / "checkpoint"
    points = [_point(10, 1700.0, 3100.0), _point(20, 1900.0, 3100.0), _point(30, 1800.0, 3100.0),
              _point(40, 2500.0, 2000.0), _point(50, 1900.0, 3100.0)]
    for point in points:
        (ckpt / "agent").mkdir(parents=True, exist_ok=True)
        (ckpt / "agent" / "model.zip").write_bytes(f"weights of iteration {point['iteration']}".encode())
        (ckpt / "agent" / "optimizer.pt").write_bytes(b"not kept in a snapshot")
        atla._keep_selected(run, ckpt, preset, point)
    assert (run / "best" / "model.zip").read_bytes() == b"weights of iteration 20"
    assert json.loads((run / "best" / "selection.json").read_text())["iteration"] == 20
    assert (run / "snapshots" / "iter-0040" / "model.zip").read_bytes() == b"weights of iteration 40"
    assert not (run / "snapshots" / "iter-0040" / "optimizer.pt").exists()
    assert not any(p.name.endswith((".tmp", ".old")) for p in run.rglob("*"))  # nothing half-written left behind


@pytest.mark.parametrize("text", ["{not json", '{"iteration": 20}', '{"iteration": 20, "score": "high"}', "[1, 2]"])
def test_a_selection_file_we_did_not_write_is_one_line_naming_it_and_the_fix(tmp_path, text):
    preset = presets.ATLA_PRESETS["hopper-pool-pa-atla-ppo-select"]
    run, ckpt = tmp_path / "run", tmp_path / "run" / "checkpoint"
    (run / "best").mkdir(parents=True)
    (run / "best" / "selection.json").write_text(text)
    (ckpt / "agent").mkdir(parents=True)
    (ckpt / "agent" / "model.zip").write_bytes(b"weights")
    with pytest.raises(UserError, match=r"selection\.json is not a selection rlgauntlet wrote.*remove the best folder"):
        atla._keep_selected(run, ckpt, preset, _point(30, 1800.0, 3100.0))
    assert (run / "best" / "selection.json").read_text() == text  # a file we did not write is never modified
    # the fix it names: without the folder the run selects again
    import shutil

    shutil.rmtree(run / "best")
    atla._keep_selected(run, ckpt, preset, _point(40, 1800.0, 3100.0))
    assert json.loads((run / "best" / "selection.json").read_text())["iteration"] == 40


def test_a_run_whose_recipe_changed_under_its_name_is_refused_and_an_older_run_compares_without_it(
        tiny_presets, tmp_path, monkeypatch):
    """A run records the digest of what it trains with (the alternating settings and its agent's
    recipe): the agent's recipe edited under the same name refuses the resume in one line, nothing
    written; a run started before the digest was recorded resumes as before."""
    from rlgauntlet.training import recipes

    run = tmp_path / "run"
    train_atla("tiny-pa_atla", run, log=lambda line: None, deadline=0.0)  # stops after iteration 1 of 3
    before = (run / "checkpoint" / "progress.json").read_text()
    assert "training_sha256" in json.loads(before)["config"]
    agent = recipes.PRESETS["cartpole-ppo"]
    monkeypatch.setitem(recipes.PRESETS, "cartpole-ppo", dataclasses.replace(
        agent, hyperparams={**agent.hyperparams, "ent_coef": 0.5}))
    with pytest.raises(UserError, match="started with another recipe of tiny-pa_atla"):
        train_atla("tiny-pa_atla", run, log=lambda line: None)
    assert (run / "checkpoint" / "progress.json").read_text() == before
    older = json.loads(before)
    del older["config"]["training_sha256"]
    (run / "checkpoint" / "progress.json").write_text(json.dumps(older))
    train_atla("tiny-pa_atla", run, log=lambda line: None)
    assert json.loads((run / "checkpoint" / "progress.json").read_text())["iteration"] == 3
