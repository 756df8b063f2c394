"""C19 (GEO section 4.2, Fig 6/8): "V_16 is extracted from the top right of Delta W_t around 20% training
progress, and training then resumes under this rank-16 constraint. OPD is essentially unchanged under the
rank-16 bottleneck ... The same constraint degrades SFT over the matched window."

For OPD and SFT (the calibration's runs), the first 20% of the steps (``PROJECTION_START``) run as a prefix;
from its final weights two arms train the remaining steps: unprojected (``opd``, ``sft``) and with every
2-D weight's gradient projected as G <- G V_16 V_16^T onto the top-16 right singular subspace of the
prefix's update (``opd_proj``, ``sft_proj``). Both arms of a method thus cover the same window from the same
weights (each with a fresh optimizer). ``*_proj.start_stable_rank`` is the mean stable rank of the prefix's
layer-matrix updates: GEO picks K = 16 "slightly below the effective dimension observed near the projection
point"; at the organism's width (128) K = 16 is a far looser bottleneck than 16 of Qwen3-8B's 4096.
"""

import math

import pytest

from opsft.claims.arms import PROJECTION_START, baseline, constrained, split_at
from opsft.claims.measure import accuracies
from opsft.claims.travel import mean_stable_rank
from opsft.organism.build import build_organism

RANK = 16  # "K = 16"


@pytest.mark.parametrize("method", ["opd", "sft"])
@pytest.mark.claim("C19")
def test_claim_rank16_sufficiency(claim, seed, method):
    """Held-out accuracy over the matched window, with and without the rank-16 projection."""
    prefix, window = split_at(baseline(method, claim.scale, seed), PROJECTION_START)
    org = build_organism(window.organism)
    start = claim.run(prefix)
    projected = constrained(window, prefix, "subspace", rank=RANK, direction_step=None)
    for arm, cfg in ((method, window), (f"{method}_proj", projected)):
        measured = claim.record(arm, seed, **accuracies(claim.run(cfg).load_model(), org.tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
    rank = mean_stable_rank(start.snapshot(0), start.snapshot())
    claim.record(f"{method}_proj", seed, start_stable_rank=rank)
    assert math.isnan(rank) or rank >= 1 - 1e-9, f"stable rank {rank} below 1"
