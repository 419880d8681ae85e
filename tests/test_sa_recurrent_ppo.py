"""The sequence SA regulariser of SARecurrentPPO: a known answer on a constructed LSTM whose
worst case is a corner of the ε-ball (found by brute force), the perturbation reaching later
steps through the memory, and the wiring of a training step."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch as th

pytest.importorskip("sb3_contrib")

from rlgauntlet.training.defences.sa_recurrent_ppo import SARecurrentPPO, sequence_shift, sgld_sequence  # noqa: E402

BIG = 30.0  # a gate bias that makes the gate 1 to float precision


def _integrator(model: SARecurrentPPO) -> None:
    """Make the policy's mean μ_t = tanh(Σ_{k≤t} tanh(x_k)): an LSTM of one unit whose input,
    forget and output gates are open (biases of 30), whose cell adds tanh(x_t), and a head that
    reads h_t = tanh(c_t). Monotone in every x_k, so the worst case of R over the ℓ∞ ball of the
    sequence is one of its corners."""
    policy = model.policy
    lstm = policy.lstm_actor
    with th.no_grad():
        for name, param in lstm.named_parameters():
            param.zero_()
        # PyTorch's gate order: input, forget, cell (g), output
        lstm.bias_ih_l0[0], lstm.bias_ih_l0[1], lstm.bias_ih_l0[3] = BIG, BIG, BIG
        lstm.weight_ih_l0[2, 0] = 1.0
        policy.action_net.weight.fill_(1.0)
        policy.action_net.bias.zero_()
        policy.log_std.zero_()


def _model() -> SARecurrentPPO:
    return SARecurrentPPO("MlpLstmPolicy", "MountainCarContinuous-v0", n_steps=16, batch_size=16, seed=0,
                          policy_kwargs=dict(lstm_hidden_size=1, net_arch=dict(pi=[], vf=[8])))


def _mean_of(model: SARecurrentPPO):
    policy = model.policy
    states = (th.zeros(1, 1, 1), th.zeros(1, 1, 1))
    starts = th.zeros(3)

    def mean_of(obs: th.Tensor) -> th.Tensor:
        distribution, _ = policy.get_distribution(obs, states, starts)
        return distribution.distribution.mean

    return mean_of


def test_the_constructed_lstm_is_the_integrator():
    model = _model()
    _integrator(model)
    x = th.tensor([[0.3, 0.0], [-0.1, 0.0], [0.2, 0.0]])  # MountainCar's 2 features; the LSTM reads only the first
    model.policy.lstm_actor.weight_ih_l0.data[:, 1] = 0.0
    got = _mean_of(model)(x).flatten()
    expected = np.tanh(np.cumsum(np.tanh([0.3, -0.1, 0.2])))
    np.testing.assert_allclose(got.detach().numpy(), expected, atol=1e-6)


def test_the_sequence_regulariser_finds_the_worst_corner_through_the_memory():
    """Known answer: the maximum over the 2³ corners of the sequence's ball (brute force, and the
    closed form of the two monotone corners) of the mean R; SGLD over the sequence reaches it on
    some seed and never exceeds it (it is an attack), and the maximum with each step perturbed
    alone, its clean history held, is far below: a regulariser that perturbed one step at a time
    would miss the memory."""
    model = _model()
    _integrator(model)
    mean_of = _mean_of(model)
    x = th.tensor([[0.05, 0.0], [-0.02, 0.0], [0.01, 0.0]])
    eps = 0.1
    sigma = th.ones(1)
    clean = mean_of(x).detach()

    def mean_r(perturbed: th.Tensor) -> float:
        return float(sequence_shift(mean_of, x, perturbed, clean, sigma).mean().detach())

    signs = list(itertools.product((-1, 1), repeat=3))
    best = max(mean_r(x + eps * th.tensor([[s0, 0.0], [s1, 0.0], [s2, 0.0]])) for s0, s1, s2 in signs)
    # closed form of the two monotone corners (all +ε, all −ε); the brute-force maximum is one of them
    xs = np.array([0.05, -0.02, 0.01])
    corner = {s: float(np.mean((np.tanh(np.cumsum(np.tanh(xs + s * eps))) - np.tanh(np.cumsum(np.tanh(xs)))) ** 2))
              for s in (-1, 1)}
    assert best == pytest.approx(max(corner.values()), rel=1e-5)
    found = [mean_r(sgld_sequence(mean_of, x, eps, 10, sigma, generator=th.Generator().manual_seed(s)))
             for s in range(8)]
    assert all(f <= best + 1e-9 for f in found)  # an attack: never above the maximum
    # each run climbs towards a corner (the local maxima) from its random first step, in steps of
    # ε/10: a coordinate that started on the other side ends at 0.9ε; some run reaches the best
    assert max(found) == pytest.approx(best, rel=1e-4)
    one_step = max(mean_r(x + eps * th.tensor([[s, 0.0] if k == t else [0.0, 0.0] for k in range(3)]))
                   for t in range(3) for s in (-1, 1))
    assert one_step < 0.5 * min(corner.values())  # one step at a time, the memory's share is missed
    assert min(found) > 1.5 * one_step  # every run of the sequence loop uses the memory


def test_a_training_step_adds_kappa_times_the_regulariser_on_every_minibatch(monkeypatch):
    """Wiring: each minibatch's loss gets κ × regulariser(its own sequences, the ramped ε); with
    the regulariser's value doubled the parameters move differently (it is in the loss)."""
    calls = []
    model = SARecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=32, batch_size=16, n_epochs=2, seed=1,
                           sa_eps=0.1, sa_kappa=0.5, sa_steps=2, ramp_fraction=0.0,
                           policy_kwargs=dict(lstm_hidden_size=8, net_arch=dict(pi=[8], vf=[8])))
    real = SARecurrentPPO.regulariser

    def spy(self, data, eps):
        calls.append((eps, tuple(data.observations.shape), data.lstm_states.pi[0].shape[1]))
        return real(self, data, eps)

    monkeypatch.setattr(SARecurrentPPO, "regulariser", spy)
    model.learn(32)
    assert len(calls) == 2 * 2 and all(eps == pytest.approx(0.1) for eps, _, _ in calls)
    assert all(shape[1] == 3 for _, shape, _ in calls)  # Pendulum's observations, in sequences
    after = {k: v.clone() for k, v in model.policy.state_dict().items()}

    def run(scale: float) -> dict:
        again = SARecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=32, batch_size=16, n_epochs=2, seed=1,
                               sa_eps=0.1, sa_kappa=0.5, sa_steps=2, ramp_fraction=0.0,
                               policy_kwargs=dict(lstm_hidden_size=8, net_arch=dict(pi=[8], vf=[8])))
        monkeypatch.setattr(SARecurrentPPO, "regulariser", lambda self, data, eps: scale * real(self, data, eps))
        again.learn(32)
        return again.policy.state_dict()

    same, doubled = run(1.0), run(2.0)
    assert all(th.allclose(same[k], after[k]) for k in after)  # reproducible: the comparison below means something
    assert any(not th.allclose(doubled[k], after[k]) for k in after)


