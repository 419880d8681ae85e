"""Env snapshots: after restore, the same actions give bit-identical observations, rewards,
terminations and raw returns, across resets and life losses."""

import numpy as np
import pytest

from rlgauntlet.envs import make_env, restore, snapshot


def _play(env, actions):
    """Step ``actions``; reset (unseeded, as the engine's soft reset) whenever an episode ends."""
    out = []
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        out.append((obs.copy(), reward, terminated, truncated, info.get("raw_return"), info.get("real_done")))
        if terminated or truncated:
            out.append((env.reset()[0].copy(),))
    return out


def _same(a, b):
    return len(a) == len(b) and all(all(np.array_equal(x, y) for x, y in zip(p, q)) for p, q in zip(a, b))


@pytest.mark.parametrize("env_id, warm, steps", [
    ("CartPole-v1", 5, 300),          # crosses resets: the reset draws from the env's RNG
    ("Pendulum-v1", 5, 250),          # crosses the 200-step time limit
    ("Hopper-v5", 20, 300),           # falls and resets
    ("PongNoFrameskip-v4", 100, 1100),  # frame stack, max-pool buffer, a game over, no-op reset
])
def test_restore_replays_bit_identically(env_id, warm, steps):
    env = make_env(env_id)
    env.action_space.seed(0)
    env.reset(seed=3)
    actions = [env.action_space.sample() for _ in range(warm + steps)]
    _play(env, actions[:warm])
    snap = snapshot(env)
    first = _play(env, actions[warm:])
    assert any(len(r) == 1 for r in first), "the replay should cross a reset"
    restore(env, snap)
    second = _play(env, actions[warm:])
    restore(env, snap)  # a snapshot can be restored again
    third = _play(env, actions[warm:])
    assert _same(first, second) and _same(first, third)


def test_restore_after_a_lost_life_keeps_the_game_state():
    """Breakout has lives: the episodic-life wrapper state (lives, was_real_done) comes back too."""
    env = make_env("BreakoutNoFrameskip-v4")
    env.action_space.seed(1)
    env.reset(seed=0)
    actions = [env.action_space.sample() for _ in range(600)]
    snap = snapshot(env)
    first = _play(env, actions)
    assert any(r[2] and not r[5] for r in first if len(r) > 1), "a life should be lost"
    restore(env, snap)
    assert _same(first, _play(env, actions))


def test_different_actions_after_restore_diverge():
    env = make_env("Hopper-v5")
    env.reset(seed=0)
    snap = snapshot(env)
    a = env.step(np.full(3, 1.0, dtype=np.float32))[0]
    restore(env, snap)
    b = env.step(np.full(3, -1.0, dtype=np.float32))[0]
    assert not np.array_equal(a, b)


def test_snapshot_belongs_to_its_env():
    env, other = make_env("CartPole-v1"), make_env("CartPole-v1")
    env.reset(seed=0)
    other.reset(seed=0)
    with pytest.raises(ValueError, match="only be restored on the env it was taken from"):
        restore(other, snapshot(env))


@pytest.mark.parametrize("env_id", ["dm_control/cartpole-balance-v0", "dm_control/walker-stand-v0"])
def test_dm_control_restore_replays_bit_identically_across_the_time_limit(env_id):
    pytest.importorskip("shimmy")
    env = make_env(env_id)
    env.action_space.seed(0)
    env.reset(seed=3)
    actions = [env.action_space.sample() for _ in range(1100)]
    _play(env, actions[:950])
    snap = snapshot(env)
    first = _play(env, actions[950:])  # the 1000-step limit ends the episode on the way
    assert any(len(r) == 1 for r in first)
    restore(env, snap)
    second = _play(env, actions[950:])
    assert _same(first, second)
    other = _play(env, [a * 0 for a in actions[:5]])
    restore(env, snap)
    assert not _same(other, _play(env, actions[950:955]))  # restore really went back (not a no-op)


@pytest.mark.parametrize("env_id, warm, steps", [
    ("CartPole-v1", 5, 300),
    ("Hopper-v5", 20, 300),
    ("HopperMuJoCo15-v4", 20, 300),   # the releases' own physics
    ("PongNoFrameskip-v4", 100, 400),  # the emulator's state travels as its serialized bytes
    # a MinAtar game's attributes and the one RandomState its sticky actions and spawns draw from
    ("MinAtar/Breakout-v1", 20, 300),
    ("MinAtar/SpaceInvaders-v1", 20, 300),
    ("MinAtar/Seaquest-v1", 50, 300),  # its enemies and divers are lists of lists
])
def test_a_snapshot_written_as_data_continues_in_a_new_env(tmp_path, env_id, warm, steps):
    """Written to a file as plain data and put into another env of the same make (as a resumed run
    builds its envs), a snapshot goes on bit for bit as the env it was taken from; the new env was
    never reset."""
    from rlgauntlet.common.plain_data import load_plain, save_plain
    from rlgauntlet.envs.snapshot import snapshot_from_plain, snapshot_to_plain

    env = make_env(env_id)
    env.action_space.seed(0)
    env.reset(seed=3)
    actions = [env.action_space.sample() for _ in range(warm + steps)]
    _play(env, actions[:warm])
    save_plain(tmp_path / "env.npz", snapshot_to_plain(snapshot(env)))
    first = _play(env, actions[warm:])
    other = make_env(env_id)
    restore(other, snapshot_from_plain(other, load_plain(tmp_path / "env.npz")))
    assert _same(first, _play(other, actions[warm:]))


def test_a_minatar_game_never_seeded_is_not_written_as_data():
    """MinAtar's sticky-action layer and its game draw from one RandomState once seeded; a game
    never seeded has one each, which one saved state could not put back: refused, not half saved."""
    from rlgauntlet.common.plain_data import NotPlainData
    from rlgauntlet.envs.snapshot import snapshot_to_plain

    env = make_env("MinAtar/Breakout-v1")
    with pytest.raises(NotPlainData, match="two RandomStates"):
        snapshot_to_plain(snapshot(env))
    env.reset(seed=0)
    assert snapshot_to_plain(snapshot(env))["base"]["minatar"]["random"][0] == "MT19937"
