"""The update measurements of claims X05 / C19 (``opsft.claims.travel``) against float64 references and
closed-form cases, and the recipe time of C05 (``opsft.claims.timing``)."""

import math
from pathlib import Path

import pytest
import torch

from opsft.claims.timing import time_to_step
from opsft.claims.travel import (
    agreement_on_support,
    distance,
    drifted,
    mean_stable_rank,
    pattern_stable_rank,
    share_along,
)
from opsft.config import RunConfig
from opsft.runs import RunResult

UP, DOWN, EMBED = "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight"


def states(seed: int = 0, dtype=torch.float32) -> tuple[dict, dict]:
    """Two random states with a 2-D layer matrix, a 1-D norm and an embedding."""
    g = torch.Generator().manual_seed(seed)
    before = {UP: torch.randn(6, 4, generator=g), "model.norm.weight": torch.randn(4, generator=g),
              EMBED: torch.randn(5, 4, generator=g)}
    after = {k: (v + 0.1 * torch.randn(v.shape, generator=g)) for k, v in before.items()}
    return {k: v.to(dtype) for k, v in before.items()}, {k: v.to(dtype) for k, v in after.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_distance_is_the_float64_norm_of_the_whole_update(dtype):
    before, after = states(dtype=dtype)
    delta = torch.cat([(after[k].double() - before[k].double()).reshape(-1) for k in before])
    assert distance(before, after) == pytest.approx(float(delta.norm()), rel=1e-12)
    assert distance(before, before) == 0


def test_share_along_is_one_for_a_uniform_drift_and_zero_across_it():
    before, _ = states()
    signs = {k: torch.sign(torch.randn(v.shape)).to(torch.int8) for k, v in before.items()}
    signs[UP][0] = 0  # weights v leaves alone stay put in a uniform drift
    drift = {k: before[k] + 0.01 * signs[k].float() for k in before}
    assert share_along(before, drift, signs) == pytest.approx(1.0, abs=1e-6)
    flat = {k: torch.ones(v.shape, dtype=torch.int8) for k, v in before.items()}
    half = {k: v.clone() for k, v in before.items()}
    half[UP][0, 0] += 1.0
    half[UP][0, 1] -= 1.0  # moves along +e0 - e1, orthogonal to the all-ones pattern
    assert share_along(before, half, flat) == pytest.approx(0.0, abs=1e-12)


def test_share_along_matches_the_float64_formula():
    before, after = states(seed=3)
    signs = {k: torch.randint(-1, 2, v.shape, dtype=torch.int8) for k, v in before.items()}
    d = torch.cat([(after[k].double() - before[k].double()).reshape(-1) for k in before])
    s = torch.cat([signs[k].double().reshape(-1) for k in before])
    expected = float(d @ s) ** 2 / (float(d @ d) * float(s @ s))
    assert share_along(before, after, signs) == pytest.approx(expected, rel=1e-12)


def test_share_along_for_half_normal_magnitudes_is_two_over_pi():
    """Closed form: with |Delta_i| half-normal on a full support of s, cos^2 -> (E|x|)^2 / E x^2 = 2 / pi."""
    g = torch.Generator().manual_seed(0)
    before = {UP: torch.zeros(1000, 1000)}
    signs = {UP: torch.sign(torch.randn(1000, 1000, generator=g)).to(torch.int8)}
    after = {UP: signs[UP].float() * torch.randn(1000, 1000, generator=g).abs()}
    assert share_along(before, after, signs) == pytest.approx(2 / math.pi, abs=3e-3)


def test_share_along_is_nan_without_motion_and_names_a_bad_pattern():
    before, after = states()
    ones = {k: torch.ones(v.shape, dtype=torch.int8) for k, v in before.items()}
    assert math.isnan(share_along(before, before, ones))
    with pytest.raises(KeyError, match="norm"):
        share_along(before, after, {k: v for k, v in ones.items() if "norm" not in k})
    with pytest.raises(ValueError, match="up_proj"):
        share_along(before, after, {**ones, UP: torch.ones(4, 6, dtype=torch.int8)})


def test_agreement_on_support_counts_the_marked_weights_that_took_the_marked_sign():
    before = {UP: torch.zeros(2, 3)}
    signs = {UP: torch.tensor([[1, -1, 0], [1, -1, 1]], dtype=torch.int8)}
    # marked: 5 weights; agree at (0,0) and (1,1); (0,1) moved the wrong way, (1,0) did not move, (1,2) wrong way;
    # the unmarked (0,2) moved and does not count
    after = {UP: torch.tensor([[0.3, 0.2, 5.0], [0.0, -1e-7, -0.1]])}
    assert agreement_on_support(before, after, signs) == pytest.approx(2 / 5, rel=1e-12)
    drift = {UP: 1e-3 * signs[UP].float()}
    assert agreement_on_support(before, drift, signs) == 1.0
    assert math.isnan(agreement_on_support(before, after, {UP: torch.zeros(2, 3, dtype=torch.int8)}))
    with pytest.raises(ValueError, match="up_proj"):
        agreement_on_support(before, after, {UP: torch.ones(3, 2, dtype=torch.int8)})


def test_agreement_on_support_of_an_unrelated_update_is_about_one_half():
    g = torch.Generator().manual_seed(1)
    before, after = {UP: torch.zeros(500, 500)}, {UP: torch.randn(500, 500, generator=g)}
    signs = {UP: torch.randint(-1, 2, (500, 500), generator=g, dtype=torch.int8)}
    assert agreement_on_support(before, after, signs) == pytest.approx(0.5, abs=5e-3)


def test_pattern_stable_rank_is_one_for_an_outer_product_of_signs_and_large_for_random_signs():
    g = torch.Generator().manual_seed(4)
    a = torch.sign(torch.randn(200, generator=g))
    b = torch.sign(torch.randn(300, generator=g))
    coherent = {UP: torch.outer(a, b).to(torch.int8), EMBED: torch.ones(5, 4, dtype=torch.int8),
                "model.norm.weight": torch.ones(4, dtype=torch.int8)}
    assert pattern_stable_rank(coherent) == pytest.approx(1.0, rel=1e-9)  # the embedding and the norm do not count
    random = {UP: torch.randint(0, 2, (200, 300), generator=g, dtype=torch.int8) * 2 - 1}
    expected = 200 / (1 + math.sqrt(200 / 300)) ** 2  # Marchenko-Pastur edge of a 200 x 300 Rademacher matrix
    assert pattern_stable_rank(random) == pytest.approx(expected, rel=0.1)
    assert math.isnan(pattern_stable_rank({UP: torch.zeros(3, 3, dtype=torch.int8)}))


def test_drifted_moves_every_marked_weight_equally_by_the_asked_length():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(2)
    signs = {k: torch.randint(-1, 2, v.shape, generator=g, dtype=torch.int8) for k, v in before.items()}
    after = {k: v.detach().clone() for k, v in drifted(model, signs, 0.5).state_dict().items()}
    assert distance(before, after) == pytest.approx(0.5, rel=1e-6)
    assert share_along(before, after, signs) == pytest.approx(1.0, rel=1e-6)
    for k in before:
        assert torch.equal(after[k][signs[k] == 0], before[k][signs[k] == 0])
    with pytest.raises(KeyError, match="1.bias"):
        drifted(model, {k: v for k, v in signs.items() if k != "1.bias"}, 0.5)
    zeros = {k: torch.zeros_like(v) for k, v in signs.items()}
    with pytest.raises(ValueError, match="zero everywhere"):
        drifted(model, zeros, 0.5)
    with pytest.raises(ValueError, match="length"):
        drifted(model, signs, -1.0)
    unmoved = drifted(model, zeros, 0.0).state_dict()
    assert all(torch.equal(unmoved[k], after[k]) for k in after)


def test_mean_stable_rank_of_closed_form_updates_skips_embeddings_and_vectors():
    before = {UP: torch.zeros(6, 6), DOWN: torch.zeros(6, 6), EMBED: torch.zeros(6, 6), "model.norm.weight": torch.zeros(6)}
    after = {UP: torch.outer(torch.arange(1.0, 7), torch.ones(6)),  # rank one: stable rank 1
             DOWN: torch.eye(6),  # all singular values equal: stable rank 6
             EMBED: torch.eye(6) * torch.arange(1.0, 7), "model.norm.weight": torch.ones(6)}
    assert mean_stable_rank(before, after) == pytest.approx((1 + 6) / 2, rel=1e-12)
    assert math.isnan(mean_stable_rank(before, before))


def result_with_steps(step_times: list[float], wall: float) -> RunResult:
    config = RunConfig(organism="nano", steps=len(step_times))
    metrics = [{"step": i + 1, "t_step": t} for i, t in enumerate(step_times)]
    return RunResult(config, Path("."), metrics, wall, Path("."))


def test_time_to_step_charges_the_overhead_to_the_part_before_the_step():
    result = result_with_steps([1.0, 2.0, 3.0, 4.0], wall=12.5)  # 2.5 s outside the steps
    assert time_to_step(result, 2) == pytest.approx(12.5 - 3.0 - 4.0)
    assert time_to_step(result, 4) == 12.5
    assert time_to_step(result, 0) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="outside"):
        time_to_step(result, 5)
    result.metrics[3].pop("t_step")
    with pytest.raises(KeyError, match="t_step"):
        time_to_step(result, 2)
