"""SA-DQN's released Atari Q-networks (``sadqn:PATH``, ``published:dqn-pong`` and the like) and the
frames they were trained on (``SADQN/GAME-v0``): the frame pipeline against a computation by hand,
the network against the authors' own module layout fed as their code feeds it (transposed), and
every refusal of a file or env that does not fit."""

from __future__ import annotations

import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.errors import UserError


class Flatten(nn.Module):  # models.py's own Flatten: its Sequential index 6 holds no weights
    def forward(self, x):
        # the authors' x.view(x.size(0), -1), as reshape: a one-channel conv on CPU may return a
        # channels-last tensor, which view refuses; the numbers are the same
        return x.reshape(x.size(0), -1)


class AuthorsDueling(nn.Module):
    """``models.py``'s DuelingCnnDQN (width 1), as the authors wrote it: the state dict it saves is
    what a released ``.model`` file holds."""

    def __init__(self, actions: int) -> None:
        super().__init__()
        self.num_actions = actions
        self.cnn = nn.Sequential(nn.Conv2d(1, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                                 nn.Conv2d(64, 64, 3, 1), nn.ReLU(), Flatten())
        self.advantage = nn.Sequential(nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, actions))
        self.value = nn.Sequential(nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 1))

    def forward(self, x):
        cnn = self.cnn(x)
        advantage = self.advantage(cnn)
        return self.value(cnn) + advantage - torch.sum(advantage, dim=1, keepdim=True) / self.num_actions


def authors_plain(actions: int) -> nn.Sequential:
    """``models.py``'s CnnDQN (``dueling: false``, the PGD-trained agents)."""
    return nn.Sequential(nn.Conv2d(1, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, 1), nn.ReLU(), Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                         nn.Linear(512, actions))


def _spaces(actions: int):
    return gym.spaces.Box(0, 255, (1, 84, 84), np.uint8), gym.spaces.Discrete(actions)


@pytest.mark.parametrize("dueling", [True, False])
def test_the_network_is_the_authors_fed_as_their_code_feeds_it(tmp_path, dueling):
    from rlgauntlet.victims.sa_dqn import load_sa_dqn

    torch.manual_seed(3)
    net = AuthorsDueling(4) if dueling else authors_plain(4)
    with torch.no_grad():  # larger weights than the default init: Q-values far apart, so a wrong layout shows
        for p in net.parameters():
            p.mul_(3.0)
    path = tmp_path / "Pong.model"
    torch.save(net.state_dict(), path)
    victim = load_sa_dqn(path, *_spaces(4))
    assert victim.description["network"] == ("DuelingCnnDQN" if dueling else "CnnDQN")
    frames = np.random.default_rng(0).integers(0, 256, size=(3, 84, 84, 1), dtype=np.uint8)  # WarpFrame's (H, W, 1)
    # the authors' ImageToPyTorch: np.swapaxes(obs, 2, 0), then /255 in test.py
    authors_input = torch.as_tensor(np.stack([np.swapaxes(f, 2, 0) for f in frames]), dtype=torch.float32) / 255
    with torch.no_grad():
        want = net(authors_input)
    ours = victim.forward(victim.preprocess(np.stack([f.transpose(2, 0, 1) for f in frames])))  # our env: (1, H, W)
    assert torch.allclose(ours.q, want, rtol=1e-5, atol=1e-5)
    # the transposition is what makes them agree: fed untransposed, the authors' net says something else
    with torch.no_grad():
        untransposed = net(torch.as_tensor(np.ascontiguousarray(frames.transpose(0, 3, 1, 2)), dtype=torch.float32) / 255)
    assert not torch.allclose(untransposed, want, rtol=1e-3, atol=1e-3)
    assert victim.budget_space == "pixel01" and victim.input_bounds == (0.0, 1.0)
    np.testing.assert_array_equal(victim.act(np.stack([f.transpose(2, 0, 1) for f in frames])),
                                  want.argmax(dim=1).numpy())


def test_a_width_2_network_and_a_prefixed_state_dict_load(tmp_path):
    from rlgauntlet.victims.sa_dqn import read_sa_dqn

    wide = nn.Sequential(nn.Conv2d(1, 64, 8, 4), nn.ReLU(), nn.Conv2d(64, 128, 4, 2), nn.ReLU(),
                         nn.Conv2d(128, 128, 3, 1), nn.ReLU(), Flatten(), nn.Linear(6272, 1024), nn.ReLU(),
                         nn.Linear(1024, 3))
    torch.save({f"model.{k}": v for k, v in wide.state_dict().items()}, tmp_path / "w.pth")
    network, weights = read_sa_dqn(tmp_path / "w.pth")
    assert network == "CnnDQN" and weights["7.weight"].shape == (1024, 6272)


