"""X01 (our own): "every accuracy claim over at least 3 seeds with 95% intervals and an effect size; the papers
report none" (OPSFT: "AIME has thirty questions, and the tables do not report error bars").

An audit of the claims runs saved in ``--claims-storage`` at this scale (``opsft.claims.coverage``): for each
accuracy claim, its newest saved record. ``suite.min_seeds`` is the fewest seeds any of them ran;
``suite.rules_with_interval`` the share of their current rules with an interval over at least two seeds,
``suite.median_half_width`` the median half-width (points) of those intervals (version 2 decides that the
suite resolves its accuracy rules to 5 points), and ``suite.rules_with_effect_size`` the share with a finite
effect size (Cohen's d_z of the rule's per-seed statistic against its boundary), listed per claim as
``cNN.effect_size_K`` for its K-th rule.

The audit reads what was saved before this session: run it after the claims it audits were saved
(``--claims-save``). It is a property of the whole run, recorded once per seed of the scale so that the
registered rule sees as many values as every other claim's.
"""

import math
import statistics

import pytest

from opsft.claims.coverage import audit
from opsft.claims.plugin import claims_storage


def arms(scale_name, scale, seed):
    """No runs: the audit reads saved claim records and trains or loads nothing."""
    return {}


@pytest.mark.claim("X01")
def test_claim_seeds_and_intervals(claim, seed, pytestconfig):
    """The fewest seeds of any saved accuracy claim is at least 3 (registered: > 2.5)."""
    storage = claims_storage(pytestconfig)
    coverage = audit(storage, claim.scale_name)
    if not coverage:
        pytest.skip(f"no accuracy claim saved at scale {claim.scale_name!r} in {storage}; save claim runs first")
    rules = [r for c in coverage for r in c.rules]
    widths = [r.estimate.half_width for r in rules if r.estimate is not None and math.isfinite(r.estimate.half_width)]
    for c in coverage:
        claim.record(c.claim_id.lower(), seed, seeds=c.seeds,
                     **{f"effect_size_{k}": r.effect_size for k, r in enumerate(c.rules, start=1)})
    measured = claim.record(
        "suite", seed, min_seeds=min(c.seeds for c in coverage), accuracy_claims=len(coverage),
        rules_with_interval=sum(r.estimate is not None and r.estimate.n >= 2 for r in rules) / len(rules),
        median_half_width=statistics.median(widths) if widths else math.nan,
        rules_with_effect_size=sum(math.isfinite(r.effect_size) for r in rules) / len(rules))
    assert measured["min_seeds"] >= 1
