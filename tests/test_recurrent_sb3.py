"""sb3-contrib RecurrentPPO agents as victims: read as data, acting as RecurrentPPO's own
``predict`` acts (its LSTM state carried through an episode, reset at each start), through the
engine with one state per episode whatever the number of envs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("sb3_contrib")

from rlgauntlet.engine.rollout import evaluate_episodes  # noqa: E402
from rlgauntlet.victims import load_victim  # noqa: E402
from rlgauntlet.victims.sb3 import SB3RecurrentVictim  # noqa: E402


def _agent(tmp_path, env_id: str):
    """A RecurrentPPO agent after a few updates (weights away from their initialisation), saved."""
    from sb3_contrib import RecurrentPPO

    model = RecurrentPPO("MlpLstmPolicy", env_id, n_steps=64, batch_size=32, n_epochs=2, seed=3,
                         policy_kwargs=dict(lstm_hidden_size=16, net_arch=dict(pi=[32], vf=[32])))
    model.learn(128)
    path = tmp_path / "rppo.zip"
    model.save(path)
    return model, path


def _own_loop(model, env_id: str, seed: int, steps: int):
    """RecurrentPPO's own acting: observations seen and actions taken (deterministic)."""
    import gymnasium as gym

    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    state, start = None, np.ones((1,), dtype=bool)
    seen, actions, total = [], [], 0.0
    for _ in range(steps):
        action, state = model.predict(obs[None], state=state, episode_start=start, deterministic=True)
        seen.append(obs)
        actions.append(action[0])
        obs, reward, terminated, truncated, _ = env.step(action[0])
        total += float(reward)
        start = np.zeros((1,), dtype=bool)
        if terminated or truncated:
            break
    env.close()
    return np.array(seen), np.array(actions), total


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_a_recurrent_agent_acts_as_recurrent_ppo_does_step_by_step(tmp_path, env_id):
    """Known answer: RecurrentPPO's own predict on an episode's observations. A victim that reset
    its state every step, or never advanced it, or used the critic's LSTM, gives other actions
    after the first step (checked: the state matters on these observations)."""
    model, path = _agent(tmp_path, env_id)
    victim = load_victim(f"sb3:{path}", precision="float32")
    assert isinstance(victim, SB3RecurrentVictim) and victim.recurrent
    assert victim.kind == ("gaussian" if env_id == "Pendulum-v1" else "categorical")
    seen, expected, _ = _own_loop(model, env_id, seed=5, steps=40)
    state, got, frozen = victim.initial_state(), [], []
    for obs in seen:
        x = victim.preprocess(obs[None])
        victim.use_state([state])
        got.append(victim.actions(victim.forward(x)).cpu().numpy()[0])
        victim.use_state([victim.initial_state()])
        frozen.append(victim.actions(victim.forward(x)).cpu().numpy()[0])
        victim.use_state([state])
        [state] = victim.advance_state(x)
    got = np.array(got)
    if env_id == "Pendulum-v1":  # SB3's predict clips to the action bounds; the engine clips as well
        got = np.clip(got, -2.0, 2.0)
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert np.abs(np.clip(np.array(frozen), -2, 2) - expected).max() > 1e-3  # the state matters here
    else:
        np.testing.assert_array_equal(got, expected)


def test_the_engine_carries_one_state_per_episode_whatever_the_envs(tmp_path):
    """Episode returns through the engine equal RecurrentPPO's own loop on the same env seeds, with
    one env or three side by side (three episodes starting and ending at different steps)."""
    model, path = _agent(tmp_path, "Pendulum-v1")
    victim = load_victim(f"sb3:{path}", precision="float32")
    import gymnasium as gym

    expected = [_own_loop(model, "Pendulum-v1", seed=10 + k, steps=200)[2] for k in range(3)]
    for n_envs in (1, 3):
        records = evaluate_episodes(lambda: gym.make("Pendulum-v1"), victim, None, [0, 1, 2], 10, n_envs, True)
        got = [r.episode_return for r in sorted(records, key=lambda r: r.episode)]
        np.testing.assert_allclose(got, expected, rtol=1e-4)


