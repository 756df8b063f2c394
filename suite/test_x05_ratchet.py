"""X05 (our own; seen in ``research/tiny-scale-probe.md``): "under Adam a one-sided sign mask keeps the gradient
noise that agrees with v and drops the noise that would cancel it; Adam's normalised step then drifts every
allowed weight along v at about lr per step. OPSFT runs ended 2-5x further from the base than SFT."

For each calibration row (precision x learning rates; only the claims' row at smoke), SFT and SFT under four
masks built from the row's GRPO v (at half its steps): the sign rule (``sign``), the ratchet-free
``sign_update`` (the gradient is left whole and only the optimizer's step is kept to v's sign, so gradient
noise that disagrees with v still reaches Adam's moments and cancels: if the one-sided gradient mask is what
drives the drift, ``sign_update`` travels less far), random signs on v's support (``random_sign``) and v's
locations (``location``). (Version 1 also trained ``sign`` with Adam's moments zeroed where a step was undone;
under gradient masking a step is almost never undone, so that arm equalled ``sign`` by construction and is
gone.) Per arm: ``distance`` ||theta_T - theta_0|| and
``distance_vs_sft`` (its ratio to SFT's), ``share_along_v`` = cos^2(Delta, v) (``opsft.claims.travel``; 1 for
a uniform drift along v), ``share_along_mask`` the same against the arm's own sign mask (the random signs for
``random_sign``), ``agree_on_v``, the share of v's support on which the arm's update took v's sign
(``opsft.claims.travel``: for SFT and ``location`` it says how much of v's sign pattern the teacher data's own
update already follows, about 1/2 for none), and the accuracies, to see whether accuracy falls as the distance
grows. ``drift_sign`` and ``drift_random_sign`` train nothing: the base moved by the sign arm's distance
uniformly along v, and along the random signs (``opsft.claims.travel.drifted``), to tell whether a drift of that
length hurts because of where it points (v) or only because of its length; each records the stable rank of
its sign pattern's layer matrices (``pattern_stable_rank``: low when the drift moves every input along few
directions). Arms of rows other than the claims'
row carry the row in their name (``sign_bf16_lr3e-05``).
"""

import pytest

from ablations.regime_map import HORIZON_FRACTIONS
from opsft.claims.arms import baseline, grid_rows, masked_family, row_label, with_horizons
from opsft.claims.measure import accuracies
from opsft.claims.travel import agreement_on_support, distance, drifted, pattern_stable_rank, share_along
from opsft.constraints import build_masks
from opsft.directions import extract
from opsft.pretraining import build_organism

# X05's arms by their names in the map's family (``masked_family``): the same runs as the map's cell at each row.
FAMILY_NAMES = {"sft": "sft", "opsft": "sign", "sign_update": "sign_update", "random_sign": "random_sign",
                "location": "location"}


def arms(scale_name, scale, seed):
    """The runs, per calibration row (arm names end in its ``row_label``): the row's GRPO (v's source), its SFT
    snapshotted at the map's horizons and SFT under the four masks: the map's own runs for that row
    (``masked_family``)."""
    out = {}
    for row in grid_rows(scale_name, scale):
        grpo, sft = baseline("grpo", scale, seed, row), baseline("sft", scale, seed, row)
        family = masked_family(with_horizons(sft, HORIZON_FRACTIONS[:-1]), grpo, seed)
        label = row_label(row, scale)
        out |= {f"grpo{label}": grpo, **{name + label: family[arm] for arm, name in FAMILY_NAMES.items()}}
    return out


@pytest.mark.claim("X05")
def test_claim_ratchet(claim, seed):
    """Distance from the base, its share along v, and accuracy, for SFT and each mask, per calibration row."""
    declared = arms(claim.scale_name, claim.scale, seed)
    for row in grid_rows(claim.scale_name, claim.scale):
        label = row_label(row, claim.scale)
        runs = {arm: declared[arm + label] for arm in ("sft", "sign", "sign_update", "random_sign", "location")}
        sft = runs["sft"]
        org = build_organism(sft.organism)
        used = runs["sign"].constraint  # v exactly as the constraints extract it: from the row's GRPO
        source = claim.run(used.direction_run)
        v = extract(source.snapshot(0), source.snapshot(used.direction_step), rule=used.rule, step=used.direction_step)
        sft_run = claim.run(sft)
        sft_distance = distance(sft_run.snapshot(0), sft_run.snapshot())
        assert sft_distance > 0, f"SFT{label} did not move from the base"
        masks = {arm: build_masks(runs[arm].constraint.mode, v, None, runs[arm].constraint.seed)
                 for arm in ("sign", "random_sign")}
        travelled = {}
        for arm, cfg in runs.items():
            result = claim.run(cfg)
            before, after = result.snapshot(0), result.snapshot()
            travelled[arm] = distance(before, after)
            values = {"distance": travelled[arm], "distance_vs_sft": travelled[arm] / sft_distance,
                      "share_along_v": share_along(before, after, v.signs),
                      "agree_on_v": agreement_on_support(before, after, v.signs)}
            if arm in masks:
                values["share_along_mask"] = share_along(before, after, masks[arm])
            measured = claim.record(arm + label, seed, **values,
                                    **accuracies(result.load_model(), org.tokenizer, claim.scale))
            assert all(0 <= measured[k] <= 100 for k in ("in_domain", "train_set")), f"{arm}: {measured}"
        for arm, mask in masks.items():  # the ratchet's limit: the sign arm's distance as a pure drift, no SFT
            model = drifted(sft_run.load_model(0), mask, travelled["sign"])
            claim.record(f"drift_{arm}{label}", seed, pattern_stable_rank=pattern_stable_rank(mask),
                         **accuracies(model, org.tokenizer, claim.scale))
