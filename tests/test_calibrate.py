"""The calibration pipeline end to end at smoke scale (nano organism, a few steps)."""

import json

import pytest

from ablations.calibration import GAIN, GRID, GROUPS, SCALES
from opsft.calibrate import (
    calibrate,
    kept_rows,
    method_config,
    regime_checks,
    render,
    render_provenance,
    render_regime_checks,
    row_steps,
    scoring_draw,
    selected_rows,
    setting_key,
    setting_steps,
)
from opsft.provenance import provenance


@pytest.mark.slow
def test_smoke_calibration_writes_a_row_per_method_with_measured_fractions(tmp_path, cache_env):
    report = calibrate("smoke", tmp_path)
    assert [r["method"] for r in report["rows"]] == ["grpo", "opd", "sft"]
    for row in report["rows"]:
        assert 0 <= row["visible_updated"] <= 100
        assert -1 - 1e-9 <= row["interval_cosine"] <= 1 + 1e-9
    assert json.loads((tmp_path / "organism.json").read_text()) == json.loads(json.dumps(report))
    table = (tmp_path / "organism.md").read_text()
    # the generated block of the page (a hand-written section beside it is kept: opsft.io.update_markdown_section)
    assert table == f"<!-- begin:calibration -->\n{render(report, tmp_path / 'organism.md').rstrip()}\n<!-- end:calibration -->\n"
    assert [table.count(f"| 4 / 32 | {m} |") for m in ("grpo", "opd", "sft")] == [1, 1, 1]
    assert table.count("| nano | fp32 |") == 4, "three method lines and the setting's regime check"
    assert "Settings meeting all three: " in table and " of 1." in table
    in_workers = calibrate("smoke", tmp_path / "workers", jobs=2)

    def measured(rep: dict) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "provenance"} for r in rep["rows"]]  # utc differs

    assert measured(in_workers) == measured(report), "runs scored in worker processes give the same table"
    assert {r["provenance"]["commit"] for r in report["rows"]} == {provenance()["commit"]}


