"""Model-based attacks (Weng et al. 2020): dynamics model, targets, planner, threats, baselines."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.experiments.agents import load_for_env
from rlgauntlet.threats import parse_threat
from rlgauntlet.threats.model_based.model import load_dynamics
from rlgauntlet.threats.model_based.planner import plan
from rlgauntlet.threats.model_based.target import Target, parse_target
from rlgauntlet.training.attackers.dynamics import learn_dynamics
from rlgauntlet.victims.torch_module import TorchVictim

PENDULUM = "Pendulum-v1"
DOWN = "cos:-1"  # the pendulum hanging down: Pendulum's observation is [cos θ, sin θ, θ̇], θ = 0 upright


@pytest.fixture(scope="module")
def pendulum():
    victim, _ = load_for_env("zoo:pendulum-td3", PENDULUM)
    return victim


@pytest.fixture(scope="module")
def pendulum_model(tmp_path_factory, pendulum):
    folder = tmp_path_factory.mktemp("dyn-pendulum")
    manifest = learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 6000, folder, hidden=64, layers=2,
                              epochs=8, log=lambda s: None)
    return folder, manifest


def _records(victim, spec, episodes=2, n_envs=2, seed=0, env=PENDULUM, on_transition=None):
    return evaluate_episodes(lambda: make_env(env), victim, parse_threat(spec), range(episodes), seed, n_envs=n_envs,
                             on_transition=on_transition)


# -- targets -----------------------------------------------------------------------------------------
def test_target_by_name_index_and_flat_position():
    layout = {"height": [0], "orientations": [1, 2, 3], "velocity": [4, 5]}
    t = parse_target(["height:0", "orientations[2]:0.5", "5:-1"], layout, 6)
    assert t.indices == [0, 3, 5] and t.values == [0.0, 0.5, -1.0]
    whole = parse_target("orientations:1", layout, 6)
    assert whole.indices == [1, 2, 3] and whole.values == [1.0, 1.0, 1.0]
    s = torch.tensor([[1.0, 0, 0, 2.0, 0, 1.0]])
    assert float(t.distance(s)[0]) == pytest.approx(1.0 + 1.5 ** 2 + 2.0 ** 2)


def test_a_terminated_episode_keeps_its_last_state_up_to_the_time_limit():
    t = Target([0], [0.0])
    assert t.episode_loss([1.0, 2.0], max_steps=4) == 1.0 + 2.0 + 2 * 2.0
    assert t.episode_loss([1.0, 2.0, 3.0, 4.0], max_steps=4) == 10.0  # ran to the limit: nothing added
    assert t.episode_loss([1.0, 2.0], max_steps=None) == 3.0


@pytest.mark.parametrize("bad, words", [("head:0", "no part 'head'"), ("orientations[3]:0", "has 3 coordinates"),
                                        ("9:0", "outside the observation"), ("height=0", "PART:VALUE"),
                                        ("height:x", "not a number"), (["height:0", "0:1"], "given twice")])
def test_bad_targets_name_the_problem(bad, words):
    with pytest.raises(UserError, match=words.replace("[", r"\[").replace("(", r"\(")):
        parse_target(bad, {"height": [0], "orientations": [1, 2, 3]}, 6)


def test_dm_control_layout_follows_the_observation_keys():
    pytest.importorskip("shimmy")
    from rlgauntlet.envs.presets import observation_layout

    env = make_env("dm_control/walker-stand-v0")
    obs, _ = env.reset(seed=0)
    layout = observation_layout(env)
    assert layout["height"] == [0] and len(layout["orientations"]) == 14 and len(layout["velocity"]) == 9
    physics = env.unwrapped._env.physics
    assert obs[layout["height"][0]] == pytest.approx(physics.named.data.xpos["torso", "z"])
    env.close()


@pytest.mark.parametrize("env_id, part, qpos_index", [("Walker2d-v5", "height", 1), ("Hopper-v5", "height", 1),
                                                     ("InvertedPendulum-v5", "angle", 1)])
def test_gymnasium_mujoco_parts_are_the_named_coordinates(env_id, part, qpos_index):
    from rlgauntlet.envs.presets import observation_layout

    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs = env.step(env.action_space.sample())[0]
    (index,) = observation_layout(env)[part]
    assert obs[index] == pytest.approx(env.unwrapped.data.qpos[qpos_index])  # torso z / pole hinge angle
    env.close()


# -- planner with a perfect model ---------------------------------------------------------------------
class _Integrator(nn.Module):
    """True dynamics of a toy system: s' = s + a (2-D position, 2-D action)."""

    def forward(self, s, a):
        return s + a


