"""C03 (OPSFT Fig 3, Table 13): "A mask that shares only the update locations, and ignores the sign, does
worse than plain SFT. Knowing which weights move is not enough. The sign is."

Arms: vanilla SFT; OPSFT(location), SFT restricted to the weights GRPO moved (v != 0, either sign);
OPSFT(direction), the sign constraint. Same trajectories and learning rate; v from the GRPO run at half its
steps; both masked arms train the GRPO run's number of steps (``opsft_recipe``).
"""

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.organism.build import build_organism


@pytest.mark.claim("C03")
def test_claim_location_not_enough(claim, seed):
    """Held-out in-domain accuracy: location-only no better than SFT; the sign constraint above location-only."""
    grpo, sft = baseline("grpo", claim.scale, seed), baseline("sft", claim.scale, seed)
    org = build_organism(sft.organism)
    arms = {"sft": sft, "location": opsft_recipe(sft, grpo, "location"), "opsft": opsft_recipe(sft, grpo, "sign")}
    for arm, cfg in arms.items():
        measured = claim.record(arm, seed, **accuracies(claim.run(cfg).load_model(), org.tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
