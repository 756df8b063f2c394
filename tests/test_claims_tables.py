"""Pure functions of opsft.claims: bootstrap and verdicts on closed cases, evaluation of recorded rows,
comparison thresholds, and the markdown tables against hand-written golden strings."""

import math

import pytest

from opsft.claims.compare import compare, parse_threshold
from opsft.claims.evaluate import ClaimResult, RuleResult, evaluate
from opsft.claims.registry import CLAIMS, Claim, Rule, gt, lt, order, within
from opsft.claims.stats import Estimate, Verdict, bootstrap_mean, combine, decide
from opsft.claims.tables import SummaryEntry, claim_table, summary_table
from opsft.plots import plot_claim

REP, NOT, INC = Verdict.REPRODUCED, Verdict.NOT_REPRODUCED, Verdict.INCONCLUSIVE


def test_bootstrap_of_two_values_has_the_closed_form_interval():
    # resampled means of [0, 1] are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4: the 2.5/97.5 percentiles are 0 and 1
    assert bootstrap_mean([0.0, 1.0]) == Estimate(0.5, 0.0, 1.0, 2)
    assert bootstrap_mean([2.0, 2.0, 2.0]) == Estimate(2.0, 2.0, 2.0, 3)


def test_bootstrap_is_seeded_and_nan_propagates():
    values = [0.3, 1.7, 2.2, 5.0, -1.0]
    assert bootstrap_mean(values, seed=4) == bootstrap_mean(values, seed=4)
    assert bootstrap_mean(values, seed=4) != bootstrap_mean(values, seed=5)
    assert math.isnan(bootstrap_mean([1.0, math.nan]).mean)
    with pytest.raises(ValueError, match="at least one value"):
        bootstrap_mean([])


@pytest.mark.parametrize("rule, values, expected", [
    (gt("a.x"), [5, 6, 7], REP),
    (gt("a.x"), [-5, -6, -7], NOT),
    (gt("a.x"), [-1, 0, 1], INC),  # the interval straddles the boundary
    (gt("a.x", boundary=4.5), [5, 6, 7], REP),
    (gt("a.x"), [5, 6], INC),  # fewer than MIN_SEEDS seeds
    (gt("a.x"), [5, math.nan, 7], INC),  # an undefined value
    (lt("a.x"), [-3, -2, -4], REP),
    (lt("a.x"), [3, 2, 4], NOT),
    (within("a.x", None, 1.0), [0.1, -0.1, 0.2], REP),
    (within("a.x", None, 1.0), [5, 6, 7], NOT),
    (within("a.x", None, 1.0), [-6, -5, -7], NOT),
    (within("a.x", None, 1.0), [0.5, 1.5, 1.0], INC),
])
def test_decide_on_closed_cases(rule, values, expected):
    assert decide(rule, values)[0] is expected


def test_combine_and_rule_validation():
    assert combine([REP, REP]) is REP
    assert combine([REP, INC]) is INC
    assert combine([REP, INC, NOT]) is NOT
    assert str(within("a.x", "b.x", 2)) == "|a.x - b.x| <= 2"
    assert [str(r) for r in order("m", "s", "o", "g")] == ["s.m - o.m > 0", "o.m - g.m > 0"]
    with pytest.raises(ValueError, match="'arm.metric'"):
        gt("accuracy")
    with pytest.raises(ValueError, match="tolerance > 0"):
        within("a.x", None, 0)


def test_registry_holds_every_claim_of_claims_md_with_a_rule():
    expected = [f"C{i:02d}" for i in range(1, 21)] + [f"X{i:02d}" for i in range(1, 7)]
    assert list(CLAIMS) == expected
    assert CLAIMS["C16"].paper["sft.updated_pct"] == 91.9  # GEO Table 1: 8.1% unchanged
    assert CLAIMS["C02"].paper_value(CLAIMS["C02"].rules[0]) == pytest.approx(41.67 - 38.41)


TOY = Claim("T01", "toy", "Toy Table 1", "A beats B", "accuracy (%)", (gt("a.acc", "b.acc"),),
            {"a.acc": 50.0, "b.acc": 40.0}, "toy model")


def test_evaluate_pairs_arms_by_seed():
    rows = [{"arm": "a", "seed": s, "values": {"acc": 50 + s}} for s in (0, 1, 2)]
    rows += [{"arm": "b", "seed": s, "values": {"acc": 40.0}} for s in (0, 1, 2)]
    result = evaluate(TOY, rows)
    assert result.verdict is REP
    assert result.rules[0].estimate.mean == pytest.approx(11.0)
    assert result.measured["a.acc"].n == 3
    assert evaluate(TOY, rows[:3]).rules[0] == RuleResult(TOY.rules[0], INC, None)  # b never measured
    with pytest.raises(ValueError, match="a.acc recorded twice for seed 0"):
        evaluate(TOY, rows + rows[:1])