def test_the_regulariser_refuses_what_its_loss_does_not_implement():
    with pytest.raises(ValueError, match="drop clip_range_vf"):
        SARecurrentPPO("MlpLstmPolicy", "Pendulum-v1", clip_range_vf=0.2)
    with pytest.raises(ValueError, match="Box actions"):
        SARecurrentPPO("MlpLstmPolicy", "CartPole-v1")


@pytest.fixture()
def tiny_lstm_atla(monkeypatch):
    """An LSTM agent recipe on Pendulum and its ATLA preset (SA regulariser on), a few iterations."""
    from rlgauntlet.training import recipes

    monkeypatch.setitem(recipes.PRESETS, "tiny-lstm", recipes.TrainPreset(
        name="tiny-lstm", env_id="Pendulum-v1", algo="recurrent_ppo", total_timesteps=128, n_envs=2, seed=0,
        normalize=True, target_return=-200.0, checkpoint_every=64,
        hyperparams=dict(policy="MlpLstmPolicy", n_steps=32, batch_size=32, n_epochs=1,
                         policy_kwargs=dict(lstm_hidden_size=8, net_arch=dict(pi=[8], vf=[8])))))
    for method in ("atla", "pa_atla"):
        monkeypatch.setitem(recipes.ATLA_PRESETS, f"tiny-lstm-{method}", recipes.ATLAPreset(
            f"tiny-lstm-{method}", "tiny-lstm", method, eps=0.1, total_agent_steps=128, checkpoint_every=1,
            sa_kappa=0.3, agent_overrides={"sa_steps": 2}, adversary={"n_epochs": 1, "batch_size": 32}))
    return monkeypatch


