"""The arm builders claim tests share (``opsft.claims.arms``): what each changes, and what it keeps."""

import dataclasses

import pytest

from ablations.calibration import LONG_SFT, SCALES
from ablations.claims import ROW, SCALE_NAMES, is_recipe_scale, scale_profile
from opsft.calibrate import method_config
from opsft.claims.arms import (
    baseline,
    constrained,
    continued,
    grid_rows,
    on_family,
    opsft_recipe,
    paper_sft_length,
    row_label,
    split_at,
    with_objective,
)
from opsft.evals.suite import SUITES

FULL = SCALES["full"]


def test_every_trainable_scale_samples_with_a_known_evaluation_suite():
    """Sampled evaluations (C13's k completions) use the scale's suite; `regime`, with `full`'s sizes, `full`'s."""
    for name in SCALE_NAMES:
        if not is_recipe_scale(scale_profile(name)):  # a recipe scale scores with its recipe's [eval]
            assert scale_profile(name)["suite"] in SUITES, name
    assert scale_profile("regime")["suite"] == "full"


def test_constrained_takes_v_at_half_the_source_unless_told():
    grpo, sft = baseline("grpo", FULL, 0), baseline("sft", FULL, 0)
    assert constrained(sft, grpo, "sign").constraint.direction_step == grpo.steps // 2
    final = constrained(sft, grpo, "sign", direction_step=None, reset_moments=True).constraint
    assert final.direction_step is None and final.reset_moments and final.direction_run == grpo


def test_opsft_recipe_trains_the_source_runs_length_and_is_constrained_where_sft_runs_as_long():
    for scale in (SCALES["ci"], FULL):  # SFT as long as GRPO: the same config, so no cached run changes digest
        grpo, sft = baseline("grpo", scale, 0), baseline("sft", scale, 0)
        assert opsft_recipe(sft, grpo, "sign") == constrained(sft, grpo, "sign")
    regime = scale_profile("regime")
    grpo, sft = baseline("grpo", regime, 0), baseline("sft", regime, 0)
    arm = opsft_recipe(sft, grpo, "location", seed=3)
    assert (arm.steps, arm.snapshot_steps, sft.steps) == (grpo.steps, grpo.snapshot_steps, 4 * grpo.steps)
    assert arm.constraint == constrained(sft, grpo, "location", seed=3).constraint and arm.source == sft.source


def test_paper_sft_length_is_seven_on_policy_runs_at_the_same_fractions():
    grpo, sft = baseline("grpo", FULL, 0), baseline("sft", FULL, 0)
    long = paper_sft_length(sft, grpo)
    assert long.steps == 7 * grpo.steps == 700
    assert [s / long.steps for s in long.snapshot_steps] == [s / sft.steps for s in sft.snapshot_steps]
    regime = scale_profile("regime")
    grpo, sft = baseline("grpo", regime, 0), baseline("sft", regime, 0)
    assert (sft.steps, paper_sft_length(sft, grpo).steps) == (400, 700)  # the paper's 700 : 100, not 7 x 400


def test_one_field_builders_change_only_their_field():
    sft, grpo = baseline("sft", FULL, 0), baseline("grpo", FULL, 0)
    assert with_objective(sft, "dft") == dataclasses.replace(sft, objective=dataclasses.replace(sft.objective, name="dft"))
    assert on_family(grpo, "code").source == dataclasses.replace(grpo.source, family="code")
    assert continued(sft, grpo) == dataclasses.replace(sft, init=grpo)


def test_split_at_covers_the_run_with_a_prefix_and_a_window_from_it():
    opd = baseline("opd", FULL, 0)
    prefix, window = split_at(opd, 0.2)
    assert (prefix.steps, window.steps) == (20, 80)
    assert window.init == prefix and prefix.init == opd.init
    assert window.snapshot_steps == tuple(s - 20 for s in opd.snapshot_steps)
    assert dataclasses.replace(window, init=opd.init, steps=opd.steps, snapshot_steps=opd.snapshot_steps) == opd
    assert split_at(dataclasses.replace(opd, steps=4, snapshot_steps=()), 0.2)[0].steps == 1  # at least one step
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match="no window"):
            split_at(opd, bad)


def test_grid_rows_sweep_the_organisms_rows_except_at_smoke():
    assert grid_rows("smoke", SCALES["smoke"]) == (ROW,)
    rows = grid_rows("full", FULL)
    assert ROW in rows and {r["precision"] for r in rows} == {"fp32", "bf16"}
    assert len({(r["precision"], r["lr_sft"]) for r in rows}) == len(rows) == 4
    assert row_label(ROW, FULL) == ""
    labels = [row_label(r, FULL) for r in rows if r != ROW]
    assert len(set(labels)) == 3 and not any("." in label for label in labels)
    assert row_label({"precision": "bf16", "lr_sft": 3e-5}, FULL) == "_bf16_lr3e-05"


def test_regime_scale_trains_the_calibrations_long_sft_runs_on_small():
    regime = scale_profile("regime")
    for method in ("grpo", "opd", "sft"):
        for seed in regime["seeds"]:
            assert baseline(method, regime, seed) == method_config(method, LONG_SFT[0], FULL, seed, "small")
    grpo, sft = baseline("grpo", regime, 0), baseline("sft", regime, 0)
    assert (grpo.steps, sft.steps, sft.source.n_problems) == (100, 400, 4096)
    assert grid_rows("regime", regime) == LONG_SFT and row_label(LONG_SFT[0], regime) == ""
    assert row_label(LONG_SFT[1], regime) == "_fp32_lr1e-05"
    assert row_label(ROW, regime) == "_fp32_lr1e-05"