def _gain_victim(gain: float, box: gym.Space) -> TorchVictim:
    """a = gain · x on a 2-D observation, actions in [−1, 1]²."""
    layer = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(gain * torch.eye(2))
    return TorchVictim(layer, "deterministic", box, gym.spaces.Box(-1.0, 1.0, (2,)), budget_space="raw")


@pytest.mark.parametrize("mode, eps, best_loss", [("action", 1.0, 1.0), ("observation", 3.0, 0.0)])
def test_with_the_true_model_the_plan_reaches_a_reachable_target(mode, eps, best_loss):
    # s' = s + a from s0 = 0, target (2, −1), loss Σ_{i=1..4} ‖s_i − target‖².
    # action: the agent does nothing and |a| ≤ 1, so the best plan goes (1, −1), (2, −1), (2, −1), (2, −1): loss 1.
    # observation: the agent plays a = −x, so with ε = 3 the attacker steers a ∈ [−3, 3] and gets there in one step.
    victim = _gain_victim(0.0 if mode == "action" else -1.0, gym.spaces.Box(-np.inf, np.inf, (2,)))
    target = Target([0, 1], [2.0, -1.0])
    s0 = torch.zeros(1, 2, dtype=torch.float64)
    deltas, loss = plan(victim, _Integrator(), s0, target, mode, eps=eps, horizon=4, lr=0.1, steps=300, dim=2)
    s = s0.clone()
    for k in range(4):  # the plan, run in the true system
        if mode == "observation":
            a = victim.forward(s + deltas[:, k]).action
        else:
            a = (victim.forward(s).action + deltas[:, k]).clamp(-1.0, 1.0)
        s = s + a
    assert torch.allclose(s, torch.tensor([[2.0, -1.0]], dtype=torch.float64), atol=0.02)
    assert float(loss[0]) == pytest.approx(best_loss, abs=0.02)
    assert float(deltas.abs().max()) <= eps + 1e-12


def test_plan_never_predicts_worse_than_no_attack():
    victim = _gain_victim(-1.0, gym.spaces.Box(-np.inf, np.inf, (2,)))
    target = Target([0], [5.0])
    s0 = torch.tensor([[0.3, -0.2], [1.0, 1.0]], dtype=torch.float64)
    # a learning rate far too large for the box: the kept plan is still no worse than δ = 0
    _, loss = plan(victim, _Integrator(), s0, target, "observation", eps=0.01, horizon=3, lr=50.0, steps=3, dim=2)
    _, clean = plan(victim, _Integrator(), s0, target, "observation", eps=0.01, horizon=3, lr=1.0, steps=0, dim=2)
    assert (loss <= clean + 1e-12).all()


