"""C18 (GEO section 4.2, Fig 5): "OPD's top-16 right singular subspace is aligned with its final one from
the first checkpoint on, while SFT's and RLVR's converge to theirs only gradually."

The checkpoints are the calibration runs' own snapshots (step 0, its snapshot steps, the final step) of the
cached GRPO, OPD and SFT runs; the similarity ||V16(t)^T V16(end)||_F^2 / 16 of the cumulative update
W_t - W_0 is averaged over layer matrices, at the first checkpoint after step 0 (and, for the table, at the
middle one and for a random subspace). The verdict is decided over seeds by the rules registered for C18.
"""

import math

import pytest

from opsft.claims.arms import baseline
from opsft.claims.measure import early_subspace


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT, OPD and GRPO runs, named by their method."""
    return {method: baseline(method, scale, seed) for method in ("sft", "opd", "grpo")}


@pytest.mark.claim("C18")
def test_claim_early_subspace(claim, seed):
    """Subspace similarity with the end at the first checkpoint: OPD above SFT and above GRPO."""
    for method, cfg in arms(claim.scale_name, claim.scale, seed).items():
        result = claim.run(cfg)
        measured = claim.record(method, seed, **early_subspace(result))
        for name, value in measured.items():
            assert math.isnan(value) or -1e-9 <= value <= 1 + 1e-9, f"{method}: {name} = {value} outside [0, 1]"
