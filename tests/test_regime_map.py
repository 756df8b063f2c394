"""The regime map (issue "Where each claim holds"): its grid, the drift law's arithmetic on closed cases, the
generated sentences and DIVERGED cells on written records, and one cell end to end at `smoke` (resume included)."""

import math

import pytest

from ablations import regime_map as grid
from opsft.claims import drift_law, map_report
from opsft.claims.regime_map import (
    Cell,
    cell_path,
    cell_runs,
    cell_seeds,
    grid_cells,
    horizons,
    main_cell,
    run_map,
)
from opsft.claims.scored import encode
from opsft.config import OptimConfig


def test_the_grid_has_every_rate_the_v_rule_axis_and_the_recipe_schedule():
    labels = [c.label for c in grid_cells("regime")]
    assert labels == ["lr1e-05", "lr3e-05", "lr1e-04", "lr1e-04_fp32v", "lr1e-05_cosine"]
    assert [c.label for c in grid_cells("ci")] == labels  # every scale without a grid of its own
    assert [c.label for c in grid_cells("reference")] == ["lr3e-05", "lr1e-04", "lr3e-04", "lr3e-04_cosine"]
    assert main_cell("reference").label == "lr3e-04" and main_cell("regime").label == "lr1e-04"
    assert horizons(Cell(1e-4), 400) == (50, 100, 200, 400)
    assert horizons(Cell(1e-5, schedule="cosine"), 400) == (400,)  # a decaying schedule's snapshots are no runs
    assert horizons(Cell(1e-4), 4) == (1, 2, 4)


def test_cell_runs_train_the_cells_rate_and_schedule_with_v_from_one_grpo_run():
    from ablations.claims import scale_profile

    grpo, arms = cell_runs(Cell(1e-5, schedule="cosine"), scale_profile("regime"), 0)
    assert set(arms) == set(grid.TRAINED_ARMS)
    sft = arms["sft"]
    assert (sft.optim.lr, sft.optim.schedule, sft.optim.warmup_frac, sft.steps) == (1e-5, "cosine", 0.1, 400)
    assert {a.constraint.direction_run for n, a in arms.items() if n != "sft"} == {grpo}
    assert arms["random_sign"].constraint.mode == "random-sign" and arms["opsft"].constraint.rule == "bf16"
    _, fp32 = cell_runs(Cell(1e-4, rule="fp32"), scale_profile("regime"), 0)
    # the horizons beside SFT's own quarter snapshots
    assert fp32["opsft"].constraint.rule == "fp32" and fp32["sft"].snapshot_steps == (50, 100, 200, 300)
    assert arms["opsft"].constraint.seed == 0 and arms["random_sign"].constraint.seed == 0
    assert cell_runs(Cell(1e-4), scale_profile("regime"), 3)[1]["opsft"].constraint.seed == 0  # the seed is unused
    assert cell_runs(Cell(1e-4), scale_profile("regime"), 3)[1]["random_location"].constraint.seed == 3


def test_reference_cells_no_claim_shares_train_three_seeds_and_x05_trains_the_maps_runs():
    import importlib.util
    from pathlib import Path

    from ablations.claims import scale_profile
    from opsft.claims.declared import declared_arms

    scale = scale_profile("reference")
    seeds = {c.label: cell_seeds("reference", scale, c) for c in grid_cells("reference")}
    assert seeds == {"lr3e-05": (0, 1, 2), "lr1e-04": (0, 1, 2), "lr3e-04": (0, 1, 2, 3, 4),
                     "lr3e-04_cosine": (0, 1, 2)}
    path = Path(__file__).resolve().parent.parent / "suite" / "test_x05_ratchet.py"
    spec = importlib.util.spec_from_file_location("x05_arms", path)
    x05 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(x05)
    declared = dict(declared_arms(x05, "reference", scale, 2, {}))
    cell = cell_runs(Cell(3e-4), scale, 2)[1]
    assert declared["sign"] == cell["opsft"] and declared["sft"] == cell["sft"]
    assert declared["random_sign"] == cell["random_sign"] and declared["location"] == cell["location"]


