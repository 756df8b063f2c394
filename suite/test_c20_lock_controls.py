"""C20 (GEO section 5, Fig 7): "Token sparsification and off-policy rollouts preserve the OPD rank trajectory,
changing update scale at most. In contrast, objective-level interpolation exposes a boundary of the locked
regime": "OPD-dominant mixtures retain the OPD-like stable-rank trajectory. When the OPD component becomes weak,
the trajectory no longer follows the baseline."

Each variant changes one factor of the calibration's OPD run (GEO appendix G.2): top-KL or random token
retention at 25% / 50% (``token_keep``, ``token_select``), teacher-sampled rollouts (``rollout_policy``), or
the advantage alpha * OPD + (1 - alpha) * GRPO at alpha 0.75 / 0.01 (``opd_alpha``). ``trajectory_gap`` is
mean_t |log sr_variant(t) - log sr_OPD(t)| over the stages after step 0, sr the mean stable rank of the
cumulative update over layer matrices.
"""

import dataclasses

import pytest

from opsft.claims.arms import baseline
from opsft.claims.measure import log_gap, stable_rank_curve
from opsft.claims.movement import record_in_domain
from opsft.runs import base_model, run_tokenizer

VARIANTS = {
    "topkl_25": {"token_keep": 0.25, "token_select": "topkl"},
    "topkl_50": {"token_keep": 0.5, "token_select": "topkl"},
    "random_25": {"token_keep": 0.25, "token_select": "random"},
    "random_50": {"token_keep": 0.5, "token_select": "random"},
    "off_policy": {"rollout_policy": "teacher"},
    "alpha_075": {"opd_alpha": 0.75},
    "alpha_001": {"opd_alpha": 0.01},
}


def arms(scale_name, scale, seed):
    """The runs: the calibration's OPD run and each of its ``VARIANTS`` (one factor of its objective changed)."""
    opd = baseline("opd", scale, seed)
    return {"opd": opd, **{arm: dataclasses.replace(opd, objective=dataclasses.replace(opd.objective, **change))
                           for arm, change in VARIANTS.items()}}


@pytest.mark.claim("C20")
def test_claim_lock_controls(claim, seed):
    """Token thinning and off-policy rollouts stay within the registered log-gap of OPD's stable-rank
    trajectory; alpha = 0.01 departs from it further than alpha = 0.75. Each variant's and the base's held-out
    accuracy stand beside: a variant "keeps the trajectory" only if it moved (the rules-v3 guards)."""
    configs = arms(claim.scale_name, claim.scale, seed)
    record_in_domain(claim, seed, {"base": base_model(configs["opd"]),
                                   **{arm: claim.run(configs[arm]).load_model() for arm in VARIANTS}},
                     run_tokenizer(configs["opd"]))
    reference = stable_rank_curve(claim.run(configs["opd"]))
    claim.record("opd", seed, stable_rank_last=reference[-1])
    for arm in VARIANTS:
        curve = stable_rank_curve(claim.run(configs[arm]))
        measured = claim.record(arm, seed, trajectory_gap=log_gap(curve, reference), stable_rank_last=curve[-1])
        assert not measured["trajectory_gap"] < 0, f"{arm}: a negative gap"
