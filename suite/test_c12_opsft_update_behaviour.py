"""C12 (OPSFT Fig 6): "Update behaviors of OPSFT [...]: the location sparsity, Jaccard overlap of update
locations, and matrix-level cosine similarity of cumulative and interval updates across different training
steps" behave like the on-policy run's, not like SFT's.

The runs are C02's: the calibration's SFT and GRPO runs and OPSFT (SFT under the sign of GRPO's update at half
its steps), read at their stages (step 0, a quarter, half, three quarters, the end). Per series
(``opsft.claims.measure.update_behaviour``: cumulative location sparsity, Jaccard of consecutive interval
locations, matrix-level interval and cumulative cosines) ``closer_to_grpo`` is
mean |OPSFT - SFT| - mean |OPSFT - GRPO| over the stages: > 0 when OPSFT's curve lies nearer GRPO's.
"""

import statistics

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import closer_to, update_behaviour


def arms(scale_name, scale, seed):
    """The runs (C02's): the calibration's SFT and GRPO, and OPSFT with v from that GRPO run (``opsft_recipe``)."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    return {"sft": sft, "grpo": grpo, "opsft": opsft_recipe(sft, grpo, "sign")}


@pytest.mark.claim("C12")
def test_claim_opsft_update_behaviour(claim, seed):
    """For sparsity, Jaccard and cosine series, OPSFT's curve lies nearer GRPO's than SFT's."""
    series = {arm: update_behaviour(claim.run(cfg)) for arm, cfg in arms(claim.scale_name, claim.scale, seed).items()}
    for arm, curves in series.items():
        claim.record(arm, seed, **{f"mean_{name}": statistics.fmean(curve) for name, curve in curves.items()})
    for name in ("sparsity", "jaccard", "cosine"):
        claim.record(name, seed, closer_to_grpo=closer_to(series["opsft"][name], series["grpo"][name],
                                                          series["sft"][name]))
    for arm, curves in series.items():
        assert all(0 <= s <= 1 for s in curves["sparsity"]), f"{arm}: location sparsity outside [0, 1]"
