"""Mode ``subspace-update`` (C19, rules v2): the optimizer's step is projected as well as the gradient, so the
whole update stays in the subspace; gradient-only projection under AdamW does not (closed-form checks)."""

import math

import pytest
import torch

from opsft.claims.travel import rank_below, share_in_subspace
from opsft.constraints import constrain


def _train(mode: str, basis: torch.Tensor, steps: int = 5) -> tuple[dict, dict]:
    """A 6x4 linear layer trained on random data with AdamW (weight decay on) under ``mode``."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 6, bias=False)
    before = {"weight": model.weight.detach().clone()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    constrain(opt, model, mode=mode, rank=basis.shape[1], bases={"weight": basis})
    x, y = torch.randn(16, 4), torch.randn(16, 6)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return before, {"weight": model.weight.detach().clone()}


BASIS = torch.linalg.qr(torch.randn(4, 2, generator=torch.Generator().manual_seed(1)))[0]  # orthonormal [4, 2]


def test_projecting_the_step_keeps_the_whole_update_in_the_subspace():
    before, after = _train("subspace-update", BASIS)
    assert share_in_subspace(before, after, {"weight": BASIS}) == pytest.approx(1.0, abs=1e-6)
    dw = after["weight"] - before["weight"]
    assert torch.allclose(dw @ BASIS @ BASIS.T, dw, atol=1e-6)


def test_adamw_takes_a_gradient_only_projection_out_of_the_subspace():
    before, after = _train("subspace", BASIS)
    assert share_in_subspace(before, after, {"weight": BASIS}) < 0.99


def test_share_in_subspace_closed_form_and_rank_below():
    # dW = [[3, 4]]: in the subspace spanned by e1 lies 3^2 of 3^2 + 4^2
    before, after = {"w": torch.zeros(1, 2)}, {"w": torch.tensor([[3.0, 4.0]])}
    assert share_in_subspace(before, after, {"w": torch.tensor([[1.0], [0.0]])}) == pytest.approx(9 / 25)
    assert math.isnan(share_in_subspace(before, before, {"w": torch.tensor([[1.0], [0.0]])}))
    assert (rank_below(3.9, 16), rank_below(0.7, 16), rank_below(math.nan, 16)) == (3, 1, 16)
