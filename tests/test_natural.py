"""Natural perturbations and common corruptions, on synthetic images with known answers."""

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn as nn

from rlgauntlet.common.seeding import BatchRNG, episode_generator
from rlgauntlet.errors import UserError
from rlgauntlet.threats import parse_threat
from rlgauntlet.threats.corruptions import IMPULSE_AMOUNT, PIXELATE_FACTOR
from rlgauntlet.threats.suites import NATURAL_IMAGE
from rlgauntlet.victims import TorchVictim

PIXELS = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
VICTIM = TorchVictim(nn.Sequential(nn.Flatten(), nn.Linear(4 * 84 * 84, 3)), "q", PIXELS, gym.spaces.Discrete(3))


def rng(n=2, seed=0):
    return BatchRNG([episode_generator(seed, k, "threat") for k in range(n)])


def frames(n=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 4, 84, 84, generator=g)


def apply(spec, x, r=None):
    return parse_threat(spec).perturb(x, VICTIM, r or rng(x.shape[0]))


def test_shift_moves_marked_pixel_by_exactly_ti_tj():
    x = torch.zeros(1, 4, 84, 84)
    x[0, :, 30, 40] = 1.0
    for ti, tj in [(2, 1), (-3, 0), (0, -5), (7, 7)]:
        out = apply(f"shift:ti={ti},tj={tj}", x)
        assert out.sum() == 4 and bool((out[0, :, 30 + tj, 40 + ti] == 1).all())
    wrapped = apply("shift:ti=-41,tj=0,fill=wrap", x)
    assert bool((wrapped[0, :, 30, 83] == 1).all())
    edge = apply("shift:ti=3,tj=0,fill=edge", torch.arange(84.0).expand(1, 4, 84, 84) / 83)
    assert torch.allclose(edge[0, 0, 0, :4], torch.zeros(4)) and float(edge[0, 0, 0, 4]) == pytest.approx(1 / 83)


@pytest.mark.parametrize("spec", ["rotation:degrees=0", "perspective:norm=0", "brightness_contrast:alpha=1,beta=0",
                                  "median_blur:kernel=1", "shift:ti=0,tj=0"])
def test_zero_severity_is_identity(spec):
    x = frames()
    torch.testing.assert_close(apply(spec, x), x)


def test_rotation_moves_pixels_about_the_centre():
    x = torch.zeros(1, 4, 85, 85)
    x[..., 42, 62] = 1.0  # 20 px right of the centre (42, 42)
    out = parse_threat("rotation:degrees=90").transform(x)
    r, c = divmod(int(out[0, 0].argmax()), 85)
    assert (r, c) in {(22, 42), (62, 42)}  # a quarter turn takes it 20 px above (or below) the centre


def test_perspective_moves_corners_by_norm():
    threat = parse_threat("perspective:norm=3,seed=0")
    moves = threat._moves(2, None, torch.float64, "cpu")
    assert float(moves.norm(dim=-1).max()) == pytest.approx(3.0)
    x = frames()
    out = threat.perturb(x, VICTIM, rng())
    assert float((out - x).abs().mean()) > 0.01 and float(out.min()) >= 0 and float(out.max()) <= 1
    # per-episode draws: the same camera at every step of an episode, another in the next one
    per_episode = parse_threat("perspective:norm=3")
    a = per_episode._moves(2, rng(), torch.float64, "cpu")
    b = per_episode._moves(2, rng(), torch.float64, "cpu")
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a[0], a[1])



