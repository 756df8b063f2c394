"""C10 (OPSFT Table 1): "Out of domain is a different story. The same DeepMath models are tested on IFEval, ARC,
HaluEval, Hellaswag, Winogrande, and PIQA. [...] Qwen3-8B means are 75.85, 75.54, 76.20, 76.39 [base, SFT,
GRPO, OPSFT]. [...] The extra math reasoning barely appears on these tasks."

The organism's six held-out ability families (times table, negative results, answer-only format, 3-digit
operands, four-operand chains, multiple choice), never in post-training data, stand in for Table 1's six
tasks; each runs through lm-eval as a local task. The models are C02's: the base, the calibration's SFT and
GRPO runs, and OPSFT with v from GRPO at half its steps. Training-set and in-domain accuracy stand beside.

A family the base scores at its floor or ceiling (``FLOOR`` / ``CEILING``) cannot show a move in one direction,
so version 2 decides on ``ood_informative``, the mean over the other families (each family once, as
``ood_mean``: ``family_mean``); the base records each family it leaves out as ``left_out_<family>`` = 1.
"""

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies, ood_accuracies
from opsft.claims.scored import family_mean
from opsft.organism import tasks
from opsft.pretraining import build_organism

# Registered with rules v2 (before any run that uses them): a family is at the floor / ceiling when the base
# scores at most / at least this (%).
FLOOR, CEILING = 5.0, 95.0


def arms(scale_name, scale, seed):
    """The runs (C02's): the calibration's SFT and GRPO, and OPSFT with v from that GRPO run (``opsft_recipe``)."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    return {"sft": sft, "grpo": grpo, "opsft": opsft_recipe(sft, grpo, "sign")}


@pytest.mark.claim("C10")
def test_claim_ood_flat(claim, seed):
    """Mean out-of-domain accuracy of SFT, GRPO and OPSFT each within the registered tolerance of the base's."""
    configs = arms(claim.scale_name, claim.scale, seed)
    org = build_organism(configs["sft"].organism)
    models = {"base": org.base, **{arm: claim.run(cfg).load_model() for arm, cfg in configs.items()}}
    ood = {arm: ood_accuracies(model, org.tokenizer, claim.scale) for arm, model in models.items()}
    informative = [f for f in tasks.HELD_OUT if FLOOR < ood["base"][f] < CEILING]
    left_out = {f"left_out_{f}": 1.0 for f in tasks.HELD_OUT if f not in informative}
    for arm, model in models.items():
        mean = family_mean([ood[arm][f] for f in informative]) if informative else float("nan")
        measured = claim.record(arm, seed, **ood[arm], ood_informative=mean,
                                **accuracies(model, org.tokenizer, claim.scale), **(left_out if arm == "base" else {}))
        assert all(0 <= v <= 100 for k, v in measured.items() if k != "ood_informative"), f"{arm}: {measured}"
