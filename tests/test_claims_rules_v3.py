"""Rules version 3 on closed cases: movement guards, identical seeds counted once, the binomial floor, no
accuracy decided without its per-problem scores, floored log-ratios (``opsft.claims.registry``,
``opsft.claims.evaluate``, ``opsft.claims.stats``)."""

import math

import numpy as np
import pytest

from opsft.claims.evaluate import decide_v3, evaluate, per_problem, per_seed, per_weights
from opsft.claims.registry import (
    CLAIMS,
    RULE_VERSIONS,
    Claim,
    gt,
    guarded,
    log_exceeds,
    moved,
    within,
)
from opsft.claims.scored import encode
from opsft.claims.stats import Estimate, Verdict, floored_interval, problem_floor, verdict_of

REP, NOT, INC, UND = Verdict.REPRODUCED, Verdict.NOT_REPRODUCED, Verdict.INCONCLUSIVE, Verdict.UNDEFINED
PROBLEMS = 200


def scores(right: int, shift: int = 0) -> str:
    """Encoded pass/fail scores on ``PROBLEMS`` problems: right on ``right`` of them, starting at ``shift``."""
    flags = [100.0 if shift <= p < shift + right else 0.0 for p in range(PROBLEMS)]
    return encode(flags)


def row(arm: str, seed: int, right: int, shift: int = 0) -> dict:
    """A recorded accuracy row with its per-problem scores."""
    return {"arm": arm, "seed": seed, "values": {"in_domain": 100 * right / PROBLEMS},
            "problems": {"in_domain": scores(right, shift)}}


def tables(rows):
    return per_seed(rows), per_problem(rows), per_weights(rows)


CLOSE = guarded(within("a.in_domain", "b.in_domain", 3.0), moved("a.in_domain", "base.in_domain", 3.0),
                moved("b.in_domain", "base.in_domain", 3.0))


def close_rows(start: int) -> list[dict]:
    """Arms a and b right on the same problems (so within each other), the base right on ``start`` problems; the
    seeds differ by one problem each."""
    return [r for s in range(3) for r in (row("a", s, 100 + s), row("b", s, 100 + s), row("base", s, start))]


def test_an_equivalence_whose_arms_moved_is_reproduced():
    result = decide_v3(CLOSE, *tables(close_rows(start=40)))
    assert result.verdict is REP and [g.verdict for g in result.guards] == [REP, REP]


def test_an_equivalence_of_arms_that_did_not_move_is_undefined_not_reproduced():
    result = decide_v3(CLOSE, *tables(close_rows(start=101)))  # the base already where the arms end
    assert result.verdict is UND and result.note.startswith("nothing moved: |a.in_domain - base.in_domain| > 3")


def test_an_equivalence_whose_movement_is_not_established_is_inconclusive():
    result = decide_v3(CLOSE, *tables(close_rows(start=92)))  # moved 4-5 points: the guard's interval straddles 3
    assert result.verdict is INC and result.note.startswith("movement not established")


def test_a_failed_equivalence_stays_failed_whatever_its_guards():
    rows = [r for s in range(3) for r in (row("a", s, 150 + s), row("b", s, 100 + s), row("base", s, 100))]
    assert decide_v3(CLOSE, *tables(rows)).verdict is NOT


def test_an_accuracy_without_per_problem_scores_is_inconclusive():
    rows = [{"arm": arm, "seed": s, "values": {"in_domain": value + s}}
            for s in range(5) for arm, value in (("a", 60.0), ("b", 40.0))]
    result = decide_v3(gt("a.in_domain", "b.in_domain"), *tables(rows))
    assert result.verdict is INC and "per-problem scores" in result.note
    assert result.estimate.low > 0  # the seeds alone would have said REPRODUCED


