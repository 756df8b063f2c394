"""C19 (GEO section 4.2, Fig 6/8): "V_16 is extracted from the top right of Delta W_t around 20% training
progress, and training then resumes under this rank-16 constraint. OPD is essentially unchanged under the
rank-16 bottleneck ... The same constraint degrades SFT over the matched window."

For OPD and SFT (the calibration's runs), the first 20% of the steps (``PROJECTION_START``) run as a prefix;
from its final weights the arms train the remaining steps: unprojected (``opd``, ``sft``), with every 2-D
weight's gradient projected as G <- G V_16 V_16^T onto the top-16 right singular subspace of the prefix's
update (``opd_proj``, ``sft_proj``: rules v1), and with K set as GEO sets it, "slightly below the effective
dimension observed near the projection point" (``opsft.claims.travel.rank_below`` of the prefix update's mean
stable rank, recorded as ``*_projk.rank``), projecting the optimizer's step as well as the gradient
(``opd_projk``, ``sft_projk``: rules v2). AdamW's per-weight normalisation takes a step out of the subspace
even when its gradient lies in it; ``in_subspace`` records the share of each projected arm's window update
(squared Frobenius norm) that lies in the subspace it was projected on, so the page shows how far the
gradient-only projection leaked. ``*_start`` scores the prefix's final weights: the window must learn for "OPD
unchanged under the bottleneck" to say anything. Every arm covers the same window from the same weights
(each with a fresh optimizer).
"""

import math

import pytest

from opsft.claims.arms import PROJECTION_START, baseline, constrained, split_at
from opsft.claims.declared import Staged
from opsft.claims.measure import accuracies
from opsft.claims.travel import mean_stable_rank, rank_below, share_in_subspace
from opsft.masks import subspace_bases
from opsft.pretraining import build_organism

RANK = 16  # "K = 16"


def projected_k(window, prefix):
    """The builder of the ``projk`` arm from the prefix's result: K below its update's mean stable rank."""
    def build(start):
        k = rank_below(mean_stable_rank(start.snapshot(0), start.snapshot()), RANK)
        return constrained(window, prefix, "subspace-update", rank=k, direction_step=None)
    return build


def arms(scale_name, scale, seed, method):
    """The runs: the prefix (the first 20% of the calibration's ``method`` run) and, over the remaining window,
    the unprojected arm, the K = 16 projection, and the measured-K projection (staged: K is read off the
    prefix's update)."""
    prefix, window = split_at(baseline(method, scale, seed), PROJECTION_START)
    shape = constrained(window, prefix, "subspace-update", rank=RANK, direction_step=None)
    return {f"{method}_start": prefix, method: window,
            f"{method}_proj": constrained(window, prefix, "subspace", rank=RANK, direction_step=None),
            f"{method}_projk": Staged(after=prefix, build=projected_k(window, prefix), shape=shape)}


@pytest.mark.parametrize("method", ["opd", "sft"])
@pytest.mark.claim("C19")
def test_claim_rank16_sufficiency(claim, seed, method):
    """Held-out accuracy over the matched window, with and without the projection, at K = 16 and at the
    measured K."""
    declared = arms(claim.scale_name, claim.scale, seed, method)
    prefix = declared[f"{method}_start"]
    org = build_organism(prefix.organism)
    start = claim.run(prefix)
    rank = mean_stable_rank(start.snapshot(0), start.snapshot())
    assert math.isnan(rank) or rank >= 1 - 1e-9, f"stable rank {rank} below 1"
    projk = declared[f"{method}_projk"].build(start)
    runs = {method: (declared[method], None), f"{method}_proj": (declared[f"{method}_proj"], RANK),
            f"{method}_projk": (projk, projk.constraint.rank)}
    claim.record(f"{method}_start", seed, **accuracies(start.load_model(), org.tokenizer, claim.scale))
    for arm, (cfg, arm_rank) in runs.items():
        result = claim.run(cfg)
        measured = claim.record(arm, seed, **accuracies(result.load_model(), org.tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
        if arm_rank is not None:
            bases = subspace_bases(start.snapshot(0), start.snapshot(), rank=arm_rank)
            claim.record(arm, seed, rank=arm_rank,
                         in_subspace=share_in_subspace(result.snapshot(0), result.snapshot(), bases))
    claim.record(f"{method}_proj", seed, start_stable_rank=rank)