def test_compare_fails_two_sided_beyond_tolerance():
    base = {"C02": {"measured": {"opsft.in_domain": {"mean": 40.0}, "opsft.updated_pct": {"mean": 10.0}}}}
    now = {"C02": {"measured": {"opsft.in_domain": {"mean": 43.0}, "opsft.updated_pct": {"mean": 10.5}}}}
    changes = compare(now, base, [parse_threshold("in_domain:2"), parse_threshold("updated_pct:10%")])
    assert [(c.key, c.failed, c.direction) for c in changes] == [
        ("opsft.in_domain", True, "better"), ("opsft.updated_pct", False, "changed")]
    assert str(changes[0]) == "FAIL C02 opsft.in_domain: 40 -> 43 (+3, better)"
    worse = compare(base, now, [parse_threshold("in_domain:2")])[0]
    assert (worse.failed, worse.direction) == (True, "worse")
    with pytest.raises(ValueError, match="METRIC:TOLERANCE"):
        parse_threshold("in_domain")


def test_compare_calls_equal_means_and_nan_pairs_unchanged():
    run = {"C02": {"measured": {"opsft.in_domain": {"mean": 40.0}, "opsft.gap": {"mean": float("nan")}}}}
    changes = compare(run, run, [parse_threshold("in_domain:0")])
    assert [(c.key, c.failed, c.direction) for c in changes] == [
        ("opsft.gap", False, "unchanged"), ("opsft.in_domain", False, "unchanged")]


def test_claim_table_golden():
    result = ClaimResult(TOY, REP, (RuleResult(TOY.rules[0], REP, Estimate(2.5, 1.0, 4.0, 3)),),
                         {"a.acc": Estimate(52.25, 50.0, 54.5, 3), "b.acc": Estimate(49.75, 48.0, 51.0, 3),
                          "c.acc": Estimate(0.000012345, 0.000012345, 0.000012345, 1)})
    assert claim_table(result, "smoke", "0001_x") == """\
# T01 toy: **REPRODUCED**

> A beats B

Source: Toy Table 1; paper numbers: toy model. Metric: accuracy (%). Scale `smoke`, run `0001_x`. \
Generated by the claims plugin; do not edit.

| quantity | paper | measured mean [95% CI] | n | verdict |
|---|---|---|---|---|
| `a.acc - b.acc > 0` | 10 | 2.5 [1, 4] | 3 | REPRODUCED |
| a.acc | 50 | 52.25 [50, 54.5] | 3 | |
| b.acc | 40 | 49.75 [48, 51] | 3 | |
| c.acc | — | 1.234e-05 | 1 | |
"""


def test_a_tolerance_rule_escapes_its_pipes():
    close = Claim("T03", "close", "Toy", "A near B", "accuracy (%)", (within("a.acc", "b.acc", 2.0),))
    result = ClaimResult(close, INC, (RuleResult(close.rules[0], INC, None),), {})
    assert claim_table(result, "ci", "r").splitlines()[-1] == "| `\\|a.acc - b.acc\\| <= 2` | — | — | 0 | INCONCLUSIVE |"


def test_summary_table_golden():
    other = Claim("T02", "other", "Toy Fig 2", "B is flat", "accuracy (%)", (Rule("b.acc", "within", 1.0),))
    text = summary_table([TOY, other], {"T01": SummaryEntry("INCONCLUSIVE", "ci", "0003_nightly")})
    assert text == """\
| id | claim | source | verdict | scale | run |
|---|---|---|---|---|---|
| T01 | [toy](claims/T01_toy.md) | Toy Table 1 | INCONCLUSIVE | ci | 0003_nightly |
| T02 | other | Toy Fig 2 | not run | | |
"""


def test_claim_figure_has_a_panel_per_metric_and_survives_nan(tmp_path):
    measured = {"sft.in_domain": Estimate(20.0, 18.0, 22.0, 3), "opsft.in_domain": Estimate(25.0, 24.0, 26.0, 3),
                "opsft.updated_pct": Estimate(math.nan, math.nan, math.nan, 3)}
    path = plot_claim(measured, {"opsft.in_domain": 41.67, "sft.in_domain": "13.2 h"}, "C02", tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
