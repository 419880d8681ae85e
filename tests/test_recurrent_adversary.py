"""An LSTM adversary in alternating training (ATLA-LSTM as released: the adversary is an LSTM policy
too): the live adversary keeps one memory per episode of the agent's envs and moves it every step."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO

from rlgauntlet.common.seeding import BatchRNG
from rlgauntlet.errors import UserError
from rlgauntlet.threats.base import Memory
from rlgauntlet.threats.learned.actor import AttackActor
from rlgauntlet.training.defences.atla import LiveAdversary, train_atla
from rlgauntlet.victims.sb3 import SB3Victim

EPS = 0.05


def _rng() -> BatchRNG:
    return BatchRNG([torch.Generator().manual_seed(k) for k in range(2)])


def _adversary() -> RecurrentPPO:
    """An untrained LSTM director for Pendulum's 3 inputs (SA-RL: its action is the perturbation),
    its sampling noise switched off so that its sample is its mean (log σ = −30)."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    director_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    model = RecurrentPPO("MlpLstmPolicy", env, seed=3, n_steps=8, batch_size=8, device="cpu",
                         policy_kwargs=dict(lstm_hidden_size=6, net_arch=dict(pi=[5], vf=[5])))
    model.action_space = director_space  # the live adversary clips to the director's box
    with torch.no_grad():
        model.policy.log_std.fill_(-30.0)
        for param in model.policy.parameters():  # weights large enough that the state matters
            if param is not model.policy.log_std:
                param.mul_(3.0)
    return model


def test_the_live_lstm_adversary_steps_each_episode_as_its_own_sequence():
    """Known answer: each row's perturbation at each step is ε × clip(the action sb3-contrib's own
    predict gives for that row's sequence of inputs since its episode started), whether or not the
    row was scheduled at earlier steps; a row whose episode restarts starts from a zero state."""
    adversary = _adversary()
    threat = LiveAdversary(adversary, AttackActor("sarl", EPS))
    assert threat.recurrent
    victim = SB3Victim.from_model(PPO("MlpPolicy", "Pendulum-v1", device="cpu"))
    rng = np.random.default_rng(0)
    inputs = torch.as_tensor(rng.uniform(-0.5, 0.5, size=(6, 2, 3)), dtype=torch.float32)
    scheduled = [torch.tensor([True, True]), torch.tensor([True, False]), torch.tensor([False, False]),
                 torch.tensor([False, True]), torch.tensor([True, True]), torch.tensor([True, True])]
    restart = {4: 1}  # row 1's episode ends after step 3: a new one starts at step 4
    states = [threat.new_state(), threat.new_state()]
    starts = {0: 0, 1: 0}
    outs = []
    for t in range(6):
        for row in [r for s, r in restart.items() if s == t]:
            states[row], starts[row] = threat.new_state(), t
        memory = Memory(states, torch.tensor([t - starts[0], t - starts[1]]))
        out, acted = threat.apply(inputs[t], victim, _rng(), memory, scheduled[t])
        assert torch.equal(acted, scheduled[t])  # booleans: exact equality is the property
        outs.append(out)
    for row in (0, 1):
        state = None
        for t in range(6):
            begins = t == 0 or (row == 1 and t == 4)
            action, state = adversary.policy.predict(inputs[t, row:row + 1].numpy(), state=state,
                                                     episode_start=np.array([begins]), deterministic=True)
            expected = inputs[t, row] + EPS * torch.as_tensor(np.clip(action[0], -1, 1), dtype=torch.float32)
            if not scheduled[t][row]:
                expected = inputs[t, row]
            assert torch.allclose(outs[t][row], expected, atol=1e-5), (row, t)
    # the state mattered: a memoryless step from zeros at step 5 acts otherwise
    fresh = LiveAdversary(adversary, AttackActor("sarl", EPS))
    alone, _ = fresh.apply(inputs[5], victim, _rng(),
                           Memory([fresh.new_state(), fresh.new_state()], torch.zeros(2)), torch.tensor([True, True]))
    assert not torch.allclose(alone[0], outs[5][0], atol=1e-4)


