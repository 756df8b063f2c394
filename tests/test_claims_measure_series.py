"""The claim-side measurements of C10-C13, C20 and X01-X04 against hand-computed and float64 references."""

import math
import statistics

import numpy as np
import pytest
import torch

from opsft.claims.coverage import audit, effect_size, is_accuracy_claim
from opsft.claims.fisher import gain_kept, mass_in_mask, sequences
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
from opsft.claims.registry import get
from opsft.claims.storage import save_run
from opsft.directions import Direction


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


def test_effect_size_is_cohens_dz_against_a_center():
    values = [1.0, 2.0, 4.0]
    x = np.asarray(values, dtype=np.float64)
    assert effect_size(values) == pytest.approx(x.mean() / x.std(ddof=1), rel=1e-12)
    assert effect_size(values, center=1.0) == pytest.approx((x.mean() - 1) / x.std(ddof=1), rel=1e-12)
    assert math.isnan(effect_size([1.0])) and math.isnan(effect_size([0.0, 0.0]))
    assert effect_size([3.0, 3.0]) == math.inf


def test_accuracy_claims_are_those_decided_on_an_accuracy_metric():
    assert is_accuracy_claim(get("C02")) and is_accuracy_claim(get("C10")) and is_accuracy_claim(get("C15"))
    assert not is_accuracy_claim(get("C16")) and not is_accuracy_claim(get("X01"))


def test_audit_reads_the_newest_record_of_each_accuracy_claim_at_the_scale(tmp_path):
    def rows(seeds, gap):
        return [{"arm": arm, "seed": s, "values": {"in_domain": value + s}}
                for s in seeds for arm, value in (("opsft", 10.0 + gap * s), ("sft", 10.0))]

    def claim_record(seeds, gap=1.0):
        return {"verdict": "x", "rows": rows(seeds, gap), "seeds": list(seeds)}

    save_run(tmp_path, "a", {"scale": "ci", "claims": {"C14": claim_record([0]), "C16": claim_record([0])}})
    save_run(tmp_path, "b", {"scale": "full", "claims": {"C14": claim_record([0, 1, 2])}})
    save_run(tmp_path, "c", {"scale": "ci", "claims": {"C02": claim_record([0, 1, 2])}})
    coverage = {c.claim_id: c for c in audit(tmp_path, "ci")}
    assert sorted(coverage) == ["C02", "C14"]  # C16 is not an accuracy claim; C14's full-scale record is not ci's
    assert coverage["C14"].seeds == 1 and coverage["C02"].seeds == 3
    first = coverage["C02"].rules[0]  # opsft - sft > 0: per seed 1.0 * s -> [0, 1, 2]
    assert first.estimate.mean == pytest.approx(1.0) and first.effect_size == pytest.approx(1.0)
    assert audit(tmp_path, "smoke") == []


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
