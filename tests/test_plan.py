"""The plan of a main job (``opsft.plan``): ancestors and staged arms, costs from measured runs of the same shape,
the critical path, and the claims' declared arms as pytest collects them (nothing trains here; that every claim
test loads exactly its declared runs is checked by the ``claim`` fixture on every claims run, CI's included)."""

import dataclasses
import json
from pathlib import Path

import pytest

from ablations.claims import scale_profile
from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.declared import DeclaredRuns, Staged
from opsft.claims.registry import CLAIMS
from opsft.plan import Plan, build_plan, claim_arms, measured_step_seconds, render

SCALE = scale_profile("smoke")


def fake_finished_run(cache: Path, config, wall_time: float) -> None:
    """A finished run's result.json and config.json in ``cache``, as ``opsft.runs.run`` writes them."""
    folder = cache / "runs" / config.digest()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config.to_dict()))
    (folder / "result.json").write_text(json.dumps({"wall_time": wall_time, "sha256": {}}))


def test_a_constrained_arm_brings_its_direction_run_and_a_staged_arm_its_parent():
    grpo, sft = baseline("grpo", SCALE, 0), baseline("sft", SCALE, 0)
    opsft = opsft_recipe(sft, grpo, "sign")
    later = dataclasses.replace(sft, init=opsft)
    plan = Plan()
    plan.add("C02 seed0", opsft)
    plan.add("X seed0", Staged(after=sft, build=lambda result: later, shape=later))
    keys = list(plan.runs)
    assert keys[:2] == [opsft.digest(), grpo.digest()]
    assert sft.digest() in plan.runs and plan.runs[sft.digest()].needed_by == ["X seed0"]
    staged = [r for r in plan.runs.values() if r.staged_after]
    assert len(staged) == 1 and plan.parents_of(staged[0]) == [opsft.digest(), sft.digest()]


def test_costs_come_from_runs_of_the_same_shape_and_the_critical_path_chains_parents(tmp_path):
    grpo, sft = baseline("grpo", SCALE, 0), baseline("sft", SCALE, 0)
    opsft = opsft_recipe(sft, grpo, "sign")
    fake_finished_run(tmp_path, baseline("grpo", SCALE, 1), wall_time=8.0)  # another seed: same shape
    fake_finished_run(tmp_path, dataclasses.replace(opsft, seed=5), wall_time=2.0 * opsft.steps)
    rates = measured_step_seconds(tmp_path)
    assert rates[("nano", "grpo", False, "fp32")] == pytest.approx(8.0 / grpo.steps)
    plan = Plan()
    plan.add("C02", opsft)
    plan.add("C02", sft)
    plan.price(tmp_path)
    assert plan.runs[grpo.digest()].estimate == pytest.approx(8.0)
    assert plan.runs[opsft.digest()].estimate == pytest.approx(2.0 * opsft.steps)
    assert plan.runs[sft.digest()].estimate is None  # no SFT run measured
    assert plan.critical_path() == pytest.approx(8.0 + 2.0 * opsft.steps)
    summary = plan.summary(workers=2)
    assert (summary["runs"], summary["to_train"], summary["unpriced"]) == (3, 3, 1)
    fake_finished_run(tmp_path, grpo, wall_time=8.0)
    plan.price(tmp_path)
    assert plan.runs[grpo.digest()].cached and plan.critical_path() == pytest.approx(2.0 * opsft.steps)
    assert "1 cached" in render(plan, 2)


def test_declared_runs_admit_ancestors_and_staged_arms_and_name_the_unloaded():
    grpo, sft = baseline("grpo", SCALE, 0), baseline("sft", SCALE, 0)
    opsft = opsft_recipe(sft, grpo, "sign")
    other = dataclasses.replace(sft, seed=9)
    declared = DeclaredRuns({"opsft": opsft, "late": Staged(after=sft, build=lambda result: other, shape=other)})
    assert declared.admit(grpo, {}) and not declared.admit(other, {})  # staged: its parent has not run
    assert declared.admit(sft, {}) and declared.admit(other, {sft.digest(): "result"})
    assert declared.unloaded() == ["opsft"]
    assert declared.admit(opsft, {}) and declared.unloaded() == []


def test_every_claim_test_declares_its_arms_at_smoke():
    assert {label.split()[0] for label, _ in claim_arms("smoke", None, Path("suite"))} == set(CLAIMS)
    plan = build_plan("smoke", regime_map=False, calibration=False)
    grpo, sft = baseline("grpo", SCALE, 0), baseline("sft", SCALE, 0)
    c02 = [r for r in plan.runs.values() if "C02 seed0" in r.needed_by]
    assert {r.key for r in c02} == {sft.digest(), grpo.digest(), opsft_recipe(sft, grpo, "sign").digest()}
    assert any(r.staged_after for r in plan.runs.values() if "C19 opd seed0" in r.needed_by)


