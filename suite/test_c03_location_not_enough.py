"""C03 (OPSFT Fig 3, Table 13): "A mask that shares only the update locations, and ignores the sign, does
worse than plain SFT. Knowing which weights move is not enough. The sign is."

Arms: vanilla SFT; OPSFT(location), SFT restricted to the weights GRPO moved (v != 0, either sign);
OPSFT(direction), the sign constraint. Same trajectories and learning rate; v from the GRPO run at half its
steps; both masked arms train the GRPO run's number of steps (``opsft_recipe``).
"""

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.pretraining import build_organism


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT, and SFT under the location mask and under the sign of the calibration's
    GRPO run (``opsft_recipe``)."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    return {"sft": sft, "location": opsft_recipe(sft, grpo, "location"), "opsft": opsft_recipe(sft, grpo, "sign")}


@pytest.mark.claim("C03")
def test_claim_location_not_enough(claim, seed):
    """Held-out in-domain accuracy: location-only no better than SFT; the sign constraint above location-only."""
    configs = arms(claim.scale_name, claim.scale, seed)
    org = build_organism(configs["sft"].organism)
    for arm, cfg in configs.items():
        measured = claim.record(arm, seed, **accuracies(claim.run(cfg).load_model(), org.tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