def test_a_gradient_attack_runs_on_a_recurrent_sb3_agent_within_its_budget(tmp_path):
    """FGSM needs the input gradient of one step with the state held: it must run and stay in its budget."""
    from rlgauntlet.threats import parse_threat

    _, path = _agent(tmp_path, "Pendulum-v1")
    victim = load_victim(f"sb3:{path}")
    threat = parse_threat("fgsm:eps=0.05,objective=maxdiff")
    import gymnasium as gym

    records = evaluate_episodes(lambda: gym.make("Pendulum-v1"), victim, threat, [0], 0, 1, True)
    assert records[0].length == 200
    assert 0.0 < records[0].linf_max <= 0.05 + 1e-9 and records[0].perturbed_steps == 200
    with pytest.raises(NotImplementedError, match="not a chain of layers"):
        victim.layer_chain()
    assert torch.is_tensor(victim.initial_state()[0])


def test_an_lstm_preset_trains_resumes_and_gives_a_recurrent_victim(tmp_path, monkeypatch):
    """The Hopper LSTM recipe builds sb3-contrib's RecurrentPPO with the released config's LSTM
    (64 units, a critic LSTM); a short run of it (smaller rollouts) checkpoints, resumes, and its
    model loads as a recurrent victim that plays Hopper through the engine."""
    import dataclasses

    import gymnasium as gym
    from sb3_contrib import RecurrentPPO

    from rlgauntlet.training import recipes
    from rlgauntlet.training.kit import build_env, build_model
    from rlgauntlet.training.sb3_train import train_preset

    preset = recipes.get_preset("hopper-lstm-ppo")
    model = build_model(preset, build_env(preset, tmp_path / "probe", None, False), "cpu")
    # the release's LSTM path: one full-batch step per epoch, the value function at 1e-2, no clipping
    assert isinstance(model, RecurrentPPO) and model.n_steps == 2048 and model.batch_size == 2048
    assert [g["lr"] for g in model.policy.optimizer.param_groups] == pytest.approx([1e-3, 1e-2])
    assert model.max_grad_norm == float("inf")
    assert model.policy.lstm_actor.hidden_size == 64 and model.policy.lstm_critic is not None
    small = dataclasses.replace(preset, hyperparams={**preset.hyperparams, "n_steps": 64, "batch_size": 32,
                                                     "n_epochs": 1})
    monkeypatch.setitem(recipes.PRESETS, "hopper-lstm-ppo", small)
    ckpt = train_preset("hopper-lstm-ppo", tmp_path / "run", total_timesteps=64, log=lambda line: None)
    ckpt = train_preset("hopper-lstm-ppo", tmp_path / "run", total_timesteps=128, log=lambda line: None)
    progress = (ckpt / "progress.json").read_text()
    assert '"num_timesteps": 128' in progress
    victim = load_victim(f"sb3:{ckpt / 'model.zip'}", vecnormalize=str(ckpt / "vecnormalize.pkl"))
    assert isinstance(victim, SB3RecurrentVictim) and victim.budget_space == "normalized"
    [record] = evaluate_episodes(lambda: gym.make("Hopper-v5"), victim, None, [0], 0, 1, True)
    assert record.length >= 1


def test_acting_then_advancing_on_one_input_runs_the_lstm_once_and_changes_no_number(tmp_path, monkeypatch):
    """The engine acts on x̃ and then advances the state with it: one LSTM step, not two. Counted
    with a hook on the actor's LSTM over a 200-step episode (clean: 1 call a step, was 2; under FGSM
    with the clean action compared, besides the gradient's own forward: the reference on x, the
    check of x̃ inside the attack, the step on x̃: 3 calls a step, was 5), and
    the episodes' returns and perturbations equal bit for bit those of the victim with nothing
    kept (the kept step is the same tensors, so bit-exactness is the property here)."""
    import gymnasium as gym

    from rlgauntlet.threats import parse_threat
    from rlgauntlet.victims.base import HeldStateSteps

    _, path = _agent(tmp_path, "Pendulum-v1")
    calls = []

    def run(threat):
        victim = load_victim(f"sb3:{path}")
        hook = victim.policy.lstm_actor.register_forward_hook(lambda *a: calls.append(torch.is_grad_enabled()))
        records = evaluate_episodes(lambda: gym.make("Pendulum-v1"), victim, threat, [0], 0, 1, True)
        hook.remove()
        return [(r.episode_return, r.linf_sum, r.action_changes) for r in records]

    kept_clean, kept_fgsm = run(None), None
    assert len(calls) == 200
    calls.clear()
    kept_fgsm = run(parse_threat("fgsm:eps=0.05,objective=maxdiff"))
    assert sum(not grad for grad in calls) == 600 and sum(calls) == 200
    calls.clear()
    monkeypatch.setattr(HeldStateSteps, "step", lambda self, x, held, compute: compute())
    assert run(None) == kept_clean and len(calls) == 200 * 2
    calls.clear()
    assert run(parse_threat("fgsm:eps=0.05,objective=maxdiff")) == kept_fgsm
    assert sum(not grad for grad in calls) == 1000 and sum(calls) == 200


