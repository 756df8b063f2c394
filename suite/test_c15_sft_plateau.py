"""C15 (OPSFT Tables A10-A12): "vanilla SFT accuracy plateaus over 100..600 steps (Qwen3-1.7B mean 9.48,
max 13.65) and stays below OPSFT (15.11)."

SFT is scored at each of its snapshots (a quarter, half, three quarters and all of its steps); OPSFT at its
end. The rule compares OPSFT with SFT's best checkpoint, so early stopping cannot explain the gap.
``sft.max_in_domain`` is that checkpoint's accuracy (the first of equals) with its per-problem scores,
``sft.mean_in_domain`` the checkpoints' mean, problem by problem too (``combine``).
"""

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.claims.scored import combine
from opsft.pretraining import build_organism


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT, and OPSFT with v from the calibration's GRPO run (``opsft_recipe``)."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    return {"sft": sft, "opsft": opsft_recipe(sft, grpo, "sign")}


@pytest.mark.claim("C15")
def test_claim_sft_plateau(claim, seed):
    """SFT's held-out accuracy over its checkpoints (mean and max) against OPSFT's final accuracy."""
    configs = arms(claim.scale_name, claim.scale, seed)
    sft = configs["sft"]
    org = build_organism(sft.organism)
    run = claim.run(sft)
    curve = [accuracies(run.load_model(step), org.tokenizer, claim.scale)["in_domain"]
             for step in (*sft.snapshot_steps, sft.steps)]
    claim.record("sft", seed, mean_in_domain=combine([(1 / len(curve), acc) for acc in curve]),
                 max_in_domain=max(curve, key=float))
    opsft = accuracies(claim.run(configs["opsft"]).load_model(), org.tokenizer, claim.scale)
    measured = claim.record("opsft", seed, in_domain=opsft["in_domain"])
    assert all(0 <= v <= 100 for v in [*curve, *measured.values()])