def test_atla_trains_an_lstm_agent_with_the_sequence_regulariser_against_a_recurrent_view(tiny_lstm_atla, tmp_path):
    """Wiring: the agent is SARecurrentPPO, the adversary's MDP steps it as a recurrent victim (one
    memory per episode), the clean games carry its state, and a killed run resumes."""
    from rlgauntlet.training.attackers import attack_mdp
    from rlgauntlet.training.defences.atla import train_atla
    from rlgauntlet.training.recipes import agent_recipe, get_atla_preset

    assert agent_recipe(get_atla_preset("tiny-lstm-atla")).algo == "sa_recurrent_ppo"
    seen = []
    real_init = attack_mdp.AttackVecEnv.__init__

    def spy(self, base, victim, *args, **kwargs):
        seen.append(victim)
        real_init(self, base, victim, *args, **kwargs)

    tiny_lstm_atla.setattr(attack_mdp.AttackVecEnv, "__init__", spy)
    regularised = []
    real_reg = SARecurrentPPO.regulariser
    tiny_lstm_atla.setattr(SARecurrentPPO, "regulariser",
                           lambda self, data, eps: regularised.append(eps) or real_reg(self, data, eps))
    ckpt = train_atla("tiny-lstm-atla", tmp_path / "run", deadline=0.0, log=lambda line: None)  # one iteration
    assert [type(v).__name__ for v in seen] == ["SB3RecurrentVictim"] and seen[0].recurrent
    assert regularised  # the agent's updates carried the regulariser
    first = json.loads((ckpt / "progress.json").read_text())
    assert first["iteration"] == 1 and first["history"][-1]["clean_greedy_return"] < 0  # Pendulum returns
    ckpt = train_atla("tiny-lstm-atla", tmp_path / "run", log=lambda line: None)  # resumed to the end
    again = json.loads((ckpt / "progress.json").read_text())
    assert again["iteration"] == 2 and again["agent_steps"] == 128 and again["finished"]


def test_pa_atla_with_an_lstm_agent_is_refused_in_one_line(tiny_lstm_atla, tmp_path):
    from rlgauntlet.errors import UserError
    from rlgauntlet.training.defences.atla import train_atla

    with pytest.raises(UserError, match="train an LSTM agent with ATLA") as caught:
        train_atla("tiny-lstm-pa_atla", tmp_path / "run", log=lambda line: None)
    assert "\n" not in str(caught.value)


def test_greedy_games_carry_a_recurrent_models_state():
    """Known answer: the games' returns equal RecurrentPPO's own loop with its state carried (a
    predict without state would start each step from zeros and act otherwise)."""
    import gymnasium as gym
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.training.greedy_eval import greedy_returns

    model = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=64, batch_size=32, n_epochs=1, seed=2,
                         policy_kwargs=dict(lstm_hidden_size=8, net_arch=dict(pi=[8], vf=[8])))
    model.learn(64)
    games = greedy_returns(model, make_vec_env("Pendulum-v1", n_envs=2), seed=7)
    expected = []
    for k in range(2):
        env = gym.make("Pendulum-v1")
        obs, _ = env.reset(seed=7 + k)
        state, start, total, done = None, np.ones(1, dtype=bool), 0.0, False
        while not done:
            action, state = model.predict(obs[None], state=state, episode_start=start, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action[0])
            total, start, done = total + float(reward), np.zeros(1, dtype=bool), terminated or truncated
        expected.append(total)
    np.testing.assert_allclose(games, expected, rtol=1e-5)


def test_an_lstm_preset_refuses_an_mlp_agent_to_start_from(tmp_path, cli_env):
    """Bad input: exit 2, one line naming both kinds, nothing written."""
    import subprocess
    import sys

    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "rlgauntlet.cli", "train", "--preset", "hopper-lstm-ppo", "--init-from",
                           "zoo:hopper-ppo", "--run-dir", str(run), "--steps", "2048", "--no-register"],
                          capture_output=True, text=True, env=cli_env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "memoryless (MLP) policy" in lines[0] and "an LSTM policy" in lines[0]
    assert not run.exists()


