"""X06 (our own; seen in ``research/tiny-scale-probe.md``): "every accuracy comparison also made at matched
training-set accuracy, so that 'beats SFT' cannot mean 'fits the SFT set less'; in a tiny-scale probe a
memorising SFT's apparent gap to GRPO vanished at matched fit."

SFT's frontier: (training-set accuracy, held-out in-domain accuracy) at every checkpoint (step 0, i.e. the
base, each snapshot, the end) of the SFT runs at each learning rate of the claims' precision (only the
claims' row at smoke), reduced to its Pareto front (``opsft.claims.fit``). OPSFT (the claims' row, v at half
of GRPO's steps, trained for GRPO's steps: ``opsft_recipe``) and GRPO are placed against it: ``matched_gap`` is
their held-out accuracy minus the front's at their own training-set accuracy; ``gap`` is the plain difference with the claims' SFT run at its end, and
``equal_steps_gap`` the difference with that run at the arm's own step count (where SFT trains longer than GRPO,
as at ``regime``, its snapshot there; NaN if it has none).
Including step 0 lets an SFT stopped before it starts count: where SFT only loses accuracy, the front is the
base and the matched gap is the gain over the base.
"""

import math

import pytest

from ablations.claims import claims_row
from opsft.claims.arms import baseline, grid_rows, opsft_recipe
from opsft.claims.fit import frontier_at, matched_gap
from opsft.claims.measure import accuracies
from opsft.organism.build import build_organism


def fit_point(model, tokenizer, scale) -> tuple[float, float]:
    """(training-set accuracy, held-out in-domain accuracy) of a model, in %."""
    acc = accuracies(model, tokenizer, scale)
    return acc["train_set"], acc["in_domain"]


@pytest.mark.claim("X06")
def test_claim_matched_fit(claim, seed):
    """Held-out accuracy of OPSFT and GRPO against SFT's frontier at matched training-set accuracy."""
    grpo, sft = baseline("grpo", claim.scale, seed), baseline("sft", claim.scale, seed)
    org = build_organism(sft.organism)
    curves = {}  # SFT learning rate -> {step: fit point} at its checkpoints after step 0
    for row in grid_rows(claim.scale_name, claim.scale):
        if row["precision"] == claims_row(claim.scale)["precision"]:
            run = claim.run(baseline("sft", claim.scale, seed, row))
            curves[row["lr_sft"]] = {step: fit_point(run.load_model(step), org.tokenizer, claim.scale)
                                     for step in (*run.config.snapshot_steps, run.config.steps)}
    frontier = [fit_point(org.base, org.tokenizer, claim.scale), *(p for c in curves.values() for p in c.values())]
    sft_curve = curves[sft.optim.lr]
    for arm, cfg in (("opsft", opsft_recipe(sft, grpo, "sign")), ("grpo", grpo)):
        train_set, in_domain = fit_point(claim.run(cfg).load_model(), org.tokenizer, claim.scale)
        sft_at_steps = sft_curve.get(cfg.steps, (math.nan, math.nan))[1]
        measured = claim.record(arm, seed, matched_gap=matched_gap((train_set, in_domain), frontier),
                                sft_frontier=frontier_at(frontier, train_set), gap=in_domain - sft_curve[sft.steps][1],
                                equal_steps_gap=in_domain - sft_at_steps, train_set=train_set, in_domain=in_domain)
        assert abs(measured["matched_gap"]) <= 100 and 0 <= measured["sft_frontier"] <= 100
