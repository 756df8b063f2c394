"""C08 (OPSFT Fig 5): "Later GRPO snapshots make better masks, but the gain from step 50 to step 100 is larger
than the gain from step 100 to step 150."

The paper's snapshots 50/100/150 keep their 1:2:3 ratio on the organism as steps 25/50/75 of the GRPO run;
OPSFT with each v is scored on held-out in-domain problems. ``snapshots.diminishing`` is
(mid - early) - (late - mid), positive when the returns diminish (problem by problem too: ``combine``).
"""

import dataclasses

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.claims.scored import combine
from opsft.pretraining import build_organism


def arms(scale_name, scale, seed):
    """The runs: OPSFT (``opsft_recipe``) with v from the calibration's GRPO run at its first three snapshots."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    base_cfg = opsft_recipe(sft, grpo, "sign")
    return {arm: dataclasses.replace(base_cfg, constraint=dataclasses.replace(base_cfg.constraint, direction_step=step))
            for arm, step in zip(("v_early", "v_mid", "v_late"), grpo.snapshot_steps[:3], strict=True)}


@pytest.mark.claim("C08")
def test_claim_snapshot_steps(claim, seed):
    """OPSFT accuracy with v from three GRPO snapshots (1:2:3), and whether its returns diminish."""
    configs = arms(claim.scale_name, claim.scale, seed)
    org = build_organism(configs["v_early"].organism)
    scores = {}  # arm -> in-domain Accuracy (``record`` hands back plain floats)
    for arm, cfg in configs.items():
        measured = accuracies(claim.run(cfg).load_model(), org.tokenizer, claim.scale)
        claim.record(arm, seed, **measured)
        scores[arm] = measured["in_domain"]
    diminishing = combine([(-1.0, scores["v_early"]), (2.0, scores["v_mid"]), (-1.0, scores["v_late"])])
    gain = claim.record("snapshots", seed, diminishing=diminishing)
    assert all(0 <= v <= 100 for v in scores.values()) and abs(gain["diminishing"]) <= 200
