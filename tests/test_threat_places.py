"""Threats on actions, on the world and with memory: known answers, records, n_envs independence."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.engine.rollout import evaluate_episodes
from rlgauntlet.envs import make_env, restore, snapshot
from rlgauntlet.errors import UserError
from rlgauntlet.threats import Memory, Threat, ThreatParams, parse_threat
from rlgauntlet.victims import TorchVictim, load_victim


class Constant(nn.Module):
    """A policy that always outputs ``value`` (and records the inputs it was given)."""

    def __init__(self, value, record=None):
        super().__init__()
        self.value = torch.as_tensor(value, dtype=torch.float64)
        self.seen = record

    def forward(self, x):
        if self.seen is not None:
            self.seen.extend(x.detach().clone())
        return self.value.to(x).expand(x.shape[0], -1)


def _victim(env_id, value, kind, record=None):
    env = make_env(env_id)
    return TorchVictim(Constant(value, record), kind, env.observation_space, env.action_space, budget_space="raw")


def _memory(states, step):
    return Memory(states, torch.full((len(states),), step))


# -- action threats -------------------------------------------------------------------------------
def test_action_noise_is_clipped_gaussian_from_the_episode_stream():
    """Known answer: an agent that always asks for torque 1 on Pendulum executes
    clip(1 + 1.5·n_t, −2, 2), n_t the t-th draw of the episode's threat stream; the record sums
    |executed − chosen| per step (clipping at 2 makes the sign of the noise matter)."""
    victim = _victim("Pendulum-v1", [1.0], "deterministic")
    (rec,) = evaluate_episodes(lambda: make_env("Pendulum-v1"), victim, parse_threat("action_noise:std=1.5"), [2], seed=5)
    g = episode_generator(5, 2, "threat")
    draws = torch.stack([torch.randn((1,), generator=g) for _ in range(rec.length)]).double()
    change = (1.0 + 1.5 * draws).clamp(-2.0, 2.0) - 1.0
    mirrored = (1.0 - 1.5 * draws).clamp(-2.0, 2.0) - 1.0
    assert rec.perturbed_steps == rec.action_checks == rec.length == 200
    assert rec.linf_sum == pytest.approx(float(change.abs().sum()), rel=1e-6)
    assert abs(float(mirrored.abs().sum()) - rec.linf_sum) > 1.0
    assert rec.linf_max == pytest.approx(float(change.abs().max()), rel=1e-6)
    assert rec.action_changes == int((change.abs() > 1e-6).sum())


def test_action_noise_stays_in_the_action_box():
    threat = parse_threat("action_noise:std=5")
    victim = _victim("Pendulum-v1", [1.9], "deterministic")
    rng = BatchRNG([episode_generator(0, k, "threat") for k in range(500)])
    out = threat.perturb_action(torch.full((500, 1), 1.9, dtype=torch.float64), victim, rng, _memory([None] * 500, 0))
    assert out.min() == -2.0 and out.max() == 2.0 and ((out == 2.0).float().mean() > 0.3)


def test_random_action_discrete_is_uniform_and_counts_changes():
    victim = _victim("CartPole-v1", [1.0, 0.0], "q")  # always picks action 0
    (rec,) = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, parse_threat("random_action"), [0], seed=1)
    g = episode_generator(1, 0, "threat")
    drawn = [math.floor(float(torch.rand((), generator=g)) * 2) for _ in range(rec.length)]
    assert rec.action_changes == sum(a == 1 for a in drawn)  # a change is a draw of the other action
    assert rec.linf_sum == rec.action_changes  # discrete: 1 per replaced-by-another step
    # uniform over a larger space: chi-square with 4 degrees of freedom, 5000 draws
    space_victim = type("V", (), {"action_space": gym.spaces.Discrete(5)})()
    rng = BatchRNG([episode_generator(0, k, "threat") for k in range(5000)])
    out = parse_threat("random_action").perturb_action(torch.zeros(5000, dtype=torch.long), space_victim, rng, None)
    counts = np.bincount(out.numpy(), minlength=5)
    chi2 = float(((counts - 1000) ** 2 / 1000).sum())
    assert out.dtype == torch.long and chi2 < 18.5  # p = 0.001


def test_random_action_continuous_covers_the_box_uniformly():
    victim = _victim("Pendulum-v1", [0.0], "deterministic")
    rng = BatchRNG([episode_generator(0, k, "threat") for k in range(4000)])
    out = parse_threat("random_action").perturb_action(torch.zeros(4000, 1, dtype=torch.float64), victim, rng, None)
    assert out.min() >= -2 and out.max() <= 2
    assert abs(float(out.mean())) < 0.1 and float(out.var()) == pytest.approx(16 / 12, rel=0.08)  # U(−2, 2)


def test_random_action_p_replaces_about_p_of_steps():
    victim = _victim("CartPole-v1", [1.0, 0.0], "q")
    recs = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, parse_threat("random_action:p=0.25"), range(8), 0,
                             n_envs=4)
    steps, perturbed = sum(r.length for r in recs), sum(r.perturbed_steps for r in recs)
    assert abs(perturbed / steps - 0.25) < 4.5 * math.sqrt(0.25 * 0.75 / steps)


def test_action_noise_refuses_discrete_agents():
    with pytest.raises(UserError, match="continuous actions; for discrete actions use random_action"):
        parse_threat("action_noise:std=0.1").check_victim(_victim("CartPole-v1", [1.0, 0.0], "q"))


# -- threats with memory ---------------------------------------------------------------------------
def test_obs_delay_known_sequence():
    threat = parse_threat("obs_delay:steps=2")
    state = threat.new_state()
    seen = []
    for t in range(6):
        x = torch.full((1, 3), float(t))
        out, acted = threat.apply(x, None, None, _memory([state], t), torch.ones(1, dtype=torch.bool))
        seen.append(float(out[0, 0]))
        assert bool(acted[0])
    assert seen == [0, 0, 0, 1, 2, 3]


def test_obs_delay_agent_sees_the_observation_k_steps_ago_in_the_engine():
    seen, clean = [], []
    victim = _victim("CartPole-v1", [1.0, 0.0], "q", record=seen)
    evaluate_episodes(lambda: make_env("CartPole-v1"), victim, parse_threat("obs_delay:steps=3"), [0], seed=0,
                      on_inputs=lambda x: clean.extend(x.clone()) and False)
    # the network is called once per step on the input acted on, then on the clean input of
    # checked rows: the acted-on input is the first of each pair
    acted_on = seen[0::2]
    assert len(acted_on) == len(clean) > 5
    for t, x in enumerate(acted_on):
        assert torch.equal(x, clean[max(t - 3, 0)])


def test_frame_freeze_repeats_the_last_reading_for_duration_steps():
    threat = parse_threat("frame_freeze:duration=3")
    state = threat.new_state()
    starts = {3, 4, 8}  # the start at 4 falls inside the first freeze and is ignored
    out, frozen = [], []
    for t in range(12):
        y, acted = threat.apply(torch.full((1, 2), float(t)), None, None, _memory([state], t),
                                torch.tensor([t in starts]))
        out.append(float(y[0, 0]))
        frozen.append(bool(acted[0]))
    assert out == [0, 1, 2, 2, 2, 2, 6, 7, 7, 7, 7, 11]
    assert frozen == [False] * 3 + [True] * 3 + [False] * 2 + [True] * 3 + [False]


def test_frame_freeze_at_the_first_step_holds_the_first_reading():
    threat = parse_threat("frame_freeze:duration=2")
    state = threat.new_state()
    out = [float(threat.apply(torch.full((1, 1), float(t)), None, None, _memory([state], t),
                              torch.tensor([t == 0]))[0][0, 0]) for t in range(4)]
    assert out == [0, 0, 2, 3]


# -- world threats ---------------------------------------------------------------------------------
def _cartpole_step(state, force, gravity=9.8, masscart=1.0, masspole=0.1, length=0.5, tau=0.02):
    """Euler step of the cart-pole equations (Barto et al. 1983), written independently here."""
    x, x_dot, theta, theta_dot = state
    total = masscart + masspole
    temp = (force + masspole * length * theta_dot**2 * math.sin(theta)) / total
    theta_acc = (gravity * math.sin(theta) - math.cos(theta) * temp) / (
        length * (4.0 / 3.0 - masspole * math.cos(theta) ** 2 / total))
    x_acc = temp - masspole * length * theta_acc * math.cos(theta) / total
    return [x + tau * x_dot, x_dot + tau * x_acc, theta + tau * theta_dot, theta_dot + tau * theta_acc]


@pytest.mark.parametrize("param, scale, kwargs", [("length", 4.0, {"length": 2.0}), ("masspole", 3.0, {"masspole": 0.3}),
                                                  ("gravity", 0.5, {"gravity": 4.9}), ("force_mag", 2.0, {})])
def test_cartpole_physics_step_matches_the_equations(param, scale, kwargs):
    env = make_env("CartPole-v1")
    env.reset(seed=0)
    env.unwrapped.state = np.array([0.1, -0.2, 0.05, 0.3])
    snap = snapshot(env)
    threat = parse_threat(f"physics:param={param},scale={scale}")
    threat.enter_world(env)
    shifted = env.step(1)[0]
    threat.exit_world(env)
    restore(env, snap)
    clean = env.step(1)[0]
    force = 10.0 * (2.0 if param == "force_mag" else 1.0)
    expected = _cartpole_step([0.1, -0.2, 0.05, 0.3], force, **kwargs)
    np.testing.assert_allclose(shifted, expected, rtol=1e-5)
    assert not np.allclose(shifted, clean)
    assert env.unwrapped.total_mass == 1.1 and env.unwrapped.polemass_length == pytest.approx(0.05)


def test_pendulum_max_torque_clips_the_agents_torque():
    env = make_env("Pendulum-v1")
    env.reset(seed=0)
    snap = snapshot(env)
    threat = parse_threat("physics:param=max_torque,value=1")
    threat.enter_world(env)
    with_two = env.step(np.array([2.0], dtype=np.float32))[0]
    restore(env, snap)
    threat.exit_world(env)
    with_one = env.step(np.array([1.0], dtype=np.float32))[0]
    np.testing.assert_array_equal(with_two, with_one)  # the env clipped 2 to the new max torque 1
    restore(env, snap)
    assert not np.array_equal(env.step(np.array([2.0], dtype=np.float32))[0], with_one)


@pytest.mark.parametrize("spec, field, expected", [
    ("physics:param=body_mass,scale=2", "body_mass", lambda d: 2 * d),
    ("physics:param=body_mass,body=torso,value=7", "body_mass", lambda d: np.where(np.arange(len(d)) == 1, 7.0, d)),
    ("physics:param=geom_friction,scale=0.5", "geom_friction", lambda d: 0.5 * d),
    ("physics:param=gravity,value=-4.9", "opt.gravity", lambda d: np.array([0.0, 0.0, -4.9])),
    ("physics:param=actuator_gear,value=50", "actuator_gear", lambda d: np.where(np.arange(6) == 0, 50.0, d)),
])
def test_mujoco_physics_is_set_for_the_episode_and_restored_exactly(spec, field, expected):
    env = make_env("Hopper-v5")
    model = env.unwrapped.model
    get = (lambda: model.opt.gravity.copy()) if field == "opt.gravity" else (lambda: getattr(model, field).copy())
    default = get()
    victim = load_victim("zoo:hopper-ppo")
    capped = lambda: gym.wrappers.TimeLimit(env, 30)  # noqa: E731  (the same env, so its model can be read after)
    seen = []
    evaluate_episodes(capped, victim, parse_threat(spec), [0], seed=0, on_episode=seen.append,
                      on_inputs=lambda x: seen.append(get()) and False)
    np.testing.assert_array_equal(seen[0], expected(default))  # set during the episode
    np.testing.assert_array_equal(get(), default)  # restored exactly afterwards
    assert seen[-1].world["value"] == expected(default).tolist() and seen[-1].perturbed_steps == 30


def test_mujoco_mass_changes_the_next_state_from_the_same_snapshot():
    env = make_env("Hopper-v5")
    env.reset(seed=0)
    action = np.full(3, 0.5, dtype=np.float32)
    snap = snapshot(env)
    clean = env.step(action)[0]
    restore(env, snap)
    threat = parse_threat("physics:param=body_mass,scale=3")
    threat.enter_world(env)
    heavy = env.step(action)[0]
    threat.exit_world(env)
    restore(env, snap)
    assert not np.array_equal(clean, heavy)
    np.testing.assert_array_equal(env.step(action)[0], clean)


@pytest.mark.parametrize("env_id, spec, message", [
    ("CartPole-v1", "physics:param=friction,scale=2", "CartPole-v1 has no parameter 'friction'; known: gravity, masscart"),
    ("Hopper-v5", "physics:param=body_mass,body=head,scale=2", "has no body 'head'; bodies: world, torso"),
    ("PongNoFrameskip-v4", "physics:param=gravity,scale=2", "no physics parameters known"),
])
def test_unknown_physics_parameter_is_a_user_error_listing_the_known_ones(env_id, spec, message):
    with pytest.raises(UserError, match=message):
        parse_threat(spec).check_env(make_env(env_id), env_id)


def test_physics_scale_one_equals_clean_episode_by_episode():
    victim = load_victim("zoo:cartpole-dqn")
    env_fn = lambda: gym.wrappers.TimeLimit(make_env("CartPole-v1"), 150)  # noqa: E731
    clean = evaluate_episodes(env_fn, victim, None, range(4), 0, n_envs=2)
    same = evaluate_episodes(env_fn, victim, parse_threat("physics:param=length,scale=1"), range(4), 0, n_envs=2)
    longer = evaluate_episodes(env_fn, victim, parse_threat("physics:param=length,scale=8"), range(4), 0, n_envs=2)
    key = lambda recs: sorted((r.episode, r.episode_return, r.length) for r in recs)  # noqa: E731
    assert key(clean) == key(same)
    assert key(longer) != key(clean)


def test_world_threat_p_changes_whole_episodes():
    victim = load_victim("zoo:cartpole-dqn")
    env_fn = lambda: gym.wrappers.TimeLimit(make_env("CartPole-v1"), 20)  # noqa: E731
    recs = evaluate_episodes(env_fn, victim, parse_threat("physics:param=length,scale=2,p=0.5"), range(40), 0, n_envs=4)
    changed = [r for r in recs if r.world is not None]
    assert 8 <= len(changed) <= 32  # Binomial(40, 0.5): 4 standard deviations
    assert all(r.perturbed_steps == r.length for r in changed)
    assert all(r.perturbed_steps == 0 for r in recs if r.world is None)


# -- every new threat: results independent of n_envs -------------------------------------------------
@pytest.mark.parametrize("env_id, agent, specs", [
    ("CartPole-v1", "zoo:cartpole-ppo", ["random_action:p=0.3", "obs_delay:steps=2,p=0.5",
                                         "frame_freeze:p=0.1,duration=4", "physics:param=masspole,scale=5,p=0.5"]),
    ("Hopper-v5", "zoo:hopper-ppo", ["action_noise:std=0.3,p=0.5", "random_action:p=0.1", "obs_delay:steps=1",
                                     "frame_freeze:p=0.05,duration=3", "physics:param=geom_friction,scale=0.5"]),
])
def test_new_threats_do_not_depend_on_n_envs(env_id, agent, specs):
    victim = load_victim(agent)
    env_fn = lambda: gym.wrappers.TimeLimit(make_env(env_id), 120)  # noqa: E731
    for spec in specs:
        runs = [sorted((r.episode, r.episode_return, r.length, r.perturbed_steps, r.action_changes, r.linf_sum)
                       for r in evaluate_episodes(env_fn, victim, parse_threat(spec), range(5), 3, n_envs=n))
                for n in (1, 4)]
        assert runs[0] == runs[1], spec
        assert any(r[3] > 0 for r in runs[0]), spec  # it acted


@pytest.mark.parametrize("agent, env_id, has, lacks", [
    ("zoo:hopper-ppo", "Hopper-v5", ["obs_delay:steps=1", "action_noise:std=0.1", "physics:param=body_mass,scale=1.5"], []),
    ("zoo:pendulum-td3", "Pendulum-v1", ["action_noise:std=0.1", "physics:param=m,scale=1.5"], []),
    ("zoo:cartpole-dqn", "CartPole-v1", ["obs_delay:steps=1", "physics:param=length,scale=2"], ["action_noise:std=0.1"]),
])
def test_natural_suite_gains_memory_action_and_physics_threats_where_they_apply(agent, env_id, has, lacks):
    from rlgauntlet.threats.suites import suite_specs

    specs = suite_specs("natural", load_victim(agent), None, env_id=env_id)
    assert all(s in specs for s in has) and not any(s in specs for s in lacks)
    for s in specs:  # every entry applies to this agent and env
        threat = parse_threat(s)
        threat.check_victim(load_victim(agent))
        threat.check_env(make_env(env_id), env_id)


def test_new_threats_resume_in_the_store_without_loss_or_duplicates(tmp_path):
    from rlgauntlet import evaluate

    threats = ["physics:param=length,scale=5,p=0.5", "random_action:p=0.3", "frame_freeze:p=0.1,duration=3"]
    store = tmp_path / "s.sqlite"
    evaluate("zoo:cartpole-dqn", "CartPole-v1", threats, episodes=2, n_envs=2, store=store, impact=False)
    resumed = evaluate("zoo:cartpole-dqn", "CartPole-v1", threats, episodes=5, n_envs=2, store=store, resume=True,
                       impact=False)
    fresh = evaluate("zoo:cartpole-dqn", "CartPole-v1", threats, episodes=5, n_envs=2, impact=False)
    strip = lambda r: [(e["spec"], e["returns"], e["lengths"], e["e_adv"], e.get("world_episodes")) for e in r.evaluations]  # noqa: E731
    assert strip(resumed) == strip(fresh)
    assert [e["run_id"] for e in resumed.evaluations] == [1, 2, 3, 4]  # the first runs, continued


def test_records_carry_their_episode_seed():
    victim = _victim("CartPole-v1", [1.0, 0.0], "q")
    recs = evaluate_episodes(lambda: make_env("CartPole-v1"), victim, None, [0, 3, 7], seed=11, n_envs=2)
    assert sorted((r.episode, r.seed) for r in recs) == [(0, 11), (3, 14), (7, 18)]


def test_action_noise_records_the_largest_change_over_action_dimensions():
    """Hopper's 3-D actions: the recorded ℓ∞ is the largest |executed − chosen| over the three
    dimensions, the ℓ2 their norm (known answer from the episode's threat stream)."""
    chosen = torch.tensor([0.5, -0.5, 0.0], dtype=torch.float64)
    victim = _victim("Hopper-v5", chosen.tolist(), "deterministic")
    capped = lambda: gym.wrappers.TimeLimit(make_env("Hopper-v5"), 10)  # noqa: E731
    (rec,) = evaluate_episodes(capped, victim, parse_threat("action_noise:std=0.4"), [0], seed=2)
    g = episode_generator(2, 0, "threat")
    deltas = torch.stack([(chosen + 0.4 * torch.randn((3,), generator=g).double()).clamp(-1, 1) - chosen
                          for _ in range(rec.length)])
    assert rec.linf_sum == pytest.approx(float(deltas.abs().amax(dim=1).sum()), rel=1e-6)
    assert rec.l2_sum == pytest.approx(float(deltas.norm(dim=1).sum()), rel=1e-6)


class _OutOfRange(Threat):
    """A broken action threat: the engine must refuse what it returns."""

    name, place = "out_of_range_test", "action"

    class Params(ThreatParams):
        pass

    def perturb_action(self, actions, victim, rng, memory):
        return torch.full_like(actions, victim.action_space.n)  # one past the last action


def test_an_action_threat_returning_an_impossible_action_is_caught():
    threat = _OutOfRange(_OutOfRange.Params())
    victim = _victim("CartPole-v1", [1.0, 0.0], "q")
    with pytest.raises(RuntimeError, match="returned actions outside Discrete\\(2\\)"):
        evaluate_episodes(lambda: make_env("CartPole-v1"), victim, threat, [0], seed=0)


class _Scale(Threat):
    """A broken (NaN, inf) or an overflowing (huge but finite) observation threat."""

    name, place = "scale_test", "observation"

    class Params(ThreatParams):
        factor: str

    def perturb(self, x, victim, rng):
        return x * float(self.params.factor)


@pytest.mark.parametrize("factor,error,message", [
    ("nan", RuntimeError, "returned a bad perturbation \\(NaN or inf\\): a bug"),
    ("inf", RuntimeError, "returned a bad perturbation \\(NaN or inf\\): a bug"),
    ("1e308", UserError, "too large"),  # finite input: the network or the norm overflows
])
def test_a_threat_that_breaks_the_input_is_told_apart_from_one_that_is_too_large(factor, error, message):
    env = make_env("CartPole-v1")
    net = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2)).double()
    victim = TorchVictim(net, "q", env.observation_space, env.action_space, budget_space="raw")
    with pytest.raises(error, match=message):
        evaluate_episodes(lambda: make_env("CartPole-v1"), victim, _Scale(_Scale.Params(factor=factor)), [0], seed=0)
