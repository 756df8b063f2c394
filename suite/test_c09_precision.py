"""C09 (OPSFT Tables 6/8, Qwen3-8B): "In BF16, SFT updates 2.702% of parameters, OPSFT 0.408%; in FP32, SFT
updates about 89.3%, OPSFT 9.454%, GRPO 9.499%. The sign mask pulls SFT's footprint into the same range as
GRPO."

Two precisions of the calibration grid: pure bf16 parameters, and fp32 master weights whose changes are
judged in bf16. In each, SFT and OPSFT (v from that precision's GRPO run) are measured by their share of
visibly updated parameters and their held-out accuracy.
"""

import pytest

from ablations.calibration import GRID
from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.diagnostics import bf16_sparsity
from opsft.pretraining import build_organism

ROWS = {"fp32": GRID[0], "bf16": next(r for r in GRID if r["precision"] == "bf16")}


def arms(scale_name, scale, seed):
    """The runs, per precision (``ROWS``): that row's SFT, OPSFT with v from its GRPO run, and that GRPO run
    (``<arm>_<precision>``)."""
    out = {}
    for precision, row in ROWS.items():
        grpo, sft = baseline("grpo", scale, seed, row), baseline("sft", scale, seed, row)
        out |= {f"sft_{precision}": sft, f"opsft_{precision}": opsft_recipe(sft, grpo, "sign"),
                f"grpo_{precision}": grpo}
    return out


@pytest.mark.claim("C09")
def test_claim_precision(claim, seed):
    """Visibly updated share (%) and held-out in-domain accuracy of SFT, OPSFT and GRPO in both precisions."""
    configs = arms(claim.scale_name, claim.scale, seed)
    for precision in ROWS:
        org = build_organism(configs[f"sft_{precision}"].organism)
        for arm in ("sft", "opsft", "grpo"):
            result = claim.run(configs[f"{arm}_{precision}"])
            updated = 100 * bf16_sparsity(result.snapshot(0), result.snapshot())["overall"]["updated"]
            in_domain = accuracies(result.load_model(), org.tokenizer, claim.scale)["in_domain"]
            measured = claim.record(f"{arm}_{precision}", seed, updated_pct=updated, in_domain=in_domain)
            assert all(0 <= v <= 100 for v in measured.values()), f"{arm}_{precision}: {measured}"
