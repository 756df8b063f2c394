"""The calibration pipeline end to end at smoke scale (nano organism, a few steps)."""

import json

import pytest

from opsft.calibrate import calibrate, kept_rows, render


@pytest.mark.slow
def test_smoke_calibration_writes_a_row_per_method_with_measured_fractions(tmp_path, cache_env):
    report = calibrate("smoke", tmp_path)
    assert [r["method"] for r in report["rows"]] == ["grpo", "opd", "sft"]
    for row in report["rows"]:
        assert 0 <= row["visible_updated"] <= 100
        assert -1 - 1e-9 <= row["interval_cosine"] <= 1 + 1e-9
    assert json.loads((tmp_path / "organism.json").read_text()) == json.loads(json.dumps(report))
    table = (tmp_path / "organism.md").read_text()
    assert table == render(report)
    assert table.count("| nano | fp32 |") == 3


def test_recalibrating_one_organism_keeps_the_other_organisms_rows(tmp_path):
    path = tmp_path / "organism.json"
    assert kept_rows(path, "full", ("small",)) == []
    rows = [{"organism": "micro", "method": "grpo"}, {"organism": "small", "method": "grpo"}]
    path.write_text(json.dumps({"scale": "full", "rows": rows}))
    assert kept_rows(path, "full", ("small",)) == rows[:1]
    assert kept_rows(path, "full", ("micro", "small")) == []
    assert kept_rows(path, "ci", ("small",)) == [], "rows of another scale are never mixed in"


def test_rows_differing_only_in_steps_are_separate_lines():
    """A horizon row (ten times the steps, same learning rates) is its own line of the table, not averaged into
    the 100-step row of the same setting."""
    base = {"in_domain": 20.0, "held_out_mean": 30.0, "train_set": 25.0, "times": 1.0, "neg": 1.0, "format": 1.0}
    rows = [{"organism": "micro", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-5, "steps": steps, "problems": 256,
             "method": "sft",
             "seed": 0, "visible_updated": 90.0, "interval_cosine": 0.9, "wall_time": 1.0, "base": base,
             "acc_in_domain": acc, "acc_train_set": 0.0, "acc_held_out_mean": 0.0}
            for steps, acc in ((100, 21.0), (1000, 35.0))]
    table = render({"scale": "full", "rows": rows})
    assert "| micro | fp32 | 1e-06 / 1e-05 | 100 / 256 | sft | 90.0 | 1.0 |" in table
    assert "| micro | fp32 | 1e-06 / 1e-05 | 1000 / 256 | sft | 90.0 | 15.0 |" in table
