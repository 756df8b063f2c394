"""C06 (OPSFT Table 3): "After 100 GRPO steps, another 700 steps on DeepMath trajectories pull the larger models
down if the update is unconstrained. Qwen3-8B goes from 40.31 to 37.50 under SFT and to 42.39 under OPSFT";
OPSFT applies the new trajectories "along the original v, so ordinary SFT does not wash out the on-policy
skill".

Both continued arms start from the final weights of the calibration's GRPO run (S = the scale's steps, the
paper's 100) and train 7 S steps (the paper's 700 : 100, ``PAPER_SFT_STEPS_PER_GRPO_STEP``) on the SFT
run's teacher trajectories at its learning rate: ``sft_cont`` unconstrained, ``opsft_cont`` under the sign
of the whole GRPO update (base -> GRPO's final weights, the "original v").
"""

import pytest

from opsft.claims.arms import baseline, constrained, continued, paper_sft_length
from opsft.claims.measure import accuracies
from opsft.pretraining import build_organism


def arms(scale_name, scale, seed):
    """The runs: the calibration's GRPO run, and lengthened SFT continued from it, unconstrained and under the sign
    of its whole update."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    sft_cont = continued(paper_sft_length(sft, grpo), grpo)
    return {"grpo": grpo, "sft_cont": sft_cont,
            "opsft_cont": constrained(sft_cont, grpo, "sign", direction_step=None)}


@pytest.mark.claim("C06")
def test_claim_continued_training(claim, seed):
    """Held-out accuracy of the GRPO model, and of SFT and OPSFT continued from it."""
    configs = arms(claim.scale_name, claim.scale, seed)
    org = build_organism(configs["sft_cont"].organism)
    for arm, cfg in configs.items():
        measured = claim.record(arm, seed, **accuracies(claim.run(cfg).load_model(), org.tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
