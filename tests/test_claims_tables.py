"""Pure functions of opsft.claims: bootstrap and verdicts on closed cases, evaluation of recorded rows,
comparison thresholds, and the markdown tables against hand-written golden strings."""

import math

import pytest

from opsft.claims.compare import compare, parse_threshold
from opsft.claims.evaluate import ClaimResult, RuleResult, evaluate
from opsft.claims.registry import CLAIMS, RULE_VERSIONS, V2_RULES, Claim, Rule, gt, lt, order, within
from opsft.claims.scored import Accuracy, decode, encode
from opsft.claims.stats import (
    BOOTSTRAP_LABEL,
    DISTINCT_SEED_LABEL,
    FLOORED_LABEL,
    SEED_T_LABEL,
    T_LABEL,
    Estimate,
    Verdict,
    bootstrap_mean,
    combine,
    decide,
)
from opsft.claims.tables import PageContext, SummaryEntry, claim_table, summary_table
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
    assert combine([REP, Verdict.UNDEFINED, INC]) is Verdict.UNDEFINED
    assert combine([REP, Verdict.UNDEFINED, NOT]) is NOT  # a NaN never hides a failure
    assert combine([NOT, Verdict.ERROR]) is Verdict.ERROR
    assert str(Rule("a.x", ">", 0.1, "b.x", relative=True)) == "(a.x - b.x) / |b.x| > 0.1"
    assert Rule("a.x", ">", 0.1, "b.x", relative=True).value(3.0, -2.0) == 2.5
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
    rows += [{"arm": "b", "seed": s, "values": {"acc": 40.0 - s / 4}} for s in (0, 1, 2)]
    result = evaluate(TOY, rows)
    assert result.verdict is REP and result.versions[1][0] is REP and result.versions[2][0] is REP
    assert result.rules[0].estimate.mean == pytest.approx(11.25)
    assert result.versions[2][1][0].estimate.method == SEED_T_LABEL  # no per-problem scores recorded
    assert result.rules[0].estimate.method == DISTINCT_SEED_LABEL
    assert result.measured["a.acc"].n == 3
    assert evaluate(TOY, rows[:3]).versions[2][1][0] == RuleResult(TOY.rules[0], INC, None)  # b never measured
    assert evaluate(TOY, rows[:3]).rules[0].verdict is INC
    with pytest.raises(ValueError, match="a.acc recorded twice for seed 0"):
        evaluate(TOY, rows + rows[:1])


def test_evaluate_pairs_arms_problem_by_problem_when_scores_are_recorded():
    # a: right on problems 0-2 of 4, b: right on problem 0 only, every seed: the difference is 50 points on each
    # seed; per problem it is 0, 100, 100, 0 -> v_seed = 0, v_problem = s2(0, 100, 100, 0) / 4 = 3333.3 / 4
    rows = [{"arm": "a", "seed": s, "values": {"acc": 75.0}, "problems": {"acc": encode([100, 100, 100, 0])}}
            for s in (0, 1, 2)]
    rows += [{"arm": "b", "seed": s, "values": {"acc": 25.0}, "problems": {"acc": encode([100, 0, 0, 0])}}
             for s in (0, 1, 2)]
    result = evaluate(TOY, rows)
    estimate = result.versions[2][1][0].estimate
    assert (estimate.mean, estimate.n, estimate.problems, estimate.method) == (50.0, 3, 4, T_LABEL)
    t3 = 3.182446305284263  # t(0.975, 3), the problems' term alone
    assert estimate.high - 50.0 == pytest.approx(t3 * math.sqrt(10000 / 3 / 4), rel=1e-9)
    assert result.versions[2][0] is INC  # 4 problems cannot tell 50 points from 0
    assert result.versions[1][0] is REP  # version 1 saw three identical seeds
    assert result.verdict is INC and "count once" in result.rules[0].note  # version 3: one distinct seed


def test_every_rule_reads_a_key_its_claim_records():
    for claim in CLAIMS.values():
        claim.check_keys()
    typo = Claim("T04", "typo", "Toy", "A beats B", "accuracy (%)", (gt("a.acc", "b.acc"),))
    V2_RULES["T04"] = (gt("a.ac", "b.acc"),)
    try:
        with pytest.raises(ValueError, match="claim T04: rule v2 `a.ac - b.acc > 0` reads 'a.ac'"):
            typo.check_keys()
    finally:
        del V2_RULES["T04"]


def test_encoded_scores_round_trip_and_reject_garbage():
    assert encode([0.0, 100.0, 100.0]) == "011"
    assert encode([50.0, 0.0]) == [50.0, 0.0]
    assert decode("011").tolist() == [0.0, 100.0, 100.0]
    with pytest.raises(ValueError, match="other than 0 and 1"):
        decode("01x")
    assert float(Accuracy(50.0, [100.0, 0.0])) == 50.0 and Accuracy(50.0, [100.0, 0.0]).per_problem == (100.0, 0.0)
    with pytest.raises(ValueError, match="not the mean"):
        Accuracy(40.0, [100.0, 0.0])


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