def test_identical_seeds_count_once():
    rows = [{"arm": "grpo", "seed": s, "values": {"angle": 0.5}} for s in range(3)]
    rows += [{"arm": "opd", "seed": s, "values": {"angle": 1.0 + s / 10}} for s in range(3)]
    result = decide_v3(gt("opd.angle", "grpo.angle"), *tables(rows))
    assert result.verdict is INC and result.estimate.n == 1 and "count once" in result.note
    # the base is the same model for every seed by design: it is not merged
    rows = [{"arm": "base", "seed": s, "values": {"angle": 0.5}} for s in range(3)] + rows[3:]
    assert decide_v3(gt("opd.angle", "base.angle"), *tables(rows)).verdict is REP


def test_all_zero_two_seeds_by_16_problems_is_inconclusive_under_v3():
    """paper-tiny C02: every arm scored 0 of 16 problems on 2 seeds; version 2 decided both rules on [0, 0]."""
    rows = [{"arm": arm, "seed": s, "values": {"in_domain": 0.0}, "problems": {"in_domain": "0" * 16}}
            for s in range(2) for arm in ("base", "sft", "grpo", "opsft")]
    result = evaluate(CLAIMS["C02"], rows)
    assert [r.verdict for r in result.versions[2][1]] == [NOT, REP]
    assert result.verdict is INC and [r.verdict for r in result.rules] == [INC, INC]


def test_floor_of_the_all_zero_case_in_closed_form():
    d = np.zeros((2, 16))
    # a paired difference: Agresti-Min, half a discordant pair each way: var = 1 / (N + 2) over N = 32 cells
    assert problem_floor(d, paired=True) == pytest.approx(1e4 / 34 / 32)
    assert problem_floor(d, seeds=1, paired=True) == pytest.approx(1e4 / 18 / 16)
    # one accuracy: plus-four, p = (x + 2) / (N + 4)
    assert problem_floor(d) == pytest.approx(1e4 * (2 / 36) * (34 / 36) / 32)
    single = d.copy()
    single[0, 0] = 100.0
    assert problem_floor(single) == pytest.approx(1e4 * (3 / 36) * (33 / 36) / 32)
    # a signed combination beyond [-100, 100] (2 mid - early - late) scales the bound by its largest |D| / 100
    combo = d.copy()
    combo[0, 0] = 200.0
    assert problem_floor(combo) == pytest.approx(1e4 * (2 * (2 + 1) / 34 - (2 / 34) ** 2) / 32)
    estimate = floored_interval(d, paired=True)
    assert estimate.low < 0 < estimate.high and estimate.high - estimate.low > 5  # points, not [0, 0]
    assert verdict_of(gt("a.x", "b.x"), estimate) is INC and verdict_of(within("a.x", "b.x", 3.0), estimate) is INC


def test_identical_rows_with_one_effective_seed_have_no_interval():
    estimate = floored_interval(np.tile(np.array([[100.0, 0.0, 100.0, 0.0]]), (2, 1)), seeds=1)
    assert math.isnan(estimate.low) and estimate.n == 1
    assert verdict_of(gt("a.x"), estimate) is INC


def test_a_floored_log_ratio_stays_finite_near_zero():
    rule = log_exceeds("sft.nss", "grpo.nss", 0.1, 1e-5)
    assert rule.value(1e-3, 0.0) == pytest.approx(math.log((1e-3 + 1e-5) / 1e-5))
    assert rule.boundary == pytest.approx(math.log(1.1))
    assert str(rule) == "log((sft.nss + 1e-05) / (grpo.nss + 1e-05)) > 0.0953102"
    with pytest.raises(ValueError, match="floor > 0"):
        log_exceeds("a.x", "b.x", 0.1, 0.0)


@pytest.mark.parametrize("low, high, expected", [(3.5, 5.0, REP), (-5.0, -3.5, REP), (-1.0, 2.0, NOT),
                                                  (2.0, 4.0, INC)])
def test_beyond_is_a_move_of_either_sign(low, high, expected):
    assert verdict_of(moved("a.x", "b.x", 3.0), Estimate((low + high) / 2, low, high, 3)) is expected