def test_flip_initialisation_starts_at_the_flip_perturbation_and_never_predicts_worse():
    victim = _gain_victim(-1.0, gym.spaces.Box(-np.inf, np.inf, (2,)))
    target = Target([0], [5.0])
    s0 = torch.tensor([[0.5, -0.2]], dtype=torch.float64)
    start, flip_loss = plan(victim, _Integrator(), s0, target, "observation", eps=0.1, horizon=3, lr=0.01, steps=0,
                            dim=2, init="flip")
    assert torch.equal(start, torch.tensor([[[-0.1, 0.1]] * 3], dtype=torch.float64))  # −ε·sign(x0) on every step
    _, loss = plan(victim, _Integrator(), s0, target, "observation", eps=0.1, horizon=3, lr=50.0, steps=3, dim=2,
                   init="flip")
    assert float(loss[0]) <= float(flip_loss[0])
    action_start, _ = plan(_gain_victim(1.0, gym.spaces.Box(-np.inf, np.inf, (2,))), _Integrator(), s0, target,
                           "action", eps=0.2, horizon=2, lr=0.01, steps=0, dim=2, init="flip")
    assert torch.equal(action_start, torch.tensor([[[-0.2, 0.2]] * 2], dtype=torch.float64))  # −ε·sign(π(x0))


# -- dynamics model -----------------------------------------------------------------------------------
def test_dynamics_model_beats_predicting_no_change(pendulum_model):
    folder, manifest = pendulum_model
    model, loaded = load_dynamics(folder)
    data = dict(np.load(folder / "data.npz"))
    from rlgauntlet.training.attackers.dynamics import test_mask

    test = test_mask(data)
    s, a, s_next = (torch.as_tensor(data[k][test]) for k in ("s", "a", "s_next"))
    mse = float(((model(s, a) - s_next) ** 2).mean())
    no_change = float(((s - s_next) ** 2).mean())
    assert mse == pytest.approx(manifest["test_one_step_mse"], rel=1e-5)
    assert mse < no_change / 20
    assert manifest["transitions"]["agent"] == manifest["transitions"]["random"] == 3000
    assert set(manifest["k_step_error"]) == {"1", "5", "10"}
    assert manifest["k_step_error"]["10"]["mse"] > manifest["k_step_error"]["1"]["mse"]  # errors compound
    assert manifest["victim"]["sha256"] == loaded["victim"]["sha256"]


def test_dynamics_resume_trains_as_an_unbroken_run(tmp_path, pendulum):
    kwargs = dict(hidden=16, layers=1, log=lambda s: None)
    learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 4000, tmp_path / "a", epochs=2, **kwargs)
    learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 4000, tmp_path / "a", epochs=4, **kwargs)
    learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 4000, tmp_path / "b", epochs=4, **kwargs)
    a, b = load_dynamics(tmp_path / "a")[0].state_dict(), load_dynamics(tmp_path / "b")[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(UserError, match="other settings"):
        learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 6000, tmp_path / "a", epochs=4, **kwargs)


def test_a_refused_dynamics_run_leaves_nothing_that_blocks_its_retry(tmp_path, pendulum):
    """Too few episodes to hold some out is refused with "give more samples"; doing so in the same
    --run-dir must then work (the refused run used to leave its settings behind)."""
    kwargs = dict(hidden=8, layers=1, epochs=1, log=lambda s: None)
    with pytest.raises(UserError, match="give more samples"):
        learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 200, tmp_path / "d", **kwargs)
    assert not any((tmp_path / "d").iterdir())
    manifest = learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 4000, tmp_path / "d", **kwargs)
    assert manifest["samples"] == 4000