def toy_result(verdict: Verdict, estimate: Estimate | None, claim: Claim = TOY) -> ClaimResult:
    """A result with the same rule results under every rule version."""
    rules = tuple(RuleResult(rule, verdict, estimate) for rule in claim.rules)
    return ClaimResult(claim, {v: (verdict, rules) for v in RULE_VERSIONS},
                       {"a.acc": Estimate(52.25, 50.0, 54.5, 3, 200, T_LABEL),
                        "c.acc": Estimate(0.000012345, math.nan, math.nan, 1, 0, SEED_T_LABEL)})


CONTEXT = PageContext("smoke", "0001_x", {"commit": "abc123", "dirty": False, "utc": "2026-12-06T01:00:00+00:00"},
                      (0, 1), {"in_domain": {"family": "arith", "split": "test", "seed": 1, "n": 200}},
                      ({"digest": "d1", "objective": "sft", "constraint": "none", "organism": "nano", "steps": 4,
                        "seed": 0},))


def test_claim_table_golden():
    text = claim_table(toy_result(REP, Estimate(2.5, 1.0, 4.0, 3, 200, T_LABEL)), CONTEXT)
    assert text == f"""\
# T01 toy: **REPRODUCED**

> A beats B

Source: Toy Table 1; paper numbers: toy model; claim T01 of the claims list, [CLAIMS.md](../../../docs/CLAIMS.md). \
Metric: accuracy (%). Verdicts: rules v1: REPRODUCED, rules v2: REPRODUCED, rules v3: REPRODUCED. Generated by the \
claims plugin; do not edit.

- commit `abc123` (clean tree), run `0001_x`, scale `smoke`, 2026-12-06T01:00:00+00:00
- seeds: 0, 1
- test draw (every arm scored on the same problems): in_domain: arith test seed 1, 200 problems
- runs `sft/none nano 4 steps`: d1 (seed 0)

Intervals: v1 rules, {BOOTSTRAP_LABEL}; v2 rules, {T_LABEL} where the arms' per-problem scores pair them \
(n = seeds x problems), else {SEED_T_LABEL} (n = seeds); v3 rules and measured rows, {FLOORED_LABEL}, else \
{DISTINCT_SEED_LABEL} (n = distinct seeds). A v3 guard must hold for its rule to be REPRODUCED: that the arms it \
compares moved.

| quantity | paper | measured mean [interval] | n | verdict |
|---|---|---|---|---|
| v1 `a.acc - b.acc > 0` | 10 | 2.5 [1, 4] | 3 x 200 | REPRODUCED |
| v2 `a.acc - b.acc > 0` | 10 | 2.5 [1, 4] | 3 x 200 | REPRODUCED |
| v3 `a.acc - b.acc > 0` | 10 | 2.5 [1, 4] | 3 x 200 | REPRODUCED |
| a.acc | 50 | 52.25 [50, 54.5] | 3 x 200 | |
| c.acc | — | 1.234e-05 | 1 | |
"""


def test_a_tolerance_rule_shows_the_statistic_it_tests_and_escapes_its_pipes():
    close = Claim("T03", "close", "Toy", "A near B", "accuracy (%)", (within("a.acc", "b.acc", 3.0),))
    rows = claim_table(toy_result(NOT, Estimate(-23.67, -24.0, -23.0, 3), close), CONTEXT).splitlines()
    assert rows[-3] == ("| v3 `\\|a.acc - b.acc\\| <= 3` | — | \\|mean\\| 23.67, up to 24; signed -23.67 [-24, -23]"
                        " | 3 | NOT REPRODUCED |")
    empty = claim_table(toy_result(INC, None, close), CONTEXT).splitlines()
    assert empty[-3] == "| v3 `\\|a.acc - b.acc\\| <= 3` | — | — | 0 | INCONCLUSIVE |"


def test_summary_table_golden():
    # the current rule version, the one before it, and the verdict saved with the run (and its version)
    current, previous = RULE_VERSIONS[-1], RULE_VERSIONS[-2]
    other = Claim("T02", "other", "Toy Fig 2", "B is flat", "accuracy (%)", (Rule("b.acc", "within", 1.0),))
    verdicts = {v: "INCONCLUSIVE" for v in RULE_VERSIONS} | {current: "NOT REPRODUCED"}
    text = summary_table([TOY, other], {"T01": SummaryEntry(verdicts, "REPRODUCED", 1, "ci", "0003_nightly",
                                                            "0123456789abcdef")})
    assert text == f"""\
| id | claim | source | verdict (rules v{current}) | rules v{previous} | saved verdict | scale | run | commit |
|---|---|---|---|---|---|---|---|---|
| T01 | [toy](claims/T01_toy.md) | Toy Table 1 | NOT REPRODUCED | INCONCLUSIVE | REPRODUCED (v1) | ci | 0003_nightly | \
01234567 |
| T02 | other | Toy Fig 2 | not run | | | | | |
"""


def test_claim_figure_has_a_panel_per_metric_and_survives_nan(tmp_path):
    measured = {"sft.in_domain": Estimate(20.0, 18.0, 22.0, 3), "opsft.in_domain": Estimate(25.0, 24.0, 26.0, 3),
                "opsft.updated_pct": Estimate(math.nan, math.nan, math.nan, 3)}
    path = plot_claim(measured, {"opsft.in_domain": 41.67, "sft.in_domain": "13.2 h"}, "C02", tmp_path / "c.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