def test_a_memoryless_adversary_keeps_no_state():
    model = PPO("MlpPolicy", "Pendulum-v1", device="cpu")
    threat = LiveAdversary(model, AttackActor("sarl", EPS))
    assert not threat.recurrent and threat.new_state() is None


@pytest.fixture()
def tiny_lstm_adversary(monkeypatch):
    """A CartPole ATLA preset whose adversary is an LSTM policy, a few iterations."""
    from rlgauntlet.training import recipes

    for name, push in (("tiny-lstm-adversary", 0.0), ("tiny-lstm-adversary-pool", 0.5)):
        monkeypatch.setitem(recipes.ATLA_PRESETS, name, recipes.ATLAPreset(
            name, "cartpole-ppo", "atla", eps=0.1, total_agent_steps=2 * 256, checkpoint_every=1,
            agent_overrides={"n_epochs": 1}, adversary={"n_epochs": 1, "batch_size": 64}, adversary_recurrent=True,
            push_share=push))
    return monkeypatch


def test_an_atla_run_trains_an_lstm_adversary_and_plays_it_with_memory(tiny_lstm_adversary, tmp_path):
    """Wiring: the adversary is RecurrentPPO's policy trained by the sequence loop with no
    regulariser, the agent's envs play it through its per-episode memory, the run records the
    setting and resumes."""
    from rlgauntlet.training.defences.sa_recurrent_ppo import SARecurrentPPO

    seen = []
    real_apply = LiveAdversary.apply

    def spy(self, x, victim, rng, memory, scheduled):
        seen.append([state["lstm"][0].clone() for state in memory.states])
        return real_apply(self, x, victim, rng, memory, scheduled)

    tiny_lstm_adversary.setattr(LiveAdversary, "apply", spy)
    built = []
    real_init = SARecurrentPPO.__init__
    tiny_lstm_adversary.setattr(SARecurrentPPO, "__init__",
                                lambda self, *a, **k: built.append(k.get("sa_kappa")) or real_init(self, *a, **k))
    ckpt = train_atla("tiny-lstm-adversary", tmp_path / "run", deadline=0.0, log=lambda line: None)
    assert built == [0.0]  # the adversary (the agent is plain PPO): no regulariser
    progress = json.loads((ckpt / "progress.json").read_text())
    assert progress["config"]["adversary_recurrent"] is True and progress["iteration"] == 1
    applied = progress["history"][-1]["applied"]["agent_envs"]  # measured in the agent's envs, not assumed
    assert applied["perturbed_steps"] == applied["steps"] > 0 and 0 < applied["linf_max"] <= 0.1 + 1e-6
    assert len(seen) > 5 and all(h.shape == (1, 1, 64) for h in seen[0])
    assert all(float(h.abs().sum()) == 0.0 for h in seen[0])  # each episode starts from zeros
    assert any(float(h.abs().sum()) > 0.0 for h in seen[5])  # and remembers after a few steps
    state = torch.load(ckpt / "adversary" / "policy.pt", weights_only=True)
    assert "lstm_actor.weight_ih_l0" in state
    ckpt = train_atla("tiny-lstm-adversary", tmp_path / "run", log=lambda line: None)  # resumed to the end
    again = json.loads((ckpt / "progress.json").read_text())
    assert again["iteration"] == 2 and again["finished"]
    assert [r["exact"] for r in again["resumes"]] == [True], again["resumes"]  # the memories are data too


def test_a_recurrent_adversary_in_a_push_pool_is_refused_before_anything_is_written(tiny_lstm_adversary, tmp_path):
    with pytest.raises(UserError, match="a recurrent adversary trains without pushes") as caught:
        train_atla("tiny-lstm-adversary-pool", tmp_path / "run", log=lambda line: None)
    assert "\n" not in str(caught.value) and not (tmp_path / "run").exists()