def test_an_lstm_atla_run_whose_adversary_checkpoint_is_gone_is_refused_on_resume(tiny_lstm_atla, tmp_path):
    import shutil

    from rlgauntlet.errors import UserError
    from rlgauntlet.training.defences.atla import train_atla

    ckpt = train_atla("tiny-lstm-atla", tmp_path / "run", deadline=0.0, log=lambda line: None)
    shutil.rmtree(ckpt / "adversary")
    with pytest.raises(UserError, match="adversary") as caught:
        train_atla("tiny-lstm-atla", tmp_path / "run", log=lambda line: None)
    assert "\n" not in str(caught.value)


def test_whole_sequences_give_the_policys_own_outputs_on_a_real_rollout():
    """Known answer: RecurrentPPO's evaluate_actions on its own minibatches (episode starts inside,
    Pendulum's 200-step episodes in a 512-step rollout) equals the same with the resets moved into
    the initial states, and the fast inputs carry no start at all."""
    from sb3_contrib import RecurrentPPO

    from rlgauntlet.training.defences.sa_recurrent_ppo import whole_sequences

    model = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", n_steps=512, batch_size=128, n_epochs=1, seed=4,
                         policy_kwargs=dict(lstm_hidden_size=8, net_arch=dict(pi=[8], vf=[8])))
    model.learn(512)
    starts_seen = 0
    for data in model.rollout_buffer.get(128):
        starts_seen += int(data.episode_starts.sum())
        states, starts = whole_sequences(data)
        assert float(starts.abs().sum()) == 0.0  # exactly: zeros_like, no start left (bit-exact is the property)
        with th.no_grad():
            slow = model.policy.evaluate_actions(data.observations, data.actions, data.lstm_states, data.episode_starts)
            fast = model.policy.evaluate_actions(data.observations, data.actions, states, starts)
        mask = data.mask > 1e-8
        for a, b in zip(slow[:2], fast[:2]):
            assert th.allclose(a.flatten()[mask], b.flatten()[mask], atol=1e-5)
    assert starts_seen >= 2  # the minibatches did hold episode starts


def test_with_no_regulariser_an_update_is_recurrent_ppos_own():
    """Known answer: with κ = 0, one update of our loop from the same weights, optimizer and rollout
    equals sb3-contrib's RecurrentPPO.train (its clipped surrogate, entropy and value terms, masks,
    advantage normalisation, gradient clip), up to float rounding. Plain SGD (Adam's normalised steps
    would turn rounding differences of a near-zero gradient into visible ones) and a clip range of
    0.0005 (the second update's ratios, within 0.2% of 1, leave it: the clip matters)."""
    import copy

    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.logger import configure

    kwargs = dict(n_steps=256, batch_size=64, n_epochs=4, seed=6, ent_coef=0.01, learning_rate=5e-2, clip_range=0.0005,
                  policy_kwargs=dict(lstm_hidden_size=8, net_arch=dict(pi=[8], vf=[8]), optimizer_class=th.optim.SGD))
    ours = SARecurrentPPO("MlpLstmPolicy", "Pendulum-v1", sa_kappa=0.0, **kwargs)
    ours.learn(256)  # a rollout in the buffer (and one update already done: the ratios are off 1 now)
    theirs = RecurrentPPO("MlpLstmPolicy", "Pendulum-v1", **kwargs)
    theirs.policy.load_state_dict(ours.policy.state_dict())
    theirs.policy.optimizer.load_state_dict(ours.policy.optimizer.state_dict())
    theirs.rollout_buffer = copy.deepcopy(ours.rollout_buffer)
    theirs._current_progress_remaining = ours._current_progress_remaining
    theirs.set_logger(configure(None, []))
    start = {k: v.clone() for k, v in ours.policy.state_dict().items()}
    for model in (ours, theirs):
        np.random.seed(11)  # the buffer's minibatch order
        model.train()
    moved = max(float((v - start[k]).abs().max()) for k, v in ours.policy.state_dict().items())
    assert moved > 1e-3  # the update did something to compare
    for name, value in ours.policy.state_dict().items():
        assert th.allclose(value, theirs.policy.state_dict()[name], atol=1e-6), name