def test_recalibrating_some_settings_keeps_the_other_settings_rows(tmp_path):
    path = tmp_path / "organism.json"
    setting = {"precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-5, "steps": 100, "problems": 256}
    micro, small = {**setting, "organism": "micro"}, {**setting, "organism": "small"}
    assert kept_rows(path, "full", {setting_key(small)}) == []
    rows = [{**micro, "method": "grpo"}, {**small, "method": "grpo"}, {**micro, "steps": 1000, "method": "sft"}]
    path.write_text(json.dumps({"scale": "full", "rows": rows}))
    assert kept_rows(path, "full", {setting_key(small)}) == [rows[0], rows[2]]
    assert kept_rows(path, "full", {setting_key(micro), setting_key(small)}) == rows[2:], \
        "a row differing only in its steps is another setting"
    assert kept_rows(path, "ci", {setting_key(small)}) == [], "rows of another scale are never mixed in"


def test_groups_select_their_rows_and_unknown_groups_are_named():
    assert selected_rows("full", ("micro",), ("gain",)) == [dict(r) for r in GAIN]
    assert all(r["organism"] == "small" for r in selected_rows("full", ("small",), None))
    assert len(selected_rows("full", None, None)) == sum(r["organism"] in SCALES["full"]["organisms"]
                                                         for g in GROUPS.values() for r in g)
    assert selected_rows("smoke", None, ("gain",)) == [{**GRID[0], "organism": "nano"}]
    with pytest.raises(KeyError, match="'warmup'"):
        selected_rows("full", None, ("warmup",))


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


def test_scoring_runs_at_the_pinned_thread_count_whatever_the_caller_set(monkeypatch):
    """A row's accuracies must not depend on the scoring process's torch threads (cached runs are trained at
    ``CACHED_THREADS``; greedy decoding over another reduction order could flip a near tie)."""
    import torch

    import opsft.calibrate as calibrate_module
    from opsft.evals.organism_scores import Scored
    from opsft.organism.tokenizer import build_tokenizer
    from opsft.threads import CACHED_THREADS

    seen = []

    def scored(model, tokenizer, sets):
        seen.append(torch.get_num_threads())
        return {key: Scored(correct=(1, 0), completions=("", "")) for key in sets}

    monkeypatch.setattr(calibrate_module, "lm_eval_scored", scored)
    before = torch.get_num_threads()
    torch.set_num_threads(CACHED_THREADS + 1)
    try:
        out = calibrate_module.score(torch.nn.Linear(1, 1), build_tokenizer(), SCALES["smoke"])
        assert torch.get_num_threads() == CACHED_THREADS + 1, "the caller's count is restored"
    finally:
        torch.set_num_threads(before)
    assert seen == [CACHED_THREADS], "every set in one lm-eval run"
    assert out["in_domain"] == 50.0 and out["held_out_mean"] == 50.0


def _rows(visible: dict, gains: dict, sft_held: list[float], steps: int = 100) -> list[dict]:
    """Rows of one setting: per method, one row per seed with the given visible % and in-domain gains (base
    in-domain 20, held-out 40); SFT's held-out accuracies per seed, the others keep the base's."""
    base = {"in_domain": 20.0, "held_out_mean": 40.0}
    setting = {"organism": "micro", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-5, "steps": steps,
               "problems": 256}
    return [{**setting, "method": m, "seed": i, "base": base, "visible_updated": visible[m],
             "acc_in_domain": 20.0 + g, "acc_held_out_mean": sft_held[i] if m == "sft" else 40.0}
            for m in ("grpo", "opd", "sft") for i, g in enumerate(gains[m])]


def test_the_regime_check_names_which_condition_a_setting_misses():
    regime = {"grpo": 20.0, "opd": 50.0, "sft": 90.0}
    learn = {"grpo": [2.0, 3.0, 4.0], "opd": [0.0, 0.0, 0.0], "sft": [5.0, 6.0, 7.0]}
    good = _rows(regime, learn, [30.0, 31.0, 29.0])
    dense_grpo = _rows({**regime, "grpo": 60.0}, learn, [30.0, 31.0, 29.0], steps=1000)
    (check,) = regime_checks({"rows": good})
    assert check["setting"] == ("micro", "fp32", 1e-6, 1e-5, 100, 100, 256)
    assert check["ordering"] and check["both_learn"] and check["sft_forgets"] and check["all"]
    checks = regime_checks({"rows": good + dense_grpo})
    assert [c["all"] for c in checks] == [True, False]
    assert not checks[1]["ordering"] and checks[1]["both_learn"]
    noisy = _rows(regime, {**learn, "grpo": [-3.0, 1.0, 8.0]}, [30.0, 31.0, 29.0])
    assert not regime_checks({"rows": noisy})[0]["both_learn"], "a gain within its seed spread is not measured"
    slight = _rows(regime, learn, [39.3, 39.3, 39.3])
    assert not regime_checks({"rows": slight})[0]["sft_forgets"], "a 0.7-point drop is under MIN_EFFECT"
    lines = render_regime_checks({"rows": good + dense_grpo})
    assert "| micro | fp32 | 1e-06 / 1e-05 | 100 / 256 | yes | yes | yes | yes |" in lines
    assert "| micro | fp32 | 1e-06 / 1e-05 | 1000 / 256 | no | yes | yes | no |" in lines
    assert lines[-1] == "Settings meeting all three: 1 of 2."
    assert "No calibrated setting" in render_regime_checks({"rows": dense_grpo})[-1]


def test_a_row_can_give_sft_more_steps_than_the_on_policy_runs():
    row = {"organism": "small", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-4, "sft_steps_factor": 4}
    scale = SCALES["full"]
    assert [row_steps(row, scale, m) for m in ("grpo", "opd", "sft")] == [100, 100, 400]
    assert [method_config(m, row, scale, 0, "small").steps for m in ("grpo", "sft")] == [100, 400]
    assert method_config("sft", row, scale, 0, "small").snapshot_steps == (100, 200, 300)
    assert row_steps({**row, "steps_factor": 10, "sft_steps_factor": 4}, scale, "grpo") == 1000
    assert row_steps({"steps_factor": 10}, scale, "sft") == 1000, "without sft_steps_factor SFT runs as long"
    assert setting_key({**row, **setting_steps(row, scale), "problems": 4096}) == \
        ("small", "fp32", 1e-6, 1e-4, 100, 400, 4096)
    regime = {"grpo": 20.0, "opd": 50.0, "sft": 90.0}
    learn = {"grpo": [2.0, 3.0, 4.0], "opd": [0.0, 0.0, 0.0], "sft": [5.0, 6.0, 7.0]}
    rows = [{**r, "rl_steps": 100, "sft_steps": 400, "steps": 400 if r["method"] == "sft" else 100}
            for r in _rows(regime, learn, [30.0, 31.0, 29.0])]
    (check,) = regime_checks({"rows": rows})
    assert check["setting"][4:6] == (100, 400) and check["all"], "the methods of one setting are checked together"
    table = render({"scale": "full", "rows": [{**r, "acc_train_set": 0.0, "wall_time": 1.0, "interval_cosine": 0.5,
                                               "base": {**r["base"], "train_set": 0.0, "times": 0.0, "neg": 0.0,
                                                        "format": 0.0}} for r in rows]})
    assert "| micro | fp32 | 1e-06 / 1e-05 | 100 / 256 | grpo |" in table
    assert "| micro | fp32 | 1e-06 / 1e-05 | 400 / 256 | sft |" in table
    assert "| micro | fp32 | 1e-06 / 1e-05 | 100 (SFT 400) / 256 | yes | yes | yes | yes |" in table


def test_the_provenance_section_names_each_commit_the_seeds_the_draw_and_every_digest():
    learn = {"grpo": [2.0, 3.0], "opd": [0.0, 0.0], "sft": [5.0, 6.0]}
    rows = _rows({"grpo": 20.0, "opd": 50.0, "sft": 90.0}, learn, [30.0, 31.0])
    stamp = {"commit": "abc", "dirty": False, "utc": "2026-12-06T00:00:00+00:00"}
    rows = [{**r, "digest": f"d{i}", **({"provenance": stamp} if i else {})} for i, r in enumerate(rows)]
    lines = render_provenance({"rows": rows, "test_draw": scoring_draw(SCALES["smoke"])})
    assert "- commit `abc` (clean tree), 2026-12-06T00:00:00+00:00: 5 rows" in lines
    assert "- commit `not recorded` (unknown tree), date not recorded: 1 rows" in lines
    assert "- seeds: 0, 1" in lines
    assert lines[5].startswith("- test draw: in_domain: test seed 1, 16 problems; train_set: train seed 0, 16 problems")
    assert "| micro / fp32 / 1e-06 / 1e-05 / 100 / 100 / 256 | grpo | d0 (0), d1 (1) |" in lines