@pytest.mark.parametrize("degrees", [3.0, -17.5, 90.0])
def test_rotation_equals_kornias_rotate(degrees):
    """The warp builds its own (cached) sampling grid; kornia's rotate is the reference."""
    from kornia.geometry.transform import rotate

    x = frames(3)
    threat = parse_threat(f"rotation:degrees={degrees}")
    ours = threat.transform(x)
    angle = torch.full((3,), degrees)
    torch.testing.assert_close(ours, rotate(x, angle, mode="bilinear", padding_mode="zeros", align_corners=True),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(threat.transform(x[:2]), ours[:2])  # the cached grid, another batch size


def test_perspective_equals_kornias_warp_and_follows_each_batchs_moves():
    """Two batches with different per-row corner moves: each warped as kornia warps it (a
    stale cached grid would warp the second batch with the first one's moves)."""
    from kornia.geometry.transform import get_perspective_transform, warp_perspective

    threat = parse_threat("perspective:norm=4")
    corners = torch.tensor([[0, 0], [83, 0], [83, 83], [0, 83]], dtype=torch.float32).expand(2, 4, 2)
    x = frames()
    for seed in (0, 1):
        r = rng(2, seed)
        moves = threat._moves(2, r, torch.float32, "cpu")
        matrix = get_perspective_transform(corners, corners + moves)
        expected = warp_perspective(x, matrix, (84, 84), mode="bilinear", padding_mode="zeros", align_corners=True)
        torch.testing.assert_close(threat.transform(x, r), expected, atol=1e-4, rtol=0)

def test_brightness_follows_formula_and_clips():
    x = torch.tensor([0.0, 0.2, 0.5, 0.9]).reshape(1, 4, 1, 1).expand(1, 4, 84, 84)
    out = apply("brightness_contrast:alpha=1.7,beta=40", x)
    expected = torch.clamp(1.7 * torch.tensor([0.0, 0.2, 0.5, 0.9]) + 40 / 255, 0, 1)
    torch.testing.assert_close(out[0, :, 5, 5], expected)
    assert float(out.max()) == 1.0


def test_median_blur_of_constant_is_constant_and_removes_specks():
    x = torch.full((1, 4, 84, 84), 0.3)
    torch.testing.assert_close(apply("median_blur:kernel=5", x), x)
    x[0, :, 10, 10] = 1.0
    assert float(apply("median_blur:kernel=3", x)[0, 0, 10, 10]) == pytest.approx(0.3)


def test_fast_median_equals_tensor_median():
    from rlgauntlet.threats.natural import median_filter, median_filter_torch

    x = frames()
    for k in (3, 5):
        torch.testing.assert_close(median_filter(x, k), median_filter_torch(x, k))


def test_jpeg_quality_100_changes_little_and_5_changes_much():
    x = frames(1)
    x = torch.nn.functional.avg_pool2d(x, 5, 1, 2)  # some structure, like a game frame
    hi = (apply("jpeg:quality=100", x) - x).abs().mean()
    lo = (apply("jpeg:quality=5", x) - x).abs().mean()
    assert float(hi) < 0.01 and float(lo) > 5 * float(hi)
    rgb = TorchVictim(nn.Flatten(), "q", gym.spaces.Box(0, 255, (32, 32, 3), np.uint8), gym.spaces.Discrete(2))
    xc = torch.rand(1, 3, 32, 32)
    assert parse_threat("jpeg:quality=50").perturb(xc, rgb, rng(1)).shape == xc.shape


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_pixelate_uses_kth_factor(severity):
    x = frames(1)
    out = apply(f"pixelate:severity={severity}", x)
    side = int(84 * PIXELATE_FACTOR[severity - 1])
    rows = torch.unique(out[0, 0], dim=0).shape[0]
    cols = torch.unique(out[0, 0], dim=1).shape[1]
    assert rows == cols == side  # nearest upscaling of a side×side image


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_impulse_noise_hits_kth_fraction_same_pattern_every_frame(severity):
    x = torch.full((4, 4, 84, 84), 0.5)
    out = apply(f"impulse_noise:severity={severity}", x, rng(4))
    hit = (out != 0.5)
    assert abs(float(hit.double().mean()) - IMPULSE_AMOUNT[severity - 1]) < 0.01
    assert bool((hit[:, 0] == hit[:, 3]).all())  # one change of the world for the whole stack
    assert set(torch.unique(out).tolist()) <= {0.0, 0.5, 1.0}


def test_gaussian_noise_severity_std_and_frames_share_pattern():
    x = torch.full((8, 4, 84, 84), 0.5)
    out = apply("gaussian_noise:severity=1", x, rng(8))
    assert abs(float((out - 0.5).std()) - 0.08) < 0.005
    torch.testing.assert_close(out[:, 0], out[:, 2])


def test_motion_blur_preserves_constant_and_blurs_a_line():
    x = torch.full((2, 4, 84, 84), 0.4)
    torch.testing.assert_close(apply("motion_blur:severity=3", x), x)
    x = torch.zeros(2, 4, 84, 84)
    x[..., 42, 42] = 1.0
    out = apply("motion_blur:radius=5,sigma=2", x)
    assert float(out.sum()) == pytest.approx(8.0, rel=1e-5)  # weights sum to 1: mass kept
    assert int((out[0, 0] > 0).sum()) >= 5  # spread along a line


def test_image_threats_refuse_vector_victims():
    vec = TorchVictim(nn.Linear(4, 2), "q", gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
    with pytest.raises(UserError, match="rotation transforms images"):
        parse_threat("rotation:degrees=3").check_victim(vec)
    with pytest.raises(UserError, match="severity= is defined for"):
        parse_threat("gaussian_noise:severity=1").check_victim(vec)


def test_sensor_threats_on_vectors():
    vec = TorchVictim(nn.Linear(5, 2), "q", gym.spaces.Box(-np.inf, np.inf, (5,), np.float32), gym.spaces.Discrete(2))
    x = torch.ones(400, 5, dtype=vec.dtype)
    dropped = parse_threat("sensor_dropout:rate=0.2").perturb(x, vec, rng(400))
    assert abs(float((dropped == 0).double().mean()) - 0.2) < 0.03
    threat = parse_threat("sensor_bias:scale=0.5")
    b1 = threat.perturb(x[:3], vec, rng(3)) - 1
    b2 = threat.perturb(x[:3], vec, rng(3)) - 1
    torch.testing.assert_close(b1, b2)  # constant within an episode
    assert not torch.allclose(b1[0], b1[1])  # different between episodes


@pytest.mark.parametrize("channels", [4, 6])  # grey frame stack; two RGB frames (channels in threes)
def test_impulse_noise_is_the_definition_written_out_with_each_rows_draws(channels):
    """Row b: u, then s, drawn as one frame from its own episode stream; a pixel with u < amount
    becomes salt (1) when s < 0.5, else pepper (0), in every frame of the stack."""
    x = frames(3, seed=1)[:, :1].expand(3, channels, 84, 84).contiguous() * 0.5 + 0.25
    out = apply("impulse_noise:amount=0.2", x, rng(3, seed=5))
    per = 3 if channels % 3 == 0 else 1
    for b in range(3):
        g = episode_generator(5, b, "threat")
        u, s = torch.rand((1, per, 84, 84), generator=g), torch.rand((1, per, 84, 84), generator=g)
        frame = x[b].reshape(channels // per, per, 84, 84)
        expected = torch.where(u < 0.2, (s < 0.5).float(), frame).reshape(channels, 84, 84)
        # bit-exact on purpose: every pixel is selected (salt, pepper or the frame), none computed
        torch.testing.assert_close(out[b], expected, atol=0, rtol=0)


@pytest.mark.parametrize("spec", list(NATURAL_IMAGE))
def test_a_natural_threat_leaves_the_clean_input_untouched(spec):
    """The engine hands the whole batch to ``perturb`` (no copy when every row is scheduled)
    and measures the perturbation against it: a threat writing into its input would report
    a perturbation of 0 and compare actions with the perturbed input."""
    from rlgauntlet.threats import Memory

    x = frames(2)
    before = x.clone()
    threat = parse_threat(spec)
    out, acted = threat.apply(x, VICTIM, rng(2), Memory([None, None], torch.zeros(2, dtype=torch.long)),
                              torch.ones(2, dtype=torch.bool))
    assert torch.equal(x, before) and bool(acted.all()) and not torch.equal(out, x)
