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