def test_altered_or_unfinished_models_are_refused(tmp_path, pendulum_model):
    import shutil

    folder, _ = pendulum_model
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    weights = copy / "model.pt"
    weights.write_bytes(weights.read_bytes() + b"x")
    with pytest.raises(UserError, match="sha256"):
        load_dynamics(copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(UserError, match="has not finished"):
        load_dynamics(copy)


def test_model_for_another_env_or_agent_is_refused(pendulum_model, tmp_path):
    folder, manifest = pendulum_model
    threat = parse_threat(f"model_obs:eps=0.1,model={folder},target={DOWN}")
    with pytest.raises(UserError, match="trained on Pendulum-v1, not MountainCarContinuous-v0"):
        threat.check_env(make_env("MountainCarContinuous-v0"), "MountainCarContinuous-v0")
    other = dict(manifest, victim=dict(manifest["victim"], sha256="0" * 64))
    copy = tmp_path / "other"
    import shutil

    shutil.copytree(folder, copy)
    (copy / "manifest.json").write_text(json.dumps(other))
    victim, _ = load_for_env("zoo:pendulum-td3", PENDULUM)
    with pytest.raises(UserError, match="trained on another agent"):
        parse_threat(f"model_obs:eps=0.1,model={copy},target={DOWN}").check_victim(victim)


# -- threats on a real agent ---------------------------------------------------------------------------
def test_model_attacks_stay_in_their_budget(pendulum, pendulum_model):
    folder, _ = pendulum_model
    obs = _records(pendulum, f"model_obs:eps=0.3,horizon=2,steps=3,model={folder},target={DOWN}", episodes=1, n_envs=1)
    assert 0 < obs[0].linf_max <= 0.3 + 1e-9 and obs[0].perturbed_steps == obs[0].length
    act = _records(pendulum, f"model_action:eps=0.5,horizon=2,steps=3,model={folder},target={DOWN}", episodes=1,
                   n_envs=1)
    assert 0 < act[0].linf_max <= 0.5 + 1e-9 and act[0].perturbed_steps == act[0].length


@pytest.mark.slow
def test_model_obs_beats_random_noise_and_the_best_of_m_baselines(tmp_path, pendulum):
    # the attack is as good as its model (the paper's Fig. 3): this one learns from 20k transitions
    folder = tmp_path / "dyn"
    learn_dynamics(pendulum, PENDULUM, lambda: make_env(PENDULUM), 20_000, folder, hidden=128, layers=2, epochs=10,
                   log=lambda s: None)
    eps = 0.3
    mean = lambda rs: np.mean([r.episode_return for r in rs])  # noqa: E731
    attack = mean(_records(pendulum, f"model_obs:eps={eps},horizon=10,model={folder},target={DOWN}"))
    noise = mean(_records(pendulum, f"uniform_noise:eps={eps}"))
    rand_b = mean(_records(pendulum, f"rand_b:eps={eps},m=20,target={DOWN}"))
    clean = mean(evaluate_episodes(lambda: make_env(PENDULUM), pendulum, None, range(2), 0, n_envs=2))
    assert attack < noise - 200 and attack < rand_b - 200 and attack < clean - 400


def test_model_obs_results_do_not_depend_on_n_envs(pendulum, pendulum_model):
    folder, _ = pendulum_model
    spec = f"model_obs:eps=0.2,horizon=2,replan=2,steps=3,model={folder},target={DOWN}"
    one = sorted((r.episode, r.episode_return) for r in _records(pendulum, spec, episodes=3, n_envs=1))
    three = sorted((r.episode, r.episode_return) for r in _records(pendulum, spec, episodes=3, n_envs=3))
    assert one == three


def _total_loss_meter(target_index: int, value: float):
    totals: dict[int, float] = {}

    def on_transition(episode, obs, action, next_obs):
        totals[episode] = totals.get(episode, 0.0) + float((next_obs[target_index] - value) ** 2)

    return totals, on_transition


@pytest.mark.parametrize("name", ["rand_u", "rand_b", "rand_u_action", "rand_b_action"])
def test_best_of_m_replays_its_best_candidate(pendulum, name):
    eps = 0.5 if name.endswith("action") else 0.2
    threat = parse_threat(f"{name}:eps={eps},m=4,target={DOWN}")
    env = make_env(PENDULUM)
    threat.check_env(env, PENDULUM)
    obs, _ = env.reset(seed=7)
    best, scores = threat.search(env, obs, pendulum, base=12345)
    assert np.array_equal(env.step(np.zeros(1, np.float32))[0], _step_fresh(seed=7))  # the env is back where it was
    assert len(scores) == 4 and scores[best] == min(scores) and len(set(scores)) == 4
    # the real episode replays the best candidate: its total loss is the best score
    totals, meter = _total_loss_meter(0, -1.0)
    recs = _records(pendulum, f"{name}:eps={eps},m=4,target={DOWN}", episodes=2, on_transition=meter)
    for rec in recs:
        assert rec.perturbed_steps == rec.length
        assert rec.linf_max <= eps + 1e-9
        if name.startswith("rand_b") and not name.endswith("action"):
            assert rec.linf_sum / rec.perturbed_steps == pytest.approx(eps)  # every coordinate at ±ε
    threat2 = parse_threat(f"{name}:eps={eps},m=4,target={DOWN}")
    env2 = make_env(PENDULUM)
    threat2.check_env(env2, PENDULUM)
    from rlgauntlet.common.seeding import BatchRNG, episode_generator

    rng = BatchRNG([episode_generator(0, 0, "threat")])
    base = int((rng.uniform(()) * 2**31).long()[0])
    first, _ = env2.reset(seed=0)
    _, scores0 = threat2.search(env2, first, pendulum, base)
    assert totals[0] == pytest.approx(min(scores0), rel=1e-6)  # the search ran one row, the engine two


def _step_fresh(seed: int) -> np.ndarray:
    env = make_env(PENDULUM)
    env.reset(seed=seed)
    return env.step(np.zeros(1, np.float32))[0]


def test_rand_u_select_reward_keeps_the_lowest_return(pendulum):
    recs = _records(pendulum, "rand_u:eps=0.3,m=3,select=reward", episodes=1, n_envs=1)
    threat = parse_threat("rand_u:eps=0.3,m=3")  # no target: judged by reward
    assert threat.selection == "reward"
    env = make_env(PENDULUM)
    threat.check_env(env, PENDULUM)
    from rlgauntlet.common.seeding import BatchRNG, episode_generator

    base = int((BatchRNG([episode_generator(0, 0, "threat")]).uniform(()) * 2**31).long()[0])
    first, _ = env.reset(seed=0)
    _, returns = threat.search(env, first, pendulum, base)
    assert recs[0].episode_return == pytest.approx(min(returns), rel=1e-6)


def test_flip_is_minus_eps_sign(pendulum):
    x = torch.tensor([[0.5, -0.2, 0.0, 3.0]], dtype=torch.float64)
    threat = parse_threat("flip:eps=0.1")
    from rlgauntlet.common.seeding import BatchRNG

    out = threat.perturb(x, pendulum, BatchRNG([torch.Generator()]))
    torch.testing.assert_close(out, torch.tensor([[0.4, -0.1, 0.0, 2.9]], dtype=torch.float64), rtol=0, atol=1e-15)
    acts = parse_threat("flip_action:eps=0.5").perturb_action(torch.tensor([[1.8], [-0.2], [0.0]], dtype=torch.float64),
                                                              pendulum, None, None)
    assert torch.allclose(acts, torch.tensor([[1.3], [0.3], [0.0]], dtype=torch.float64))


@pytest.mark.parametrize("spec, words", [
    ("rand_u:eps=0.1,select=loss", "needs a target"),
    ("model_obs:eps=0.1,model=/nonexistent,target=cos:-1", "no dynamics model there"),
])
def test_bad_specs_name_the_problem(spec, words):
    with pytest.raises(UserError, match=words):
        parse_threat(spec)


def test_replan_beyond_horizon_is_refused(pendulum_model):
    folder, _ = pendulum_model
    with pytest.raises(UserError, match="more steps than the plan has"):
        parse_threat(f"model_obs:eps=0.1,horizon=2,replan=3,model={folder},target=cos:-1")


def test_cli_model_for_another_env_and_bad_target_exit_2_in_one_line(pendulum_model, tmp_path, cli_env):
    import subprocess
    import sys

    import shutil

    folder, manifest = pendulum_model
    other = tmp_path / "other-env"
    shutil.copytree(folder, other)
    (other / "manifest.json").write_text(json.dumps(dict(manifest, env="InvertedPendulum-v5")))
    base = [sys.executable, "-m", "rlgauntlet.cli", "evaluate", "--agent", "zoo:pendulum-td3", "--episodes", "1",
            "--out", str(tmp_path / "r.json")]
    cases = [(["--env", PENDULUM, "--threat", f"model_obs:eps=0.1,model={other},target=0:0"],
              "trained on InvertedPendulum-v5, not Pendulum-v1"),
             (["--env", PENDULUM, "--threat", f"model_obs:eps=0.1,model={folder},target=height:0"], "no part 'height'")]
    for args, words in cases:
        res = subprocess.run(base + args, capture_output=True, text=True, env=cli_env)
        assert res.returncode == 2, res.stderr
        assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_cli_dynamics_train_writes_a_model(tmp_path, cli_env, cli_main):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "dynamics-train", "--agent", "zoo:pendulum-td3",
                          "--env", PENDULUM, "--samples", "4000", "--run-dir", str(tmp_path / "dyn"), "--hidden", "8",
                          "--layers", "1", "--epochs", "1"], capture_output=True, text=True, env=cli_env)
    assert res.returncode == 0, res.stderr
    manifest = json.loads((tmp_path / "dyn" / "manifest.json").read_text())
    assert manifest["samples"] == 4000 and manifest["env"] == PENDULUM and manifest["test_one_step_mse"] > 0
    again = cli_main(["dynamics-train", "--agent", "zoo:cartpole-ppo", "--env", "CartPole-v1", "--samples", "1000",
                      "--run-dir", str(tmp_path / "d2")])
    assert again.returncode == 2 and "continuous-action agent" in again.stderr


