"""X01 (our own): "every accuracy claim over at least 3 seeds with 95% intervals and an effect size; the papers
report none" (OPSFT: "AIME has thirty questions, and the tables do not report error bars").

A check that can fail: do the intervals cover? An audit of the claims runs saved in ``--claims-storage`` at
this scale (``opsft.claims.coverage``): for each accuracy claim's newest saved record, every current rule (or
guard) on an accuracy gets the variance components (seed, problem, interaction) its per-problem scores measured,
and version 3's interval is simulated at them, at the rule's own effective seed and problem counts. A rule
without per-problem scores, or with fewer than 2 distinct seeds, has no valid interval: coverage 0.

Each seed of the scale is an independent Monte Carlo replicate: the ``seed`` value seeds the simulation, which
draws ``TRIALS`` experiments per rule; half of them pick each claim's least-covered rule, the other half measure
it (``coverage.least_covered``). Recorded per seed: ``cNN.coverage_min`` (%), the least coverage among claim
``NN``'s audited rules, ``cNN.seeds`` its seed count and ``cNN.rules_without_interval``; ``suite.min_coverage``
(%), the least over every audited rule (registered, version 3: > 93), ``suite.min_seeds``,
``suite.accuracy_claims``, ``suite.rules_audited`` and ``suite.rules_without_interval``.

The audit reads what was saved before this session: run it after the claims it audits were saved
(``--claims-save``).
"""

import numpy as np
import pytest

from opsft.claims.coverage import audit, least_covered
from opsft.claims.plugin import claims_storage

TRIALS = 200  # simulated experiments per audited rule and seed: 100 pick, 100 measure


def arms(scale_name, scale, seed):
    """No runs: the audit reads saved claim records and trains or loads nothing."""
    return {}


@pytest.mark.claim("X01")
def test_claim_seeds_and_intervals(claim, seed, pytestconfig):
    """The simulated coverage of the least-covered accuracy rule (registered v3: > 93%)."""
    storage = claims_storage(pytestconfig)
    claims = audit(storage, claim.scale_name)
    if not claims:
        pytest.skip(f"no accuracy claim saved at scale {claim.scale_name!r} in {storage}; save claim runs first")
    rng = np.random.default_rng(seed)
    hits = {c.claim_id: np.stack([r.hits(TRIALS, rng) for r in c.rules]) for c in claims}
    least = {}
    for c in claims:
        without = [r for r in c.rules if r.components is None]
        for r in without:
            print(f"{c.claim_id} `{r.rule}`: no valid interval ({r.reason}), coverage 0")
        least[c.claim_id] = claim.record(c.claim_id.lower(), seed, coverage_min=least_covered(hits[c.claim_id]),
                                         seeds=c.seeds, rules_without_interval=len(without))["coverage_min"]
    rules = [r for c in claims for r in c.rules]
    measured = claim.record("suite", seed, min_coverage=least_covered(np.concatenate(list(hits.values()))),
                            min_seeds=min(c.seeds for c in claims), accuracy_claims=len(claims),
                            rules_audited=len(rules), rules_without_interval=sum(r.components is None for r in rules))
    # the suite's least-covered rule is the least-covered rule of its claim
    assert measured["min_coverage"] in least.values() and 0 <= measured["min_coverage"] <= 100
