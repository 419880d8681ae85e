"""The block input gradient of strided convolutions: torch's own convolution backward is the
reference, on the Nature CNN's first layer and on shapes that leave rows and columns uncovered."""

import pytest
import torch
import torch.nn as nn

from rlgauntlet.victims.conv_input_grad import (
    BlockStridedConv2d,
    block_conv_input_grad,
    eligible,
    use_fast_input_gradients,
)


def reference_grad(conv: nn.Conv2d, x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(nn.functional.conv2d(x, conv.weight, conv.bias, conv.stride), x, grad_out)
    return grad


@pytest.mark.parametrize("in_c,out_c,kernel,stride,hw,batch", [
    (4, 32, 8, 4, (84, 84), 8),     # the Nature CNN's first layer
    (4, 32, 8, 4, (86, 87), 3),     # the last rows/columns lie under no kernel placement
    (3, 5, (8, 4), 4, (20, 17), 2),  # non-square kernel, one block wide
    (2, 7, 6, 2, (13, 11), 1),
    (1, 4, 4, 4, (8, 8), 5),        # kernel = stride: placements do not overlap
])
def test_block_input_gradient_equals_torchs_convolution_backward(in_c, out_c, kernel, stride, hw, batch):
    g = torch.Generator().manual_seed(0)
    conv = nn.Conv2d(in_c, out_c, kernel, stride=stride)
    x = torch.rand(batch, in_c, *hw, generator=g)
    out_shape = nn.functional.conv2d(x, conv.weight, stride=stride).shape
    grad_out = torch.randn(out_shape, generator=g)
    ours = block_conv_input_grad(grad_out, conv.weight.detach(), stride, hw)
    torch.testing.assert_close(ours, reference_grad(conv, x, grad_out), atol=1e-5, rtol=1e-5)


def test_the_module_uses_the_block_gradient_only_when_its_weights_are_frozen(monkeypatch):
    import rlgauntlet.victims.conv_input_grad as module

    calls = []
    original = module.block_conv_input_grad
    monkeypatch.setattr(module, "block_conv_input_grad", lambda *a: calls.append(1) or original(*a))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(4, 8, 8, stride=4), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 9 * 9, 3)).double()
    plain = nn.Sequential(*[m for m in net])  # the same modules before the swap
    x = torch.rand(2, 4, 40, 40, dtype=torch.float64)

    def input_grad(model):
        xx = x.clone().requires_grad_(True)
        model(xx).logsumexp(1).sum().backward()
        return xx.grad

    expected_frozen = input_grad(plain.requires_grad_(False))
    assert use_fast_input_gradients(net) == 1 and type(net[0]) is BlockStridedConv2d
    torch.testing.assert_close(input_grad(net), expected_frozen)
    assert len(calls) == 1  # the block gradient ran (not torch's fallback)
    # training: weights need gradients, so the module is exactly nn.Conv2d again
    net.requires_grad_(True)
    xx = x.clone().requires_grad_(True)
    net(xx).sum().backward()
    assert net[0].weight.grad is not None and net[0].weight.grad.abs().sum() > 0 and len(calls) == 1


def test_only_plain_strided_convolutions_with_whole_blocks_are_swapped():
    assert eligible(nn.Conv2d(4, 32, 8, stride=4))
    assert not eligible(nn.Conv2d(32, 64, 4, stride=2))  # slower that way (see MIN_STRIDE)
    assert not eligible(nn.Conv2d(4, 32, 7, stride=4))  # kernel not a multiple of the stride
    assert not eligible(nn.Conv2d(4, 32, 8, stride=4, padding=1))
    assert not eligible(nn.Conv2d(4, 32, 8, stride=(4, 2)))


def test_an_sb3_image_agents_first_layer_is_swapped_and_its_attack_gradient_unchanged(tmp_path):
    import gymnasium as gym
    import numpy as np
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env

    from rlgauntlet.victims import load_victim

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
        action_space = gym.spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, True, False, {}

    path = tmp_path / "cnn.zip"
    model = sb3.PPO("CnnPolicy", make_vec_env(Frames, n_envs=1), seed=0, device="cpu", n_steps=8, batch_size=8)
    model.save(path)
    victim = load_victim(f"sb3:{path}")
    convs = [m for m in victim.policy.modules() if isinstance(m, nn.Conv2d)]
    assert [type(m) for m in convs] == [BlockStridedConv2d, nn.Conv2d, nn.Conv2d]
    x = torch.rand(3, 4, 84, 84, requires_grad=True)
    (ours,) = torch.autograd.grad(victim.forward(x).logits.logsumexp(1).sum(), x)
    convs[0].__class__ = nn.Conv2d
    (theirs,) = torch.autograd.grad(victim.forward(x).logits.logsumexp(1).sum(), x)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