def test_attack_runs_total_loss_equals_a_hand_rollout(pendulum):
    """The protocol's total loss is Σ_t d(s_{t+1}) from an independent env loop (no engine);
    on Hopper, an early fall adds the last state's distance up to the 1000-step limit."""
    from rlgauntlet.experiments.model_based import attack_runs, run_stats

    def by_hand(victim, env_id, index, value, seed):
        env = make_env(env_id)
        obs, _ = env.reset(seed=seed)
        losses, total_reward = [], 0.0
        while True:
            obs, reward, terminated, truncated, _ = env.step(victim.act(obs[None])[0].astype(np.float32))
            losses.append((float(obs[index]) - value) ** 2)
            total_reward += reward
            if terminated or truncated:
                return losses, total_reward

    losses, ret = by_hand(pendulum, PENDULUM, 0, -1.0, seed=0)
    run = attack_runs(pendulum, lambda: make_env(PENDULUM), PENDULUM, None, Target([0], [-1.0]), 1)[0]
    assert run["loss"] == pytest.approx(sum(losses), rel=1e-9) and run["return"] == pytest.approx(ret, rel=1e-9)
    hopper, _ = load_for_env("zoo:hopper-ppo", "Hopper-v5")
    target = Target([0], [0.0])
    for seed in range(3):  # episode 2 of the zoo agent falls at step 604
        losses, _ = by_hand(hopper, "Hopper-v5", 0, 0.0, seed)
        if len(losses) < 1000:
            break
    assert len(losses) < 1000
    run = attack_runs(hopper, lambda: make_env("Hopper-v5"), "Hopper-v5", None, target, seed + 1)[seed]
    assert run["length"] == len(losses) and run["loss_lived"] == pytest.approx(sum(losses), rel=1e-9)
    assert run["loss"] == pytest.approx(sum(losses) + (1000 - len(losses)) * losses[-1], rel=1e-9)
    assert run_stats([1.0, 2.0, 6.0]) == {"mean": 3.0, "std": pytest.approx(np.std([1, 2, 6], ddof=1)),
                                          "median": 2.0, "min": 1.0, "max": 6.0}
