"""C02 (OPSFT Fig 3, Table 1): "OPSFT, vanilla SFT on the same teacher trajectories for the same steps but
with each step kept to the sign of a short GRPO run's update v, beats vanilla SFT and lands close to the
GRPO run that supplied v."

v is taken at half of the GRPO run's steps, and OPSFT trains as many steps as the GRPO run (``opsft_recipe``:
the paper's 50 GRPO + 100 constrained steps; where SFT trains longer, as at ``regime``, SFT still runs its own
length, as the paper's 700); the SFT, GRPO and base arms are the calibration's runs. Beside
held-out accuracy the test records training-set accuracy (X06: is "beats SFT" more than "fits the SFT set
less"?) and the held-out abilities' mean.
"""

import pytest

from opsft.claims.arms import baseline, opsft_arm
from opsft.claims.measure import accuracies
from opsft.runs import base_model, run_tokenizer


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT and GRPO, and OPSFT with v from that GRPO run (``opsft_arm``: the
    efficiency recipe, or a recipe's own ``runs.opsft``)."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    return {"sft": sft, "grpo": grpo, "opsft": opsft_arm(sft, grpo, scale)}


@pytest.mark.claim("C02")
def test_claim_sign_beats_sft(claim, seed):
    """Held-out in-domain accuracy: OPSFT > SFT, and OPSFT within the registered tolerance of GRPO."""
    configs = arms(claim.scale_name, claim.scale, seed)
    tokenizer = run_tokenizer(configs["sft"])
    models = {"base": base_model(configs["sft"]), **{arm: claim.run(cfg).load_model() for arm, cfg in configs.items()}}
    for arm, model in models.items():
        measured = claim.record(arm, seed, **accuracies(model, tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
