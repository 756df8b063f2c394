"""C13 (OPSFT Fig 7): "Response length is similar for SFT, OPSFT, and GRPO. OPSFT moves closer to GRPO on
accuracy variance across samples, and on how often case-splitting and logical connectives show up. The chain
of thought does not get longer."

The runs are C02's (SFT, GRPO, and OPSFT with v from GRPO at half its steps). At each stage after step 0 each
model samples k completions (temperature 1) for held-out in-domain problems; ``behaviour_curves`` gives the
four Fig 7 quantities. ``length.opsft_vs_grpo`` / ``length.opsft_vs_sft`` are OPSFT's mean relative length
difference over the stages; for the other three, ``closer_to_grpo`` is mean |OPSFT - SFT| - mean |OPSFT - GRPO|.

A cue kind that no arm ever writes at any stage is not measurable on the organism (its solutions are chains of
operations; the teacher's style writes "so", the base's none): its ``closer_to_grpo`` is recorded as NaN,
which makes that rule INCONCLUSIVE rather than a claimed tie.
"""

import math

import pytest

from opsft.claims.arms import baseline, opsft_recipe
from opsft.claims.measure import behaviour_curves, closer_to, relative_gap
from opsft.claims.movement import record_in_domain
from opsft.pretraining import build_organism
from opsft.runs import base_model


def arms(scale_name, scale, seed):
    """The runs (C02's): the calibration's SFT and GRPO, and OPSFT with v from that GRPO run (``opsft_recipe``)."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    return {"sft": sft, "grpo": grpo, "opsft": opsft_recipe(sft, grpo, "sign")}


@pytest.mark.claim("C13")
def test_claim_reasoning_behaviour(claim, seed):
    """OPSFT's length within 20% of SFT's and GRPO's; its accuracy std and cue rates nearer GRPO's than SFT's."""
    configs = arms(claim.scale_name, claim.scale, seed)
    tokenizer = build_organism(configs["sft"].organism).tokenizer
    record_in_domain(claim, seed, {"base": base_model(configs["sft"]),
                                   **{arm: claim.run(cfg).load_model() for arm, cfg in configs.items()}}, tokenizer)
    curves = {arm: behaviour_curves(claim.run(cfg), tokenizer, claim.scale) for arm, cfg in configs.items()}
    for arm, arm_curves in curves.items():
        claim.record(arm, seed, **{f"final_{name}": curve[-1] for name, curve in arm_curves.items()})
    opsft, sft_c, grpo_c = curves["opsft"], curves["sft"], curves["grpo"]
    claim.record("length", seed, opsft_vs_grpo=relative_gap(opsft["length"], grpo_c["length"]),
                 opsft_vs_sft=relative_gap(opsft["length"], sft_c["length"]))
    claim.record("acc_std", seed, closer_to_grpo=closer_to(opsft["acc_std"], grpo_c["acc_std"], sft_c["acc_std"]))
    for cue in ("case_split", "logic_cue"):
        written = any(rate > 0 for arm_curves in curves.values() for rate in arm_curves[cue])
        claim.record(cue, seed, closer_to_grpo=closer_to(opsft[cue], grpo_c[cue], sft_c[cue]) if written else math.nan)
    assert all(v > 0 for arm_curves in curves.values() for v in arm_curves["length"]), "an empty response"
