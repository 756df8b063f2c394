"""X06 (our own; seen in ``research/tiny-scale-probe.md``): "every accuracy comparison also made at matched
training-set accuracy, so that 'beats SFT' cannot mean 'fits the SFT set less'; in a tiny-scale probe a
memorising SFT's apparent gap to GRPO vanished at matched fit."

SFT's frontier: (training-set accuracy, held-out in-domain accuracy) at every checkpoint (step 0, i.e. the
base, each snapshot, the end) of the SFT runs at each learning rate of the claims' precision (only the
claims' row at smoke), reduced to its Pareto front (``opsft.claims.fit``). Placed against it: GRPO (the claims'
row) and OPSFT of each of those rows (``opsft`` at the claims' row, ``opsft_fp32_lr1e-05`` at another; v at half
of that row's GRPO steps, trained for GRPO's steps: ``opsft_recipe``). ``matched_gap`` is an arm's held-out
accuracy minus the front's at its own training-set accuracy; ``gap`` the plain difference with its row's SFT run
at its end, and ``equal_steps_gap`` the difference with that run at the arm's own step count (where SFT trains
longer than GRPO, as at ``regime``, its snapshot there; NaN if it has none).
Including step 0 lets an SFT stopped before it starts count: where SFT only loses accuracy, the front is the
base and the matched gap is the gain over the base. The front at an arm's fit is a mix of at most two checkpoints'
held-out accuracies (``frontier_mix``), so ``sft_frontier``, ``matched_gap`` and ``gap`` are formed problem by
problem too (``combine``).
"""

import math

import pytest

from ablations.claims import claims_row
from opsft.claims.arms import baseline, grid_rows, opsft_recipe, row_label
from opsft.claims.fit import scored_frontier
from opsft.claims.measure import accuracies
from opsft.claims.scored import Accuracy, combine
from opsft.pretraining import build_organism


def fit_point(model, tokenizer, scale) -> tuple[Accuracy, Accuracy]:
    """(training-set accuracy, held-out in-domain accuracy) of a model, in %, with their per-problem scores."""
    acc = accuracies(model, tokenizer, scale)
    return acc["train_set"], acc["in_domain"]


def frontier_rows(scale_name, scale) -> tuple:
    """The calibration rows at the claims' precision: those whose SFT runs make the frontier."""
    precision = claims_row(scale)["precision"]
    return tuple(row for row in grid_rows(scale_name, scale) if row["precision"] == precision)


def arms(scale_name, scale, seed):
    """The runs: GRPO (the claims' row) and, for each of ``frontier_rows`` (arm names end in its ``row_label``), its
    SFT and OPSFT with v from that row's GRPO (``opsft_recipe``)."""
    out = {"grpo": baseline("grpo", scale, seed)}
    for row in frontier_rows(scale_name, scale):
        label, sft = row_label(row, scale), baseline("sft", scale, seed, row)
        out |= {"sft" + label: sft, "opsft" + label: opsft_recipe(sft, baseline("grpo", scale, seed, row), "sign")}
    return out


@pytest.mark.claim("X06")
def test_claim_matched_fit(claim, seed):
    """Held-out accuracy of OPSFT and GRPO against SFT's frontier at matched training-set accuracy."""
    declared = arms(claim.scale_name, claim.scale, seed)
    org = build_organism(declared["grpo"].organism)
    curves = {}  # row label -> {step: fit point} of that row's SFT run at its checkpoints after step 0
    compared = {"grpo": (declared["grpo"], "")}  # arm -> (config, label of the row whose SFT run gives its gaps)
    for row in frontier_rows(claim.scale_name, claim.scale):
        label = row_label(row, claim.scale)
        sft = declared["sft" + label]
        run = claim.run(sft)
        curves[label] = {step: fit_point(run.load_model(step), org.tokenizer, claim.scale)
                         for step in (*sft.snapshot_steps, sft.steps)}
        compared["opsft" + label] = (declared["opsft" + label], label)
    frontier = [fit_point(org.base, org.tokenizer, claim.scale), *(p for c in curves.values() for p in c.values())]
    for arm, (cfg, label) in compared.items():
        train_set, in_domain = fit_point(claim.run(cfg).load_model(), org.tokenizer, claim.scale)
        sft_curve = curves[label]
        sft_frontier = scored_frontier(frontier, train_set)
        equal_steps_gap = (combine([(1.0, in_domain), (-1.0, sft_curve[cfg.steps][1])]) if cfg.steps in sft_curve
                           else math.nan)
        measured = claim.record(arm, seed, matched_gap=combine([(1.0, in_domain), (-1.0, sft_frontier)]),
                                sft_frontier=sft_frontier,
                                gap=combine([(1.0, in_domain), (-1.0, sft_curve[max(sft_curve)][1])]),
                                equal_steps_gap=equal_steps_gap, train_set=train_set, in_domain=in_domain)
        assert abs(measured["matched_gap"]) <= 100 and 0 <= measured["sft_frontier"] <= 100
