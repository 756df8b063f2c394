"""X05 (our own; seen in ``research/tiny-scale-probe.md``): "under Adam a one-sided sign mask keeps the gradient
noise that agrees with v and drops the noise that would cancel it; Adam's normalised step then drifts every
allowed weight along v at about lr per step. OPSFT runs ended 2-5x further from the base than SFT."

For each calibration row (precision x learning rates; only the claims' row at smoke), SFT and SFT under four
masks built from the row's GRPO v (at half its steps): the sign rule (``sign``), the same with Adam's moments
zeroed where a step was undone (``sign_reset``, the control that removes the ratchet), random signs on v's
support (``random_sign``) and v's locations (``location``). Per arm: ``distance`` ||theta_T - theta_0|| and
``distance_vs_sft`` (its ratio to SFT's), ``share_along_v`` = cos^2(Delta, v) (``opsft.claims.travel``; 1 for
a uniform drift along v), ``share_along_mask`` the same against the arm's own sign mask (the random signs for
``random_sign``), and the accuracies, to see whether accuracy falls as the distance grows. Arms of rows other
than the claims' row carry the row in their name (``sign_bf16_lr3e-05``).
"""

import pytest

from opsft.claims.arms import baseline, constrained, grid_rows, row_label
from opsft.claims.measure import accuracies
from opsft.claims.travel import distance, share_along
from opsft.constraints import build_masks
from opsft.directions import extract
from opsft.organism.build import build_organism

SIGNED_MODES = ("sign", "random-sign")  # masks that allow one sign per weight, so "along the mask" is defined


def masked_arms(sft, grpo, seed: int) -> dict:
    """SFT and the four masked variants of it, keyed by arm name."""
    return {"sft": sft, "sign": constrained(sft, grpo, "sign"),
            "sign_reset": constrained(sft, grpo, "sign", reset_moments=True),
            "random_sign": constrained(sft, grpo, "random-sign", seed=seed),
            "location": constrained(sft, grpo, "location")}


@pytest.mark.claim("X05")
def test_claim_ratchet(claim, seed):
    """Distance from the base, its share along v, and accuracy, for SFT and each mask, per calibration row."""
    for row in grid_rows(claim.scale_name, claim.scale):
        grpo, sft = baseline("grpo", claim.scale, seed, row), baseline("sft", claim.scale, seed, row)
        org = build_organism(sft.organism)
        arms = masked_arms(sft, grpo, seed)
        used = arms["sign"].constraint  # v exactly as the constraints extract it
        source = claim.run(used.direction_run)
        v = extract(source.snapshot(0), source.snapshot(used.direction_step), rule=used.rule, step=used.direction_step)
        sft_run = claim.run(sft)
        sft_distance = distance(sft_run.snapshot(0), sft_run.snapshot())
        assert sft_distance > 0, f"SFT{row_label(row, claim.scale)} did not move from the base"
        for arm, cfg in arms.items():
            result = claim.run(cfg)
            before, after = result.snapshot(0), result.snapshot()
            travelled = distance(before, after)
            values = {"distance": travelled, "distance_vs_sft": travelled / sft_distance,
                      "share_along_v": share_along(before, after, v.signs)}
            if cfg.constraint.mode in SIGNED_MODES:
                mask = build_masks(cfg.constraint.mode, v, None, cfg.constraint.seed)
                values["share_along_mask"] = share_along(before, after, mask)
            measured = claim.record(arm + row_label(row, claim.scale), seed, **values,
                                    **accuracies(result.load_model(), org.tokenizer, claim.scale))
            assert all(0 <= measured[k] <= 100 for k in ("in_domain", "train_set")), f"{arm}: {measured}"