def test_lr_sum_and_the_law_on_closed_cases():
    assert drift_law.lr_sum(OptimConfig(lr=1e-4), 400, 100) == pytest.approx(1e-2)
    # warmup over 2 of 4 steps: factors 1/2, 1, then cosine from 1 to 0.1 at progress 0 and 1/2: 1 and 0.55
    cosine = OptimConfig(lr=1.0, schedule="cosine", warmup_frac=0.5, min_lr_ratio=0.1)
    assert drift_law.lr_sum(cosine, 4, 4) == pytest.approx(0.5 + 1 + 1 + 0.55)
    c = drift_law.fitted_constant(0.5e-2, 1e-2)
    points = drift_law.predict(c, {("a", 100): (0.5e-2, 1e-2), ("b", 100): (0.8e-3, 1e-3)})
    assert [p.predicted for p in points] == pytest.approx([0.5e-2, 0.5e-3])
    assert [p.cell for p in drift_law.breaks(points)] == ["b"]  # 60% off
    assert math.isnan(drift_law.fitted_constant(math.nan, 1.0))


def _record(cell: str, seed: int, opsft: float, diverged: dict | None = None) -> dict:
    """A measured (cell, seed) with C02's keys at one horizon, each an accuracy on 200 problems right on its first
    ones (the base at 10%, so that OPSFT and GRPO moved)."""
    def row(arm, value):
        right = round(2 * value)
        return {"arm": arm, "seed": seed, "horizon": 4, "values": {"in_domain": value},
                "problems": {"in_domain": encode([100.0] * right + [0.0] * (200 - right))}}

    rows = [row(arm, value) for arm, value in (("opsft", opsft), ("sft", 40.0 + seed), ("grpo", opsft), ("base", 10.0))]
    return {"cell": cell, "seed": seed, "rows": rows, "diverged": diverged or {}}


def test_verdicts_sentences_and_divergence_come_from_the_records():
    records = [_record("lr1e-04", s, 50.0 + s) for s in range(3)]
    records += [_record("lr1e-05", s, 30.0 + s) for s in range(3)]
    records += [_record("lr3e-05", s, 45.0, {"opsft": 3} if s == 1 else None) for s in range(3)]
    cells = map_report.claim_grid("C02", records)
    assert [(c.cell, c.verdict) for c in cells] == [
        ("lr1e-04", "REPRODUCED"), ("lr1e-05", "NOT REPRODUCED"), ("lr3e-05", "DIVERGED (opsft at step 3, seed 1)")]
    sentence = map_report.holds_where("C02", cells)
    assert sentence.startswith("C02 (sign_beats_sft) holds at lr1e-04 x 4; fails at lr1e-05 x 4; undecided")
    assert "lr3e-05 x 4" in sentence
    table = map_report.claim_table("C02", cells)
    assert table[-1] == "| lr3e-05 | DIVERGED (opsft at step 3, seed 1) |"


@pytest.mark.slow
def test_one_cell_end_to_end_resumes_without_measuring_again(tmp_path, cache_env, monkeypatch):
    records = run_map("smoke", tmp_path, ("lr1e-04_fp32v",))
    text = (tmp_path / "README.md").read_text()
    assert "### C02 sign_beats_sft" in text and "## The drift law" in text and "(bit-identical)" in text
    assert {"C02_map.png", "X05_map.png", "drift.png"} <= {p.name for p in tmp_path.iterdir()}
    travel = [r["values"]["travel_per_weight"] for r in records[0]["rows"] if r["arm"] == "sign"]
    assert all(t > 0 for t in travel), "the fp32 v of a 4-step GRPO run is not empty: the sign arm travels along it"

    def refuse(*_):
        raise AssertionError("a finished cell was measured again")

    monkeypatch.setattr("opsft.claims.regime_map.measure_cell", refuse)
    assert run_map("smoke", tmp_path, ("lr1e-04_fp32v",))[0]["rows"] == records[0]["rows"]
    path = cell_path(tmp_path, Cell(1e-4, rule="fp32"), 0)
    path.write_text("{broken")
    with pytest.raises(ValueError, match=f"regime map cell file {path} is corrupt"):
        run_map("smoke", tmp_path, ("lr1e-04_fp32v",))
    with pytest.raises(ValueError, match="unknown map cell"):
        run_map("smoke", tmp_path, ("lr9",))


@pytest.mark.slow
def test_the_map_in_two_worker_processes_writes_the_records_one_process_writes(tmp_path, cache_env):
    one = run_map("smoke", tmp_path / "one", ("lr1e-04", "lr1e-04_fp32v"))
    two = run_map("smoke", tmp_path / "two", ("lr1e-04", "lr1e-04_fp32v"), jobs=2)
    assert [(r["cell"], r["seed"], r["rows"]) for r in two] == [(r["cell"], r["seed"], r["rows"]) for r in one]
    assert (tmp_path / "two" / "README.md").read_text() == (tmp_path / "one" / "README.md").read_text()
    with pytest.raises(ValueError, match="jobs=0"):
        run_map("smoke", tmp_path / "one", jobs=0)
