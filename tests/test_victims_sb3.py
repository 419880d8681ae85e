"""SB3 adapter round trips: train, save, load through ``sb3:``, same actions as SB3."""

import numpy as np
import pytest
import torch

from rlgauntlet.envs import make_env
from rlgauntlet.errors import UserError
from rlgauntlet.victims import load_victim


def _primary(out):
    return {"q": out.q, "categorical": out.logits, "gaussian": out.mean, "deterministic": out.action}[out.kind]


@pytest.mark.parametrize(
    "name, kind",
    [("ppo", "categorical"), ("a2c", "categorical"), ("dqn", "q"), ("sac", "gaussian"),
     ("td3", "deterministic"), ("ddpg", "deterministic"), ("ppo_cont", "gaussian")],
)
def test_sb3_round_trip_same_actions(tiny_models, name, kind):
    import stable_baselines3 as sb3

    path = tiny_models[name]
    algo = {"ppo_cont": "ppo"}.get(name, name)
    victim = load_victim(f"sb3:{path}")
    assert victim.kind == kind
    assert victim.description["algorithm"] == algo  # read from the zip
    model = getattr(sb3, algo.upper()).load(path, device="cpu")
    env = make_env("CartPole-v1" if victim.is_discrete else "Pendulum-v1")
    env.observation_space.seed(0)
    obs = np.stack([env.observation_space.sample() for _ in range(64)]).astype(np.float32)
    if victim.is_discrete:
        obs = np.clip(obs, -3, 3)
    expected, _ = model.predict(obs, deterministic=True)
    got = victim.act(obs)
    if victim.is_discrete:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # The layer chain computes the same primary output as forward (bounds will walk it).
    x = victim.preprocess(obs)
    y = x
    for layer in victim.layer_chain():
        y = layer(y)
    torch.testing.assert_close(y, _primary(victim.forward(x)))


def test_explicit_algorithm_suffix(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['a2c']}:a2c")
    assert victim.description["algorithm"] == "a2c"


def test_forward_is_differentiable_in_input(tiny_models):
    victim = load_victim(f"sb3:{tiny_models['dqn']}")
    x = torch.zeros(3, 4, requires_grad=True)
    victim.forward(x).q.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert all(not p.requires_grad for p in victim.policy.parameters())


