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
