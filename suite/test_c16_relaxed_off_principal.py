"""C16 (GEO section 3, Table 1): "SFT updates nearly every weight, RLVR few, and on-policy distillation sits
between them: the share of visibly updated weights, the rotation of the principal subspaces and the
normalized spectral shift all order SFT > OPD > RLVR, and RLVR's updates stay off the principal weights."

The three endpoints are the calibration's own GRPO, OPD and SFT runs (cached, shared with C02 and the
calibration table); the verdict is decided over seeds by the rules registered for C16.
"""

import pytest

from opsft.claims.arms import baseline
from opsft.claims.measure import endpoint_metrics


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT, OPD and GRPO runs, named by their method."""
    return {method: baseline(method, scale, seed) for method in ("sft", "opd", "grpo")}


@pytest.mark.claim("C16")
def test_claim_relaxed_off_principal(claim, seed):
    """Visible updates, principal angles and NSS order SFT > OPD > GRPO; GRPO overlaps the principal mask
    below random and the low-magnitude mask above random, with OPD between SFT and GRPO."""
    for method, cfg in arms(claim.scale_name, claim.scale, seed).items():
        result = claim.run(cfg)
        measured = claim.record(method, seed, **endpoint_metrics(result))
        assert 0 <= measured["updated_pct"] <= 100, f"{method}: updated share outside [0, 100]"
