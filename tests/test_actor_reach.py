"""benchmarks/actor_reach.py: the ceiling of an ε-ball's action change, on a known answer."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from actor_reach import largest_change  # noqa: E402


class _Out:
    def __init__(self, mean: torch.Tensor) -> None:
        self.mean = mean

    def central_action(self) -> torch.Tensor:
        return self.mean


class _LinearVictim:
    """μ(x) = x Wᵀ: the largest ‖μ(x + δ) − μ(x)‖₂ over ‖δ‖∞ ≤ ε is ε·max over sign vectors of ‖W s‖₂."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def forward(self, x: torch.Tensor) -> _Out:
        return _Out(x @ self.weight.T)


def test_the_ceiling_is_the_largest_change_the_ball_allows_on_a_linear_victim():
    # diagonal W: every corner of the ball is a maximiser, the answer is ε·‖diag‖₂; one row w: ε·‖w‖₁
    eps = 0.15
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
    diagonal = _LinearVictim(torch.diag(torch.tensor([2.0, -1.0, 0.5, 3.0])))
    found = largest_change(diagonal, x, diagonal.forward(x).mean, eps)
    assert torch.allclose(found, torch.full((6,), eps * (4 + 1 + 0.25 + 9) ** 0.5), rtol=1e-5)
    row = _LinearVictim(torch.tensor([[1.0, -2.0, 0.5, 0.0]]))
    found = largest_change(row, x, row.forward(x).mean, eps)
    assert torch.allclose(found, torch.full((6,), eps * 3.5), rtol=1e-5)
    # never above what the ball allows (a wrong projection or step would overshoot)
    assert (found <= eps * 3.5 * (1 + 1e-6)).all()