def _refusal(tmp_path, content, match, name="bad.model"):
    from rlgauntlet.victims.sa_dqn import read_sa_dqn

    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    with pytest.raises(UserError, match=match):
        read_sa_dqn(path)


class Payload:
    def __reduce__(self):
        return (print, ("code ran",))


def test_files_that_are_not_sa_dqn_networks_are_refused_in_one_line(tmp_path):
    net = AuthorsDueling(4).state_dict()
    _refusal(tmp_path, b"not a torch file", "is not an SA-DQN model file")
    _refusal(tmp_path, {"x": Payload()}, "is not an SA-DQN model file")  # pickled code: the weights-only reader stops it
    _refusal(tmp_path, [1, 2], "not the state dict")
    _refusal(tmp_path, {"0.weight": torch.zeros(4, 4)}, "neither SA-DQN network")  # an MLP DQN (classic control)
    _refusal(tmp_path, {k: v for k, v in net.items() if k != "value.2.bias"}, r"lack \['value.2.bias'\]")
    _refusal(tmp_path, {**net, "cnn.2.weight": torch.zeros(64, 32, 3, 3)}, r"cnn.2.weight has shape \(64, 32, 3, 3\)")
    _refusal(tmp_path, {**net, "value.2.weight": torch.zeros(2, 512), "value.2.bias": torch.zeros(2)},
             r"value.2.weight has shape \(2, 512\)")
    _refusal(tmp_path, {**net, "cnn.0.bias": torch.zeros(32, dtype=torch.long)}, "not a floating-point tensor")
    _refusal(tmp_path, {**net, "value.2.bias": torch.tensor([float("nan")])}, "'value.2.bias' holds NaN or inf")
    archive = tmp_path / "script.model"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("script/code/__torch__.py", "")
        z.writestr("script/constants.pkl", b"")
    from rlgauntlet.victims.sa_dqn import read_sa_dqn

    with pytest.raises(UserError, match="TorchScript archive, not an SA-DQN model file"):
        read_sa_dqn(archive)
    with pytest.raises(UserError, match="does not exist"):
        read_sa_dqn(tmp_path / "missing.model")


def test_central_crop_frame_by_hand():
    """OpenCV's grey of a flat colour, the 4 black columns each side, the crop moved down by
    ``crop_shift`` and the 2× area resize (each output pixel the mean of a 2×2 block) computed by
    hand on frames whose answer is exact."""
    from rlgauntlet.envs.sa_dqn import central_crop_frame

    flat = np.zeros((210, 160, 3), np.uint8)
    flat[...] = (200, 100, 50)
    grey = 0.299 * 200 + 0.587 * 100 + 0.114 * 50  # 124.2
    out = central_crop_frame(flat, 0)
    assert out.shape == (84, 84) and out.dtype == np.uint8
    # exact on purpose: uint8 pixels, and a 2×2 mean of equal integers is that integer on any CPU
    assert (out[:, :2] == 0).all() and (out[:, -2:] == 0).all()  # the 4 padded columns, 2 after the resize
    assert np.abs(out[:, 2:-2].astype(float) - grey).max() <= 1  # OpenCV's fixed-point grey rounds
    for shift in (0, 10, 20):
        lines = np.zeros((210, 160, 3), np.uint8)
        lines[41:43] = 255  # two white screen rows: crop rows 20-21 at shift 0 → output row 10
        out = central_crop_frame(lines, shift)
        row = (41 - 21 - shift) // 2  # the central 168 of 210 rows start at row 21, moved down by the shift
        assert (out[row, 2:-2] == 255).all() and out[np.arange(84) != row].max() == 0  # uint8: exact on purpose


def _wrappers(env):
    out = []
    while isinstance(env, gym.Wrapper):
        out.append(env)
        env = env.env
    return out