def test_the_plan_of_a_k_selection_holds_only_those_claims():
    plan = build_plan("smoke", expr="c02", regime_map=False, calibration=False)
    assert {label for run in plan.runs.values() for label in run.needed_by} == {"C02 seed0"}


def test_shapes_the_cache_has_not_run_are_priced_from_saved_claims_runs(tmp_path):
    grpo = baseline("grpo", SCALE, 0)
    storage = tmp_path / "claims" / "smoke"
    storage.mkdir(parents=True)
    saved = {"claims": {"C02": {"runs": [{"digest": "d1", "organism": "nano", "objective": "grpo",
                                          "constraint": "none", "steps": 10, "wall_time": 30.0}]}}}
    (storage / "0001_smoke.json").write_text(json.dumps(saved))
    plan = Plan()
    plan.add("C02", grpo)
    plan.price(tmp_path / "cache", tmp_path / "claims")
    assert plan.runs[grpo.digest()].estimate == pytest.approx(3.0 * grpo.steps)
    fake_finished_run(tmp_path / "cache", baseline("grpo", SCALE, 1), wall_time=1.0 * grpo.steps)
    plan.price(tmp_path / "cache", tmp_path / "claims")  # the cache's own measurement comes first
    assert plan.runs[grpo.digest()].estimate == pytest.approx(1.0 * grpo.steps)


def shipped_file(path: Path, organisms: dict, cpu: str = "CPU X") -> Path:
    """A tiny shipped shapes file measured on ``cpu``: no shapes, these organisms."""
    path.write_text(json.dumps({"cpus": {cpu: {"shapes": [], "organisms": organisms}}}))
    return path


NANO = {"base_s": 10.0, "teacher_s": 30.0, "measure_s": 2.0, "trajectories_s": 5.0,
        "trajectory_sets": {"arith-32-4-0": 4.0}, "score_s": 3.0, "score_eval_n": 8}


@pytest.fixture
def this_cpu(monkeypatch):
    """This machine's CPU model, as the shipped file names it."""
    monkeypatch.setattr("opsft.provenance.cpu_model", lambda: "CPU X")


def teacher_sft(seed: int = 0):
    """A smoke SFT run on the organism's teacher trajectories (32 arith problems)."""
    sft = baseline("sft", SCALE, seed)
    return dataclasses.replace(sft, source=dataclasses.replace(sft.source, trajectory_source="teacher"))


def test_the_organism_build_is_priced_only_for_what_the_cache_lacks(tmp_path, this_cpu):
    from opsft.organism.specs import ORGANISMS
    from opsft.plan import trajectory_stem
    from opsft.pretraining import model_folder, organism_folder

    shipped = shipped_file(tmp_path / "shapes.json", {"nano": NANO})
    sft, cache = teacher_sft(), tmp_path / "cache"
    assert trajectory_stem("arith", 32) == "arith-32-4-0"
    plan = Plan(eval_n=8)
    plan.add("C", sft)
    plan.price(cache, shipped=shipped)
    # empty cache: both models pretrain in parallel, then the measurement, then the SFT set's trajectories
    assert plan.builds["nano"]["seconds"] == pytest.approx(30.0 + 2.0 + 4.0)
    summary = plan.summary(workers=2)
    assert summary["build_minutes"] == pytest.approx(36.0 / 60) and summary["to_build"] == ["nano"]
    teacher = model_folder(ORGANISMS["nano"].recipe("teacher"), cache / "organisms")
    teacher.mkdir(parents=True)
    (teacher / "model.json").write_text("{}")  # another organism built the shared teacher
    plan.price(cache, shipped=shipped)
    assert plan.builds["nano"]["seconds"] == pytest.approx(10.0 + 2.0 + 4.0)
    folder = organism_folder("nano", cache / "organisms")
    folder.mkdir(parents=True)
    (folder / "organism.json").write_text("{}")
    plan.price(cache, shipped=shipped)
    assert plan.builds["nano"]["seconds"] == pytest.approx(4.0)  # built; the trajectories are not sampled yet
    (folder / "trajectories").mkdir()
    (folder / "trajectories" / "arith-32-4-0.jsonl.provenance.json").write_text("{}")
    plan.price(cache, shipped=shipped)
    summary = plan.summary(workers=2)
    assert plan.builds["nano"]["seconds"] == 0.0 and summary["build_minutes"] == 0.0 and summary["to_build"] == []
    assert "organisms built" in render(plan, 2).splitlines()[-1]


def test_an_organism_without_a_shipped_build_is_counted_unpriced(tmp_path, this_cpu):
    plan = Plan(eval_n=8)
    plan.add("C", teacher_sft())
    plan.price(tmp_path / "cache", shipped=shipped_file(tmp_path / "shapes.json", {}))
    summary = plan.summary(workers=2)
    assert summary["build_unpriced"] == ["nano"] and summary["build_minutes"] == 0.0
    assert summary["scorings_unpriced"] == summary["scorings"] == 2  # the run and the base
    assert render(plan, 2).endswith("unmeasured, not counted: runs 1, organism builds 1, scorings 2")


