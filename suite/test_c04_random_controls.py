"""C04 (OPSFT Table A13): "random location 30.84; on-policy location 34.07; on-policy location + random sign
27.71; full on-policy direction 41.15": random locations < on-policy locations < on-policy direction, and
random signs on the on-policy locations hurt.

Arms are SFT under four masks built from the same GRPO v: random locations (as many per tensor as v has),
v's locations, v's locations with seeded random signs, and v itself. Only the random masks take the seed, so
the location and sign arms are C03's and C02's own runs, not retrained under another digest.
"""

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.pretraining import build_organism

MASKS = {"random_location": "random-location", "location": "location", "random_sign": "random-sign", "opsft": "sign"}


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT under each of the four masks (``MASKS``) built from its GRPO run's v."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    return {arm: opsft_recipe(sft, grpo, mode, **({"seed": seed} if mode.startswith("random") else {}))
            for arm, mode in MASKS.items()}


@pytest.mark.claim("C04")
def test_claim_random_controls(claim, seed):
    """Held-out in-domain accuracy of SFT under each of the four masks."""
    configs = arms(claim.scale_name, claim.scale, seed)
    org = build_organism(configs["opsft"].organism)
    for arm, cfg in configs.items():
        measured = claim.record(arm, seed, **accuracies(claim.run(cfg).load_model(), org.tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