def test_the_envs_are_the_authors_test_chain():
    from stable_baselines3.common.atari_wrappers import FireResetEnv, MaxAndSkipEnv, NoopResetEnv

    from rlgauntlet.envs import make_env
    from rlgauntlet.envs.sa_dqn import MAX_EPISODE_STEPS, CentralCropFrame, FirstActions

    def layers(env):
        return [type(w) for w in _wrappers(env)]

    pong, freeway = make_env("SADQN/Pong-v0"), make_env("SADQN/Freeway-v0")
    try:
        assert pong.unwrapped.get_action_meanings()[:pong.action_space.n] == ["NOOP", "FIRE", "RIGHT", "LEFT"]
        assert freeway.action_space.n == 3
        chain = layers(pong)
        for wrapper in (gym.wrappers.TimeLimit, CentralCropFrame, FirstActions, FireResetEnv, MaxAndSkipEnv,
                        NoopResetEnv):
            assert wrapper in chain
        assert FireResetEnv not in layers(freeway) and FirstActions not in layers(freeway)  # no FIRE; all 3 actions
        limit = next(w for w in _wrappers(pong) if isinstance(w, gym.wrappers.TimeLimit))
        assert limit._max_episode_steps == MAX_EPISODE_STEPS == 15_000  # test.py's max_frames_per_episode
        # gym's v4 NoFrameskip under the skip wrapper: every frame, no sticky actions (configuration values,
        # set not computed: exact on purpose)
        assert pong.unwrapped._frameskip == 1 and pong.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
        a, _ = pong.reset(seed=5)
        b, _ = make_env("SADQN/Pong-v0").reset(seed=5)
        np.testing.assert_array_equal(a, b)  # episode k's seed fixes its no-ops
        assert a.shape == (1, 84, 84)
        for _ in range(3):
            _, reward, terminated, truncated, info = pong.step(2)
        assert "raw_return" in info and not terminated
    finally:
        pong.close()
        freeway.close()


def test_a_network_on_an_env_it_does_not_fit_is_refused_in_one_line(tmp_path, cli_main):
    path = tmp_path / "Pong.model"
    torch.save(AuthorsDueling(4).state_dict(), path)
    for env_id, match in (("SADQN/Freeway-v0", r"scores 4 actions and the env offers Discrete\(3\)"),
                          ("PongNoFrameskip-v4", r"observes 1 grey 84×84 frame\(s\) and the env gives \(84, 84, 4\)")):
        proc = cli_main(["evaluate", "--agent", f"sadqn:{path}", "--env", env_id, "--episodes", "1", "--out",
                         str(tmp_path / "out")])
        lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(("A.L.E", "[Powered"))]
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert __import__("re").search(match, lines[0]), lines[0]
    assert not (tmp_path / "out").exists()


def test_a_published_sa_dqn_release_is_checked_by_its_git_blob_id(tmp_path, monkeypatch):
    from rlgauntlet.common.hashing import git_blob_id
    from rlgauntlet.published import local_file, release
    from rlgauntlet.victims import load_victim

    entry = release("dqn-pong")
    assert entry["format"] == "sa_dqn" and entry["env"] == "SADQN/Pong-v0" and entry["readme"]["strongest_attack"] == -21
    path = tmp_path / "WocaR-RL" / entry["path"]
    path.parent.mkdir(parents=True)
    torch.save(AuthorsDueling(4).state_dict(), path)
    monkeypatch.setenv("RLGAUNTLET_RELEASES", str(tmp_path))
    with pytest.raises(UserError, match="has git blob id .* the catalogue's release has 6f35bfbc468d"):
        local_file(entry)
    import rlgauntlet.published as published

    patched = {**entry, "git_blob": git_blob_id(path)}
    monkeypatch.setattr(published, "release", lambda name: patched)
    assert local_file(patched) == path
    victim = load_victim("published:dqn-pong", *_spaces(4))
    assert victim.description["source"] == "sadqn" and victim.description["name"] == "dqn-pong"
    assert victim.trained_for == ("Pong",)  # the file names no game; the catalogue does
    from rlgauntlet.experiments.agents import check_trained_task

    with pytest.raises(UserError, match="give --env SADQN/Pong-v0"):
        check_trained_task(victim, "SADQN/Freeway-v0")


@pytest.mark.parametrize("dueling", [True, False])
def test_interval_bounds_through_the_network_are_sound_and_exact_at_eps_zero(tmp_path, dueling):
    """IBP through the transposition, the CNN and (dueling) the folded heads: every sampled input of
    the ε-box scores inside the bounds, and at ε 0 the bounds are the Q-values themselves."""
    from rlgauntlet.bounds.ibp import ibp
    from rlgauntlet.victims.sa_dqn import load_sa_dqn

    torch.manual_seed(5)
    net = AuthorsDueling(4) if dueling else authors_plain(4)
    torch.save(net.state_dict(), tmp_path / "n.model")
    victim = load_sa_dqn(tmp_path / "n.model", *_spaces(4))
    x = torch.rand(2, 1, 84, 84)
    q = victim.forward(x).q
    low0, up0 = ibp(victim, x, eps=0.0)
    assert torch.allclose(low0, q, atol=1e-4) and torch.allclose(up0, q, atol=1e-4)
    eps = 1 / 255
    lower, upper = ibp(victim, x, eps=eps)
    assert (upper - lower).min() > 0
    for _ in range(20):
        corner = (x + eps * torch.sign(torch.randn_like(x))).clamp(0, 1)
        q_corner = victim.forward(corner).q
        assert (q_corner >= lower - 1e-4).all() and (q_corner <= upper + 1e-4).all()
