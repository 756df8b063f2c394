"""C01 (OPSFT Fig 2): "SFT's interval updates stay positively correlated from one training stage to the
next, while GRPO's and OPD's are nearly orthogonal; cumulatively, SFT's early update already points along
its final direction (cosine near 1.0), the on-policy runs' only about halfway (near 0.5)."

The stages are the calibration runs' own snapshots (step 0, its snapshot steps, the final step) of the cached
GRPO, OPD and SFT runs; cosines are global over all parameters (per-matrix means recorded beside them). The
verdict is decided over seeds by the rules registered for C01.
"""

import math

import pytest

from opsft.claims.arms import baseline
from opsft.claims.measure import direction_consistency
from opsft.claims.movement import record_in_domain
from opsft.runs import base_model, run_tokenizer


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT, OPD and GRPO runs."""
    return {method: baseline(method, scale, seed) for method in ("sft", "opd", "grpo")}


@pytest.mark.claim("C01")
def test_claim_direction_consistency(claim, seed):
    """Consecutive interval cosine: SFT > 0.2, GRPO and OPD within 0.1 of 0; cosine of the first cumulative
    update with the final one: SFT above GRPO and above OPD. Each arm's and the base's held-out accuracy stand
    beside: "nearly orthogonal" says something only of an arm that moved (the rules-v3 guards)."""
    configs = arms(claim.scale_name, claim.scale, seed)
    results = {method: claim.run(cfg) for method, cfg in configs.items()}
    record_in_domain(claim, seed, {"base": base_model(configs["sft"]), **{m: r.load_model() for m, r in results.items()}},
                     run_tokenizer(configs["sft"]))
    for method, result in results.items():
        measured = claim.record(method, seed, **direction_consistency(result))
        for name, value in measured.items():
            assert math.isnan(value) or -1 - 1e-9 <= value <= 1 + 1e-9, f"{method}: {name} = {value} is no cosine"