def test_every_v3_equivalence_rule_is_guarded():
    for claim in CLAIMS.values():
        for rule in claim.rules_for(3):
            if rule.op == "within":
                assert rule.guards, f"{claim.id}: `{rule}` has no movement guard"
    assert RULE_VERSIONS[-1] == 3


def test_guard_keys_are_checked_like_rule_keys():
    from opsft.claims import registry

    typo = Claim("T05", "typo", "Toy", "A near B", "accuracy (%)", (within("a.in_domain", "b.in_domain", 2.0),))
    registry.V3_RULES["T05"] = (guarded(within("a.in_domain", "b.in_domain", 2.0), moved("a.in_domain", "bse.in_domain", 2.0)),)
    try:
        with pytest.raises(ValueError, match="reads 'bse.in_domain'"):
            typo.check_keys()
    finally:
        del registry.V3_RULES["T05"]


def test_seeds_are_told_apart_by_their_weights_where_rows_carry_them():
    """A quantity every seed measures exactly (X04's sign agreement of 1.0) on distinct weights is decided; the
    same on one set of weights is one seed."""
    def rows(fingerprints):
        return [{"arm": "streamed", "seed": s, "values": {"sign_agreement": 1.0}, "weights": w}
                for s, w in enumerate(fingerprints)]

    rule = gt("streamed.sign_agreement", boundary=0.999)
    assert decide_v3(rule, *tables(rows(["a1", "b2", "c3"]))).verdict is REP
    same = decide_v3(rule, *tables(rows(["a1", "a1", "a1"])))
    assert same.verdict is INC and "1 distinct weights" in same.note
    # runs saved before rules v3 carry no weights: identical values stand in for identical weights
    old = [{k: v for k, v in r.items() if k != "weights"} for r in rows(["a1", "b2", "c3"])]
    assert decide_v3(rule, *tables(old)).verdict is INC


def test_c19_asks_that_sft_learns_in_the_window_not_only_that_it_moved():
    """SFT 20 points below its start and 10 above its projected arm: "degrades SFT" says nothing of a window that
    taught SFT nothing, so the rule is UNDEFINED, not REPRODUCED."""
    rule = CLAIMS["C19"].rules_for(3)[1]
    rows = [r for s in range(3) for r in (row("sft_start", s, 100 + s), row("sft", s, 60 + s), row("sft_projk", s, 40 + s))]
    result = decide_v3(rule, *tables(rows))
    assert result.verdict is UND and "sft.in_domain - sft_start.in_domain > 2" in result.note


def test_a_rule_that_a_diverged_run_kept_from_a_seed_is_undefined_naming_the_arm_seed_and_step():
    """Seed 2's test measured c and the base, then stopped at a diverged run (a divergence row, as
    ``ClaimRecorder.diverged`` writes it): the rule reading a is UNDEFINED under every version, its guard too; the
    rule of c against the base, measured on every seed, is decided as usual."""
    claim = Claim("T06", "toy", "toy", "a beats b; c beats the base", "accuracy (%)",
                  (guarded(gt("a.in_domain", "b.in_domain"), moved("a.in_domain", "base.in_domain", 3.0)),
                   gt("c.in_domain", "base.in_domain")))
    rows = [r for s in range(3) for r in (row("c", s, 150 + s), row("base", s, 40))]
    rows += [r for s in range(2) for r in (row("a", s, 120 + s), row("b", s, 60 + s))]
    rows.append({"arm": "a", "seed": 2, "values": {}, "diverged": {"step": 37, "digest": "d" * 16, "error": "nan"}})
    result = evaluate(claim, rows)
    for version, (verdict, (a_rule, _)) in result.versions.items():
        assert verdict is UND and a_rule.verdict is UND and a_rule.note == "a seed 2 diverged at step 37", version
    a_rule, c_rule = result.rules
    assert a_rule.estimate is None and [g.verdict for g in a_rule.guards] == [UND]
    assert c_rule.verdict is REP and c_rule.estimate.n == 3
    assert result.measured["a.in_domain"].n == 2  # the seeds measured before the divergence
