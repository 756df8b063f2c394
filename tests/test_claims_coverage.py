"""Claim X01's coverage audit (``opsft.claims.coverage``): variance components against closed forms and a large
simulated array, the pass/fail cells' moments, the unbiased least coverage, and the audit of saved records."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as scipy_stats

from opsft.claims.coverage import (
    Components,
    audit,
    audited_rules,
    clipped_normal_mean,
    is_accuracy_claim,
    least_covered,
    pass_fail_cells,
    simulated_coverage,
    variance_components,
)
from opsft.claims.evaluate import per_problem, per_seed, problem_statistic
from opsft.claims.registry import Claim, get, gt, guarded, moved, within
from opsft.claims.storage import save_run


def test_variance_components_closed_form():
    # grand mean 2, row means 1 and 3, column means 1.5 and 2.5, residuals +-0.5: MS_residual = 1 / 1,
    # MS_seed = 2 s2(1, 3) = 4, MS_problem = 2 s2(1.5, 2.5) = 1
    assert variance_components(np.array([[0.0, 2.0], [3.0, 3.0]])) == pytest.approx((1.5, 0.0, 1.0), abs=1e-12)
    # an additive array has no interaction: the components are the effects' sample variances
    seeds, problems = np.array([0.0, 1.0, 5.0]), np.array([2.0, -1.0, 0.0, 7.0])
    additive = variance_components(np.add.outer(seeds, problems))
    assert additive == pytest.approx((seeds.var(ddof=1), problems.var(ddof=1), 0.0), abs=1e-12)
    # rows and columns equal on average: MS_seed = MS_problem = 0 < MS_residual = 1, both truncated at 0
    assert variance_components(np.array([[0.0, 1.0], [1.0, 0.0]])) == (0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="at least 2 x 2"):
        variance_components(np.zeros((1, 5)))


def test_variance_components_recover_a_large_simulated_array():
    rng = np.random.default_rng(7)
    n, m = 400, 500
    d = 3.0 + rng.normal(0, 4, (n, 1)) + rng.normal(0, 20, (1, m)) + rng.normal(0, 40, (n, m))
    estimated = variance_components(d)
    # sampling sd of each estimate: about 16 sqrt(2 / 399) + 1600 / 500 (seed), 400 sqrt(2 / 499), 1600 / 316
    assert estimated.seed == pytest.approx(16.0, rel=0.3)
    assert estimated.problem == pytest.approx(400.0, rel=0.15)
    assert estimated.interaction == pytest.approx(1600.0, rel=0.02)


@pytest.mark.parametrize(("mean", "sd", "low"), [(5.0, 30.0, -100.0), (80.0, 45.0, 0.0), (-10.0, 2.0, 0.0)])
def test_clipped_normal_mean_matches_numerical_integration(mean, sd, low):
    density = scipy_stats.norm(mean, sd).pdf
    numeric = integrate.quad(lambda x: min(max(x, low), 100.0) * density(x), mean - 12 * sd, mean + 12 * sd,
                             points=[low, 100.0], limit=200)[0]
    assert clipped_normal_mean(mean, sd, low, 100.0) == pytest.approx(numeric, abs=1e-6)
    assert clipped_normal_mean(mean, 0.0, low, 100.0) == min(max(mean, low), 100.0)


def test_pass_fail_cells_have_the_components_asked_for():
    rng = np.random.default_rng(3)
    components = Components(seed=16.0, problem=400.0, interaction=2000.0)
    cells = pass_fail_cells(components, 5.0, (1, 300, 400), rng, accuracy=False)[0]
    assert set(np.unique(cells)) <= {-100.0, 0.0, 100.0}
    # the grand mean's sd: sqrt(400 / 400 + 16 / 300 + 2000 / 120000), about 1.03 points
    assert cells.mean() == pytest.approx(clipped_normal_mean(5.0, math.sqrt(416.0), -100.0, 100.0), abs=3.5)
    estimated = variance_components(cells)
    assert estimated.seed == pytest.approx(16.0, rel=0.35)
    assert estimated.problem == pytest.approx(400.0, rel=0.2)
    assert estimated.interaction == pytest.approx(2000.0, rel=0.05)
    accuracy = pass_fail_cells(Components(0.0, 900.0, 0.0), 40.0, (2, 3, 50), rng, accuracy=True)
    assert accuracy.shape == (2, 3, 50) and set(np.unique(accuracy)) <= {0.0, 100.0}


def test_simulated_coverage_is_reproducible_0_1_hits_near_95_percent():
    components = Components(seed=13.7, problem=900.0, interaction=1600.0)
    hits = simulated_coverage(components, 2.0, 3, 200, 300, np.random.default_rng(0))
    again = simulated_coverage(components, 2.0, 3, 200, 300, np.random.default_rng(0))
    assert hits.shape == (300,) and set(np.unique(hits)) <= {0, 1} and np.array_equal(hits, again)
    print(f"simulated coverage at seed, problem, interaction sd 3.7, 30, 40 points, 3 x 200: {hits.mean():.1%}")
    assert hits.mean() >= 0.93
    # constant cells (every component 0) are covered by any interval
    assert simulated_coverage(Components(0.0, 0.0, 0.0), 0.0, 2, 16, 20, np.random.default_rng(0), True).all()


def test_least_covered_picks_on_one_half_and_measures_on_the_other():
    hits = np.array([[1, 1, 1, 1, 0, 0, 1, 1], [1, 0, 1, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 0, 0, 0]])
    assert least_covered(hits) == 100.0  # rule 1 is the first with the fewest hits in the first half
    assert least_covered(np.zeros((2, 10), dtype=np.int8)) == 0.0


def test_least_covered_is_unbiased_where_the_plain_minimum_is_low():
    # 40 rules that all cover 95%, 200 trials each, 300 replicates: the least of 40 estimates of sd 1.5 points is
    # about 91.5%; the picked rule's measurement has sd 2.2 / sqrt(300) = 0.13 points
    hits = np.random.default_rng(11).random((300, 40, 200)) < 0.95
    picked = np.mean([least_covered(batch) for batch in hits])
    plain = np.mean(100 * hits.mean(axis=2).min(axis=1))
    assert picked == pytest.approx(95.0, abs=0.5) and plain < 92.0


def test_audited_rules_are_the_accuracy_rules_and_guards_each_once():
    guard = moved("a.in_domain", "base.in_domain", 2.0)
    claim = Claim("Z99", "z", "test", "z", "z", (guarded(within("a.in_domain", "b.in_domain", 2.0), guard),
                                                  guarded(within("a.angle", None, 1.0), guard), gt("a.angle")))
    assert audited_rules(claim) == (claim.rules[0], guard)
    assert is_accuracy_claim(get("C02")) and not is_accuracy_claim(get("C16")) and not is_accuracy_claim(get("X01"))


def _record(seeds, problems=True, shift=0.0):
    """A saved C02 record on 12 problems: an arm starting at ``k`` passes problem ``p`` of seed ``s`` when 3
    divides ``p + k`` (``opsft``'s start moves by ``shift`` per seed), problem ``s`` flipped so that every seed
    records differently; with or without per-problem scores."""
    rows = []
    for s in seeds:
        for arm, start in (("base", 0), ("sft", 1), ("grpo", 2), ("opsft", 3 + int(shift * s))):
            passed = ["1" if ((p + start) % 3 == 0) != (p == s) else "0" for p in range(12)]
            row = {"arm": arm, "seed": s, "values": {"in_domain": 100 * passed.count("1") / 12}}
            rows.append({**row, "problems": {"in_domain": "".join(passed)}} if problems else row)
    return {"verdict": "INCONCLUSIVE", "rows": rows, "seeds": list(seeds), "measured": {}}


def test_audit_measures_each_accuracy_rule_of_the_newest_record(tmp_path):
    save_run(tmp_path, "a", {"scale": "ci", "claims": {"C02": _record([0]), "C14": _record([0, 1], problems=False)}})
    save_run(tmp_path, "b", {"scale": "full", "claims": {"C14": _record([0, 1, 2])}})
    save_run(tmp_path, "c", {"scale": "ci", "claims": {"C02": _record([0, 1, 2], shift=1.0)}})
    claims = {c.claim_id: c for c in audit(tmp_path, "ci")}
    assert sorted(claims) == ["C02", "C14"] and claims["C02"].seeds == 3 and claims["C14"].seeds == 2
    record = _record([0, 1, 2], shift=1.0)
    table, problems = per_seed(record["rows"]), per_problem(record["rows"])
    for rule, measured in zip(audited_rules(get("C02")), claims["C02"].rules, strict=True):
        d = problem_statistic(rule, table, problems)
        assert measured.rule == str(rule) and (measured.seeds, measured.problems) == (3, 12)
        assert measured.components == variance_components(d) and measured.mean == pytest.approx(d.mean())
    # C14's opsft - sft has no per-problem scores; its rules on `opd` were not measured at all
    reasons = {r.rule: r.reason for r in claims["C14"].rules}
    assert reasons.pop("opsft.in_domain - sft.in_domain > 0") == "no per-problem scores"
    assert set(reasons.values()) <= {"no per-problem scores", "no seed measured it"} and reasons
    assert not claims["C14"].rules[0].hits(5, np.random.default_rng(0)).any()
    assert audit(tmp_path, "smoke") == []


def test_audit_counts_identical_seeds_once(tmp_path):
    # both seeds record the same scores for every arm: one distinct seed, no valid interval
    record = _record([1])
    record["rows"], record["seeds"] = [{**row, "seed": s} for s in (0, 1) for row in record["rows"]], [0, 1]
    save_run(tmp_path, "a", {"scale": "ci", "claims": {"C02": record}})
    (claim,) = audit(tmp_path, "ci")
    first = claim.rules[0]
    assert first.seeds == 1 and first.components is None and first.reason == "1 distinct seed(s) x 12 problem(s)"
