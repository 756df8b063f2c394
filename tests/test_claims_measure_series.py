"""The claim-side measurements of C10-C13, C20 and X02-X04 against hand-computed and float64 references."""

import math
import statistics
from types import SimpleNamespace

import pytest
import torch

from opsft.claims.fisher import gain_kept, gradient_energy, heldout_source, mass_in_mask, sequences
from opsft.claims.measure import (
    closer_to,
    frame_value,
    largest_difference,
    log_gap,
    relative_gap,
    sign_agreement,
    speedup,
    steps_to_reach,
)
from opsft.config import ObjectiveConfig
from opsft.directions import Direction
from opsft.masks import top_fraction
from opsft.sources import Example, RolloutSource, StaticSource


def test_log_gap_is_the_mean_absolute_log_ratio_and_nan_for_non_positive_values():
    assert log_gap([2.0, 3.0], [1.0, 3.0]) == pytest.approx((math.log(2) + 0) / 2)
    assert log_gap([1.0, 4.0], [2.0, 2.0]) == pytest.approx(math.log(2))
    assert math.isnan(log_gap([0.0, 1.0], [1.0, 1.0]))
    with pytest.raises(ValueError, match="lengths"):
        log_gap([1.0], [1.0, 2.0])


def test_closer_to_is_positive_when_the_series_tracks_the_reference():
    opsft, grpo, sft = [0.9, 0.8], [1.0, 0.8], [0.1, 0.2]
    assert closer_to(opsft, grpo, sft) == pytest.approx(statistics.fmean([0.8, 0.6]) - statistics.fmean([0.1, 0.0]))
    assert closer_to(opsft, sft, grpo) == pytest.approx(-closer_to(opsft, grpo, sft))
    assert math.isnan(closer_to([math.nan], [1.0], [0.0]))
    assert relative_gap([11.0, 9.0], [10.0, 10.0]) == pytest.approx(0.0)
    assert relative_gap([12.0], [10.0]) == pytest.approx(0.2)


def test_speedup_counts_steps_to_the_reference_final_accuracy():
    reference = {10: 20.0, 20: 30.0, 30: 40.0, 40: 50.0}
    assert steps_to_reach(reference, 35.0) == 30 and steps_to_reach(reference, 60.0) is None
    assert speedup(reference, {10: 30.0, 20: 55.0, 30: 50.0, 40: 49.0}) == pytest.approx(40 / 20)
    # never reached: steps_ref / T, an upper bound of the true (smaller) ratio
    assert speedup(reference, {10: 0.0, 20: 0.0, 30: 0.0, 40: 49.0}) == pytest.approx(40 / 40)
    # a reference that already reached its final accuracy early is compared at that step, not at T
    assert speedup({10: 50.0, 20: 40.0}, {10: 60.0, 20: 60.0}) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="different steps"):
        speedup(reference, {10: 1.0})


def test_sign_agreement_counts_equal_signs_and_missing_tensors_as_disagreeing():
    a = Direction({"w": torch.tensor([1, 0, -1, 1], dtype=torch.int8), "b": torch.tensor([1, 1], dtype=torch.int8)})
    b = Direction({"w": torch.tensor([1, 0, 1, 1], dtype=torch.int8)})
    assert sign_agreement(a, b) == pytest.approx(3 / 6)
    assert sign_agreement(a, a) == 1.0


def test_largest_difference_walks_nested_results_and_names_a_mismatch():
    a = {"x": [1.0, math.nan, {"y": 2}], "label": "s0"}
    assert largest_difference(a, {"x": [1.5, math.nan, {"y": 2}], "label": "s0"}) == pytest.approx(0.5)
    assert largest_difference(a, a) == 0.0
    with pytest.raises(ValueError, match=r"\.x\[2\]: keys differ"):
        largest_difference(a, {"x": [1.0, 1.0, {"z": 2}], "label": "s0"})
    with pytest.raises(ValueError, match="label"):
        largest_difference(a, {**a, "label": "s1"})


def test_frame_value_names_the_missing_row():
    import pandas as pd

    frame = pd.DataFrame([{"task": "code", "metric": "plus_avg_at_k", "value": 0.5}])
    assert frame_value(frame, "code", "plus_avg_at_k") == 0.5
    with pytest.raises(KeyError, match="'code', metric 'base_avg_at_k'"):
        frame_value(frame, "code", "base_avg_at_k")


def test_sequences_strip_padding_and_label_only_completion_tokens():
    batch = {"input_ids": torch.tensor([[9, 9, 1, 2, 3, 4, 9], [1, 5, 6, 7, 8, 4, 9]]),
             "attention_mask": torch.tensor([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 0]]),
             "mask": torch.tensor([[0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 1, 0]])}  # target t predicts token t + 1
    first, second = list(sequences(batch))
    assert first["input_ids"].tolist() == [[1, 2, 3, 4]]
    assert first["labels"].tolist() == [[-100, -100, 3, 4]]
    assert second["labels"].tolist() == [[-100, -100, -100, 7, 8, 4]]
    assert second["attention_mask"].tolist() == [[1] * 6]


