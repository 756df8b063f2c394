"""Objectives against hand-computed values and float64 references."""

import math

import pytest
import torch

from opsft.config import ObjectiveConfig
from opsft.objectives import (
    dft_loss,
    group_advantages,
    grpo_loss,
    opd_advantages,
    opd_loss,
    sft_loss,
    token_logprobs,
)


def test_token_logprobs_pick_the_next_token_under_log_softmax():
    logits = torch.randn(2, 4, 5, dtype=torch.float64)
    ids = torch.randint(0, 5, (2, 4))
    got = token_logprobs(logits, ids)
    for b in range(2):
        for t in range(3):
            ref = logits[b, t, ids[b, t + 1]] - torch.logsumexp(logits[b, t], dim=-1)
            assert got[b, t].item() == pytest.approx(ref.item(), abs=1e-6)


def test_sft_is_the_masked_mean_nll_and_dft_weights_by_probability():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.9]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, _ = sft_loss(logp, {"mask": mask})
    assert loss.item() == pytest.approx(-(math.log(0.5) + math.log(0.25)) / 2)
    loss, _ = dft_loss(logp, {"mask": mask})
    assert loss.item() == pytest.approx(-(0.5 * math.log(0.5) + 0.25 * math.log(0.25)) / 2)


def test_dft_gradient_treats_the_weight_as_a_constant():
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_()
    dft_loss(logp, {"mask": torch.ones(1, 1)})[0].backward()
    assert logp.grad.item() == pytest.approx(-0.5)


def test_group_advantages_are_normalised_within_each_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards, 4)
    std = math.sqrt(0.25 * 0.75 * 4 / 3)  # the sample std: 1/(G-1)
    assert adv[:4].tolist() == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], rel=1e-5)
    assert adv[4:].tolist() == [0.0] * 4


def test_grpo_on_policy_gradient_is_minus_advantage_over_tokens_and_clipping_bounds_the_ratio():
    cfg = ObjectiveConfig(name="grpo", eps_low=0.2, eps_high=0.28)
    logp = torch.zeros(2, 2, requires_grad=True)
    batch = {"mask": torch.tensor([[1.0, 1.0], [1.0, 0.0]]), "advantages": torch.tensor([1.0, -2.0]),
             "rewards": torch.tensor([1.0, 0.0]), "old_logp": torch.zeros(2, 2)}
    loss, metrics = grpo_loss(logp, batch, cfg)
    loss.backward()
    # seq_mean: d/dlogp of -(1/2) * sum_b mean_t A_b r_bt at r = 1
    assert logp.grad.tolist() == [[-0.25, -0.25], [1.0, 0.0]]
    assert metrics["clip_frac"] == 0.0
    far = {**batch, "old_logp": torch.full((2, 2), -1.0)}  # ratio e > 1 + eps_high
    loss, metrics = grpo_loss(torch.zeros(2, 2), far, cfg)
    assert metrics["clip_frac"] == 1.0
    # A>0 clipped at 1.28; A<0 takes min(rA, clip A) = e * A (unclipped side)
    expected = -0.5 * (1.28 * 1.0 + math.e * -2.0)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_token_sum_aggregation_weights_every_token_equally():
    cfg = ObjectiveConfig(name="grpo", aggregation="token_sum")
    logp = torch.zeros(2, 2, requires_grad=True)
    batch = {"mask": torch.tensor([[1.0, 1.0], [1.0, 0.0]]), "advantages": torch.tensor([1.0, -2.0]),
             "rewards": torch.zeros(2)}
    grpo_loss(logp, batch, cfg)[0].backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-1 / 3, -1 / 3, 2 / 3, 0.0])


def test_k3_kl_is_zero_at_the_reference_and_positive_elsewhere():
    cfg = ObjectiveConfig(name="grpo", beta_kl=0.1)
    batch = {"mask": torch.ones(1, 1), "advantages": torch.zeros(1), "rewards": torch.zeros(1),
             "ref_logp": torch.tensor([[-1.0]])}
    _, m = grpo_loss(torch.tensor([[-1.0]]), batch, cfg)
    assert m["kl"] == 0.0
    _, m = grpo_loss(torch.tensor([[-2.0]]), batch, cfg)
    assert m["kl"] == pytest.approx(math.exp(1) - 1 - 1)


def test_opd_advantage_is_the_teacher_student_log_ratio_and_mixes_with_grpo():
    logp = torch.tensor([[-1.0, -2.0]])
    batch = {"teacher_logp": torch.tensor([[-0.5, -3.0]]), "advantages": torch.tensor([2.0]),
             "mask": torch.ones(1, 2)}
    assert opd_advantages(logp, batch, ObjectiveConfig(name="opd")).tolist() == [[0.5, -1.0]]
    mixed = opd_advantages(logp, batch, ObjectiveConfig(name="opd", opd_alpha=0.75))
    assert mixed.flatten().tolist() == pytest.approx([0.75 * 0.5 + 0.25 * 2, 0.75 * -1.0 + 0.25 * 2])
    _, m = opd_loss(logp, batch, ObjectiveConfig(name="opd"))
    assert m["reverse_kl"] == pytest.approx(((-1 + 0.5) + (-2 + 3)) / 2)
