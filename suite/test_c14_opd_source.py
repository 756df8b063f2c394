"""C14 (OPSFT Table 13, Qwen3-1.7B): "OPD, not only GRPO, can supply v: OPSFT(direction) 16.71 ~ OPD 16.75
> SFT 13.83."

OPSFT here takes v from the calibration's OPD run (at half its steps) instead of GRPO's; SFT is the same
baseline as in C02.
"""

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.claims.movement import record_in_domain
from opsft.runs import base_model, run_tokenizer


def arms(scale_name, scale, seed):
    """The runs: the calibration's SFT and OPD, and OPSFT with v from that OPD run (``opsft_recipe``)."""
    opd, sft = baseline("opd", scale, seed), baseline("sft", scale, seed)
    return {"sft": sft, "opd": opd, "opsft": opsft_recipe(sft, opd, "sign")}


@pytest.mark.claim("C14")
def test_claim_opd_source(claim, seed):
    """Held-out in-domain accuracy of SFT, OPD, and OPSFT with OPD's v, and of the base they start from."""
    configs = arms(claim.scale_name, claim.scale, seed)
    tokenizer = run_tokenizer(configs["sft"])
    record_in_domain(claim, seed, {"base": base_model(configs["sft"])}, tokenizer)
    for arm, cfg in configs.items():
        measured = claim.record(arm, seed, **accuracies(claim.run(cfg).load_model(), tokenizer, claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