def test_mass_in_mask_and_gain_kept_closed_form():
    energy = {"a": torch.tensor([4.0, 0.0, 1.0]), "b": torch.tensor([[3.0, 2.0]])}
    mask = {"a": torch.tensor([True, False, False]), "b": torch.tensor([[False, True]])}
    mass, share = mass_in_mask(energy, mask)
    assert mass == pytest.approx(6 / 10) and share == pytest.approx(2 / 5)
    with pytest.raises(KeyError, match="'b'"):
        mass_in_mask(energy, {"a": mask["a"]})
    assert gain_kept(masked=14.0, full=20.0, base=10.0) == pytest.approx(0.4)
    assert math.isnan(gain_kept(masked=14.0, full=9.0, base=10.0))


def test_heldout_mass_excess_can_fall_below_the_mask_share_closed_form():
    fisher = {"a": torch.tensor([5.0, 4.0, 0.0, 0.0, 0.0]), "b": torch.tensor([[1.0, 0.5, 0.0, 0.0, 0.0]])}
    mask = top_fraction(fisher, 0.2)  # k = 2 of 10 entries: a[0], a[1]
    own, share = mass_in_mask(fisher, mask)  # energy shaped like the Fisher, as on the Fisher's own batches
    heldout = {"a": torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0]), "b": torch.tensor([[1.0, 1.0, 1.0, 1.0, 2.0]])}
    mass, _ = mass_in_mask(heldout, mask)
    assert share == pytest.approx(0.2) and own - share == pytest.approx(9 / 10.5 - 0.2)
    assert mass == pytest.approx(1 / 10) and mass - share == pytest.approx(-0.1)


class BiasLM(torch.nn.Module):
    """logits_t = b at every position, so d log p(y_t) / d b = onehot(y_t) - softmax(b)."""

    def __init__(self, bias: torch.Tensor) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(bias)

    def forward(self, input_ids, **_):
        return SimpleNamespace(logits=self.bias.expand(*input_ids.shape, -1))


def test_gradient_energy_sums_squared_batch_gradients_closed_form():
    model = BiasLM(torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64))
    p, e = torch.softmax(model.bias.detach(), 0), torch.eye(3, dtype=torch.float64)
    ones = torch.ones(1, 3, dtype=torch.long)
    batches = [{"input_ids": torch.tensor([[0, 1, 1]]), "attention_mask": ones, "mask": torch.tensor([[0.0, 1.0]])},
               {"input_ids": torch.tensor([[0, 2, 0]]), "attention_mask": ones, "mask": torch.tensor([[1.0, 1.0]])}]
    # SFT L_b = -mean of the trained tokens' log p: dL/db = p - e_1 (token 1), then p - (e_2 + e_0) / 2
    expected = (p - e[1]) ** 2 + (p - (e[2] + e[0]) / 2) ** 2
    energy = gradient_energy(model, ObjectiveConfig(name="sft"), batches)["bias"]
    assert energy.dtype == torch.float32 and torch.allclose(energy.double(), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="no batch"):
        gradient_energy(model, ObjectiveConfig(name="sft"), [])


def rollout_source(prompts: list[str], prompts_per_step: int) -> RolloutSource:
    """A GRPO rollout source over ``prompts`` (no sampler: only its prompt draws are used)."""
    return RolloutSource([Example(p) for p in prompts], None, lambda key, text: 0.0, prompts_per_step=prompts_per_step,
                         group_size=2, temperature=1.0, max_new_tokens=4, seed=0,
                         objective=ObjectiveConfig(name="grpo"))


def test_heldout_source_shares_no_prompt_with_the_fisher_batches():
    prompts = [f"p{i}" for i in range(12)]
    source = rollout_source([*prompts, prompts[0]], prompts_per_step=4)  # p0 twice: both copies are held out
    fisher_prompts = {e.prompt for step in range(2) for e in source.prompts(step)}
    assert "p0" in fisher_prompts  # (seed 0 draws it, so the twin case is exercised)
    heldout = heldout_source(source, 2)
    assert {e.prompt for e in heldout.examples} == set(prompts) - fisher_prompts
    assert len(heldout.examples) == 13 - sum(e.prompt in fisher_prompts for e in source.examples)
    drawn = [e.prompt for step in range(2, 4) for e in heldout.prompts(step)]
    assert len(drawn) == 8 and not set(drawn) & fisher_prompts
    assert len(source.examples) == 13  # the run's own source is untouched


def test_heldout_source_shrinks_batches_and_rejects_an_exhausted_or_static_source():
    small = heldout_source(rollout_source([f"p{i}" for i in range(5)], prompts_per_step=4), 1)
    assert len(small.examples) == 1 and len(small.prompts(1)) == 1
    with pytest.raises(ValueError, match="none is left"):
        heldout_source(rollout_source([f"p{i}" for i in range(4)], prompts_per_step=4), 1)
    with pytest.raises(TypeError, match="rollout"):
        heldout_source(StaticSource([Example("p", "c")], None, batch_size=1, seed=0), 1)
