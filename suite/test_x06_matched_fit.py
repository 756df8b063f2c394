"""X06 (our own; seen in ``research/tiny-scale-probe.md``): "every accuracy comparison also made at matched
training-set accuracy, so that 'beats SFT' cannot mean 'fits the SFT set less'; in a tiny-scale probe a
memorising SFT's apparent gap to GRPO vanished at matched fit."

SFT's frontier: (training-set accuracy, held-out in-domain accuracy) at every checkpoint (step 0, i.e. the
base, each snapshot, the end) of the SFT runs at each learning rate of the claims' precision (only the
claims' row at smoke), reduced to its Pareto front (``opsft.claims.fit``). OPSFT (the claims' row, v at half
of GRPO's steps) and GRPO are placed against it: ``matched_gap`` is their held-out accuracy minus the front's
at their own training-set accuracy; ``gap`` is the plain difference with the claims' SFT run at its end.
Including step 0 lets an SFT stopped before it starts count: where SFT only loses accuracy, the front is the
base and the matched gap is the gain over the base.
"""

import pytest

from ablations.claims import ROW
from opsft.claims.arms import baseline, constrained, grid_rows
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
    curves = {}  # SFT learning rate -> fit points at its checkpoints after step 0
    for row in grid_rows(claim.scale_name, claim.scale):
        if row["precision"] == ROW["precision"]:
            run = claim.run(baseline("sft", claim.scale, seed, row))
            curves[row["lr_sft"]] = [fit_point(run.load_model(step), org.tokenizer, claim.scale)
                                     for step in (*run.config.snapshot_steps, run.config.steps)]
    frontier = [fit_point(org.base, org.tokenizer, claim.scale), *(p for curve in curves.values() for p in curve)]
    sft_end = curves[sft.optim.lr][-1]
    for arm, cfg in (("opsft", constrained(sft, grpo, "sign")), ("grpo", grpo)):
        train_set, in_domain = fit_point(claim.run(cfg).load_model(), org.tokenizer, claim.scale)
        measured = claim.record(arm, seed, matched_gap=matched_gap((train_set, in_domain), frontier),
                                sft_frontier=frontier_at(frontier, train_set), gap=in_domain - sft_end[1],
                                train_set=train_set, in_domain=in_domain)
        assert abs(measured["matched_gap"]) <= 100 and 0 <= measured["sft_frontier"] <= 100
