"""The calibration pipeline end to end at smoke scale (nano organism, a few steps)."""

import json

import pytest

from opsft.calibrate import calibrate, render

pytestmark = pytest.mark.slow


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