def test_scorings_count_distinct_models_and_the_whole_job_adds_build_training_and_scoring(tmp_path, this_cpu):
    grpo, sft = baseline("grpo", SCALE, 0), teacher_sft()
    opsft = opsft_recipe(sft, grpo, "sign")
    cache = tmp_path / "cache"
    fake_finished_run(cache, baseline("grpo", SCALE, 1), wall_time=8.0)  # grpo's shape: 8 s a run
    fake_finished_run(cache, dataclasses.replace(opsft, seed=5), wall_time=2.0 * opsft.steps)
    fake_finished_run(cache, dataclasses.replace(sft, seed=7), wall_time=1.0 * sft.steps)
    plan = Plan(eval_n=8)
    plan.add("C02", opsft)
    plan.add("C02", sft)  # already there as opsft's start: counted once
    plan.add("calibration", grpo, eval_n=16)  # another evaluation size: scored again
    plan.add_scoring(("run", sft.digest(), 1), sft, 8)  # a snapshot, as the map scores its horizons
    plan.add_scoring(("run", sft.digest(), 1), sft, 8)
    assert sorted(plan.scorings) == sorted([
        ("run", opsft.digest(), opsft.steps, 8), ("run", grpo.digest(), grpo.steps, 8),
        ("run", sft.digest(), sft.steps, 8), ("base", "nano", 8), ("run", grpo.digest(), grpo.steps, 16),
        ("base", "nano", 16), ("run", sft.digest(), 1, 8)])
    plan.price(cache, shipped=shipped_file(tmp_path / "shapes.json", {"nano": NANO}))
    summary = plan.summary(workers=2)
    assert summary["scorings"] == 7 and summary["scorings_unpriced"] == 0
    scoring = 5 * 3.0 + 2 * 3.0 * 16 / 8  # 3 s a scoring at 8 problems a family, twice that at 16
    assert summary["scoring_minutes"] == pytest.approx(scoring / 60)
    train = max((8.0 + 2.0 * opsft.steps + 1.0 * sft.steps) / 2, plan.critical_path())
    assert summary["wall_hours_lower_bound"] == pytest.approx(train / 3600)
    assert summary["wall_hours"] == pytest.approx((30.0 + 2.0 + 4.0 + train + scoring / 2) / 3600)
    assert render(plan, 2).splitlines()[-1].startswith("whole job on 2 workers: about")


def test_the_map_scores_every_horizon_of_every_arm_and_a_drifted_base_per_horizon():
    from ablations import regime_map as grid
    from opsft.claims.regime_map import cell_runs, cell_seeds, grid_cells, horizons
    from opsft.plan import add_map_scorings

    scale = scale_profile("ci")
    plan = Plan()
    add_map_scorings(plan, "ci")
    models, scored = set(), 0
    for cell in grid_cells("ci"):
        for seed in cell_seeds("ci", scale, cell):
            arms = cell_runs(cell, scale, seed)[1]
            for h in horizons(cell, arms["sft"].steps):
                trained = [arms[a].digest() for a in grid.TRAINED_ARMS if a in arms]
                models |= {(digest, h) for digest in trained} | {("drift_sign", cell.label, seed, h)}
                scored += len(trained) + 1
    assert len(plan.scorings) == len(models) > 0
    assert scored > len(models)  # the cell of the other v rule trains the main cell's SFT arm: scored once
    assert all(key[-1] == scale["eval_n"] for key in plan.scorings)


@pytest.mark.parametrize("organisms", [{"nano": {"base_s": 1.0}}, {"nano": {**NANO, "score_s": "fast"}},
                                       {"nano": {**NANO, "teacher_s": -1.0}}, ["nano"]])
def test_a_malformed_shipped_organisms_section_is_a_value_error_naming_the_file(tmp_path, this_cpu, organisms):
    from opsft.plan import shipped_organisms

    path = shipped_file(tmp_path / "shapes.json", organisms)
    with pytest.raises(ValueError, match=str(path)):
        shipped_organisms(path)
    plan = Plan(eval_n=8)
    plan.add("C", teacher_sft())
    with pytest.raises(ValueError, match=str(path)):
        plan.price(tmp_path / "cache", shipped=path)


def test_the_shipped_organisms_of_another_cpu_are_not_used(tmp_path, this_cpu):
    from opsft.plan import shipped_organisms

    path = shipped_file(tmp_path / "shapes.json", {"nano": NANO}, cpu="CPU Y")
    assert shipped_organisms(path) == {} and shipped_organisms(path, cpu="CPU Y")["nano"]["score_s"] == 3.0
