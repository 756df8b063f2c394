"""C17 (GEO section 4.1, Fig 4): "The stable rank of the cumulative update tells the methods apart: OPD's
stays in a narrow band, SFT's expands and RLVR's contracts over training, while OPD's Frobenius norm sits well
above RLVR's; the Hill tail index moves mildly for OPD, rises sharply for SFT and falls for RLVR."

The checkpoints are the calibration runs' own snapshots (step 0, its snapshot steps, the final step) of the
cached GRPO, OPD and SFT runs; each statistic is the mean over layer matrices of the cumulative update
W_t - W_0, and a change is log(last / first) over the checkpoints after step 0. The verdict is decided over
seeds by the rules registered for C17.
"""

import math

import pytest

from opsft.claims.arms import baseline
from opsft.claims.measure import low_dim_band
from opsft.claims.movement import record_in_domain
from opsft.runs import base_model, run_tokenizer


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT, OPD and GRPO runs, named by their method."""
    return {method: baseline(method, scale, seed) for method in ("sft", "opd", "grpo")}


@pytest.mark.claim("C17")
def test_claim_low_dim_band(claim, seed):
    """log(last / first) stable rank: OPD within 0.25 of 0, SFT > 0, GRPO < 0; final Frobenius norm
    OPD > GRPO; log(last / first) Hill index: SFT > 0, GRPO < 0. OPD's and the base's held-out accuracy stand
    beside: "a narrow band" says something only of an OPD run that moved (the rules-v3 guard)."""
    configs = arms(claim.scale_name, claim.scale, seed)
    record_in_domain(claim, seed, {"base": base_model(configs["opd"]), "opd": claim.run(configs["opd"]).load_model()},
                     run_tokenizer(configs["opd"]))
    for method, cfg in configs.items():
        result = claim.run(cfg)
        measured = claim.record(method, seed, **low_dim_band(result))
        for name in ("stable_rank_first", "stable_rank_last"):
            assert math.isnan(measured[name]) or measured[name] >= 1 - 1e-9, f"{method}: {name} below 1"
        assert math.isnan(measured["frobenius"]) or measured["frobenius"] > 0, f"{method}: no update"