@pytest.fixture(scope="module")
def vecnormalize_model(tmp_path_factory):
    """A PPO Pendulum agent trained briefly with VecNormalize: (model, venv, folder)."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    folder = tmp_path_factory.mktemp("vecnorm")
    venv = VecNormalize(make_vec_env("Pendulum-v1", n_envs=1, seed=0))
    model = sb3.PPO("MlpPolicy", venv, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(512)
    model.save(folder / "m.zip")
    venv.save(str(folder / "vn.pkl"))
    return model, venv, folder


def test_vecnormalize_statistics_are_applied(vecnormalize_model):
    model, venv, tmp_path = vecnormalize_model
    victim = load_victim(f"sb3:{tmp_path / 'm.zip'}", vecnormalize=tmp_path / "vn.pkl")
    assert victim.budget_space == "normalized"
    obs = np.random.default_rng(0).uniform(-1, 1, size=(16, 3)).astype(np.float32)
    venv.training = False
    expected, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
    np.testing.assert_allclose(victim.act(obs), expected, rtol=1e-5, atol=1e-5)
    assert victim.input_bounds == (-10.0, 10.0)


def test_an_agent_with_vecnormalize_pkl_beside_it_is_refused_without_its_statistics(vecnormalize_model, tmp_path):
    import shutil

    model, venv, folder = vecnormalize_model
    shutil.copy(folder / "m.zip", tmp_path / "model.zip")
    shutil.copy(folder / "vn.pkl", tmp_path / "vecnormalize.pkl")  # SB3's convention, and our checkpoints'
    with pytest.raises(UserError, match="has VecNormalize statistics beside it .*pass --vecnormalize"):
        load_victim(f"sb3:{tmp_path / 'model.zip'}")  # raw observations into a normalised agent: wrong numbers
    with_stats = load_victim(f"sb3:{tmp_path / 'model.zip'}", vecnormalize=tmp_path / "vecnormalize.pkl")
    raw = load_victim(f"sb3:{tmp_path / 'model.zip'}", vecnormalize="none")  # said out loud: no statistics
    assert with_stats.budget_space == "normalized" and raw.vecnormalize is None


def test_unreadable_checkpoint_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"this is not a zip")
    with pytest.raises(UserError, match="cannot read .* as a Stable-Baselines3 model"):
        load_victim(f"sb3:{bad}")
    with pytest.raises(UserError, match="not found"):
        load_victim(f"sb3:{tmp_path / 'missing.zip'}")
    with pytest.raises(UserError, match="no source prefix"):
        load_victim("model.zip")


def _atari_model(env_id: str, tmp_path):
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from rlgauntlet.envs.presets import _register_ale

    _register_ale()
    venv = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=0), 4)
    model = sb3.PPO("CnnPolicy", venv, seed=0, device="cpu", n_steps=16, batch_size=16, n_epochs=1)
    path = tmp_path / "atari.zip"
    model.save(path)
    return model, path, venv


def test_atari_cnn_policy_same_actions_on_env_frames(tmp_path):
    model, path, _ = _atari_model("PongNoFrameskip-v4", tmp_path)
    victim = load_victim(f"sb3:{path}")
    assert victim.budget_space == "pixel01" and victim.input_bounds == (0.0, 1.0)
    env = make_env("PongNoFrameskip-v4")
    victim.check_env(env.observation_space, env.action_space, "PongNoFrameskip-v4")
    obs, _ = env.reset(seed=3)
    frames = []
    for t in range(40):
        frames.append(obs)
        obs, *_ = env.step(t % env.action_space.n)
    batch = np.stack(frames)
    assert batch.shape == (40, 84, 84, 4)
    expected, _ = model.predict(batch, deterministic=True)
    np.testing.assert_array_equal(victim.act(batch), expected)
    x = victim.preprocess(batch)
    assert x.shape == (40, 4, 84, 84) and float(x.min()) >= 0.0 and float(x.max()) <= 1.0


@pytest.mark.parametrize("env_id", ["PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"])
def test_atari_return_matches_sb3_evaluate_policy(tmp_path, env_id):
    """Episode 0 with seed s is the first episode SB3 plays on make_atari_env(seed=s):
    the same game, the same raw score (Breakout exercises the life-loss handling)."""
    from stable_baselines3.common.evaluation import evaluate_policy

    from rlgauntlet.engine.rollout import evaluate_episodes

    model, path, venv = _atari_model(env_id, tmp_path)
    returns, _ = evaluate_policy(model, venv, n_eval_episodes=1, deterministic=True, return_episode_rewards=True)
    victim = load_victim(f"sb3:{path}")
    (record,) = evaluate_episodes(lambda: make_env(env_id), victim, None, [0], seed=0)
    assert record.episode_return == returns[0]


def test_vecnormalize_agent_scores_what_sb3_evaluate_policy_scores(vecnormalize_model):
    """Episode 0 with seed s is SB3's first episode on make_vec_env(seed=s) + VecNormalize."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.engine.rollout import evaluate_episodes

    model, _, tmp_path = vecnormalize_model
    eval_env = VecNormalize.load(str(tmp_path / "vn.pkl"), make_vec_env("Pendulum-v1", n_envs=1, seed=5))
    eval_env.training, eval_env.norm_reward = False, False
    returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=1, deterministic=True, return_episode_rewards=True)
    victim = load_victim(f"sb3:{tmp_path / 'm.zip'}", vecnormalize=tmp_path / "vn.pkl", precision="float32")
    (record,) = evaluate_episodes(lambda: make_env("Pendulum-v1"), victim, None, [0], seed=5)
    assert record.episode_return == pytest.approx(returns[0], rel=1e-5)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_live_model_victim_leaves_the_trainer_model_untouched(algo):
    """A PGD attack through SB3Victim.from_model changes nothing the trainer owns: dtype,
    requires_grad, train/eval mode; learn() then goes on and the parameters still get gradients."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from rlgauntlet.common.seeding import BatchRNG, episode_generator
    from rlgauntlet.threats import parse_threat
    from rlgauntlet.victims.sb3 import SB3Victim

    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0))
    kwargs = dict(n_steps=64, batch_size=32, n_epochs=1) if algo == "ppo" else dict(learning_starts=32, train_freq=16)
    model = getattr(sb3, algo.upper())("MlpPolicy", env, seed=0, policy_kwargs=dict(net_arch=[16]), **kwargs)
    model.learn(128)
    model.policy.set_training_mode(True)
    modes = [m.training for m in model.policy.modules()]
    victim = SB3Victim.from_model(model)
    assert victim.kind == ("categorical" if algo == "ppo" else "q") and victim.budget_space == "normalized"
    obs = env.get_original_obs()
    x = victim.preprocess(obs)
    np.testing.assert_allclose(x.numpy(), env.normalize_obs(obs), rtol=1e-5)  # the live statistics
    rng = BatchRNG([episode_generator(0, k, "threat") for k in range(2)])
    adv = parse_threat("pgd:eps=0.1,steps=5").perturb(x, victim, rng)
    assert float((adv - x).abs().max()) == pytest.approx(0.1, rel=1e-5)
    params = list(model.policy.parameters())
    assert all(p.dtype == torch.float32 and p.requires_grad for p in params)
    assert model.policy.training and [m.training for m in model.policy.modules()] == modes
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = None
    model.learn(256, reset_num_timesteps=False)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    # the victim follows the trained weights (it holds the trainer's policy, not a copy)
    assert victim.policy is model.policy


def test_the_canonical_copy_of_a_zip_depends_only_on_the_model(tiny_models, tmp_path):
    """Two saves of one model differ in their dates, in the training's start time and in the addresses
    SB3 writes into ``data``;
    their canonical copies are byte for byte the same, still load (in SB3 and here, with the same
    actions), and a model with other weights gets another file."""
    import hashlib
    import re
    import zipfile

    import stable_baselines3 as sb3

    from rlgauntlet.victims.sb3_files import write_canonical_zip

    source = tiny_models["ppo"]
    with zipfile.ZipFile(source) as archive:
        entries = [(info, archive.read(info.filename)) for info in archive.infolist()]
    assert re.search(rb" at 0x[0-9a-f]+>", dict((i.filename, p) for i, p in entries)["data"])
    other_process = tmp_path / "other.zip"  # what another process writes a second later
    with zipfile.ZipFile(other_process, "w") as archive:
        for info, payload in entries:
            if info.filename == "data":
                payload = re.sub(rb" at 0x[0-9a-f]+>", b" at 0xdeadbeef>", payload)
                payload = re.sub(rb'"start_time": [0-9]+', b'"start_time": 1796121292522851643', payload)
            info.date_time = (2031, 5, 17, 12, 0, 2)
            archive.writestr(info, payload)
    assert hashlib.sha256(other_process.read_bytes()).digest() != hashlib.sha256(source.read_bytes()).digest()
    write_canonical_zip(source, tmp_path / "a.zip")
    write_canonical_zip(other_process, tmp_path / "b.zip")
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert b" at 0x" not in archive.read("data")
    obs = np.random.default_rng(0).uniform(-0.5, 0.5, (32, 4)).astype(np.float32)
    expected = load_victim(f"sb3:{source}").act(obs)
    np.testing.assert_array_equal(load_victim(f"sb3:{tmp_path / 'a.zip'}").act(obs), expected)
    np.testing.assert_array_equal(sb3.PPO.load(tmp_path / "a.zip", device="cpu").predict(obs, deterministic=True)[0],
                                  expected)
    model = sb3.PPO.load(source, device="cpu")
    with torch.no_grad():
        next(model.policy.parameters()).add_(1e-3)
    model.save(tmp_path / "changed.zip")
    write_canonical_zip(tmp_path / "changed.zip", tmp_path / "c.zip")
    assert (tmp_path / "c.zip").read_bytes() != (tmp_path / "a.zip").read_bytes()