def test_a_kept_step_never_stands_in_for_one_that_needs_a_gradient(tmp_path):
    """After a no-grad forward on x, a forward on the same x under autograd has its graph (an
    attack's gradient is non-zero); a state advanced while autograd records carries no graph; an
    input changed in place, or the same input from other held states, is stepped again."""
    _, path = _agent(tmp_path, "Pendulum-v1")
    victim = load_victim(f"sb3:{path}", precision="float32")
    victim.use_state([victim.initial_state(), victim.initial_state()])
    x = torch.randn(2, 3)
    with torch.no_grad():
        before = victim.forward(x).mean.clone()
    z = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(victim.forward(z).mean.sum(), z)
    assert grad.abs().sum() > 0
    states = victim.advance_state(x)
    assert all(h.grad_fn is None and c.grad_fn is None for h, c in states)
    x.add_(1.0)  # in place: a new input
    with torch.no_grad():
        after = victim.forward(x).mean.clone()
        assert not torch.allclose(after, before, atol=1e-4)  # stepped again (a kept step would equal `before`)
        victim.use_state(states)  # other states held: the same input is another step
        assert not torch.allclose(victim.forward(x).mean, after, atol=1e-4)


def test_the_release_net_preset_has_the_released_lstm_policys_shape_on_hopper():
    """Known answer from the release's code (policy_gradients CtsLSTMPolicy with hidden sizes (64,
    64) on Hopper's 11 numbers and 3 actions): embedding (64, 11), LSTM input and recurrent
    weights (256, 64) each, output (3, 64), in that order; the value network the same with one
    output; nothing between the LSTM and the heads."""
    from rlgauntlet.envs.presets import make_train_vec_env
    from rlgauntlet.training.kit import build_model
    from rlgauntlet.training.recipes import PRESETS, agent_recipe, get_atla_preset

    recipe = PRESETS["hopper-lstm-ppo-release-net"]
    env = make_train_vec_env(recipe.env_id, 1, 0)
    policy = build_model(recipe, env, "cpu").policy
    env.close()
    def weights(*modules):
        return [tuple(p.shape) for m in modules for n, p in m.named_parameters() if "weight" in n]

    assert policy.pi_features_extractor is not policy.vf_features_extractor
    assert weights(policy.pi_features_extractor, policy.lstm_actor, policy.action_net) == \
        [(64, 11), (256, 64), (256, 64), (3, 64)]
    assert weights(policy.vf_features_extractor, policy.lstm_critic, policy.value_net) == \
        [(64, 11), (256, 64), (256, 64), (1, 64)]
    assert not any(p.numel() for p in policy.mlp_extractor.parameters())
    assert not any(isinstance(m, torch.nn.Tanh) for m in policy.pi_features_extractor.modules())
    assert agent_recipe(get_atla_preset("hopper-atla-lstm-sappo-release-net")).hyperparams["policy_kwargs"] == \
        recipe.hyperparams["policy_kwargs"]


def test_an_agent_on_the_linear_embedding_loads_as_data_and_acts_as_recurrent_ppo_does(tmp_path):
    """The extractor is on the allow-list: the saved agent loads without unpickling code and its
    actions equal RecurrentPPO's own predict over an episode (the state carried)."""
    from sb3_contrib import RecurrentPPO

    from rlgauntlet.victims.linear_embedding import LinearEmbedding

    model = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=64, batch_size=32, n_epochs=2, seed=3,
                         policy_kwargs=dict(features_extractor_class=LinearEmbedding,
                                            features_extractor_kwargs=dict(features_dim=8), share_features_extractor=False,
                                            lstm_hidden_size=16, net_arch=dict(pi=[], vf=[])))
    model.learn(128)
    model.save(tmp_path / "rppo.zip")
    victim = load_victim(f"sb3:{tmp_path / 'rppo.zip'}", precision="float32")
    seen, expected, _ = _own_loop(model, "Pendulum-v1", seed=5, steps=40)
    state, got = victim.initial_state(), []
    for obs in seen:
        x = victim.preprocess(obs[None])
        victim.use_state([state])
        got.append(victim.actions(victim.forward(x)).cpu().numpy()[0])
        [state] = victim.advance_state(x)
    np.testing.assert_allclose(np.clip(np.array(got), -2.0, 2.0), expected, atol=1e-5)
