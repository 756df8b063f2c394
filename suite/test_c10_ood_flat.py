"""C10 (OPSFT Table 1): "Out of domain is a different story. The same DeepMath models are tested on IFEval, ARC,
HaluEval, Hellaswag, Winogrande, and PIQA. [...] Qwen3-8B means are 75.85, 75.54, 76.20, 76.39 [base, SFT,
GRPO, OPSFT]. [...] The extra math reasoning barely appears on these tasks."

The organism's six held-out ability families (times table, negative results, answer-only format, 3-digit
operands, four-operand chains, multiple choice), never in post-training data, stand in for Table 1's six
tasks; each runs through lm-eval as a local task. The models are C02's: the base, the calibration's SFT and
GRPO runs, and OPSFT with v from GRPO at half its steps. Training-set and in-domain accuracy stand beside.
"""

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies, ood_accuracies
from opsft.organism.build import build_organism


@pytest.mark.claim("C10")
def test_claim_ood_flat(claim, seed):
    """Mean out-of-domain accuracy of SFT, GRPO and OPSFT each within the registered tolerance of the base's."""
    grpo, sft = baseline("grpo", claim.scale, seed), baseline("sft", claim.scale, seed)
    org = build_organism(sft.organism)
    models = {"base": org.base, **{arm: claim.run(cfg).load_model() for arm, cfg in
                                   (("sft", sft), ("grpo", grpo), ("opsft", opsft_recipe(sft, grpo, "sign")))}}
    for arm, model in models.items():
        measured = claim.record(arm, seed, **ood_accuracies(model, org.tokenizer, claim.scale),
                                **accuracies(model, org.tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
