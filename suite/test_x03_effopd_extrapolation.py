"""X03 (the EffOPD abstract, GEO's related work): "EffOPD, a plug-and-play acceleration method that speeds up OPD
by adaptively selecting an extrapolation step size and moving along the current update direction [...] achieves
an average training acceleration of 3x while maintaining comparable final performance."

EffOPD is ``opsft.constraints.Extrapolation`` on the calibration's OPD run, trained again uncached with it as a
step-end hook: at power-of-two steps it tries theta <- theta + a (theta - theta_0) on the attention and MLP
weights (a = 2 first), keeps the move when greedy accuracy on the training prompts rises (then a <- a / (1 + a))
and rolls it back otherwise. Both runs are scored on held-out problems at the same stages (a quarter, half,
three quarters, all steps); ``effopd.speedup`` = OPD's steps / EffOPD's steps to reach OPD's final accuracy
(``opsft.claims.measure.speedup``; when EffOPD never reaches it, an upper bound below 1).
"""

import pytest

from opsft.claims.arms import baseline
from opsft.claims.measure import accuracies, speedup, stage_steps
from opsft.claims.variants import train_variant, variant_model
from opsft.constraints import Extrapolation
from opsft.organism import tasks
from opsft.organism.accuracy import accuracy
from opsft.pretraining import build_organism


def arms(scale_name, scale, seed):
    """The runs: the calibration's OPD run. EffOPD (``effopd``) is retrained uncached with the extrapolation hook
    (``opsft.claims.variants``), not a run of the cache."""
    return {"opd": baseline("opd", scale, seed)}


@pytest.mark.claim("X03")
def test_claim_effopd_extrapolation(claim, seed):
    """EffOPD reaches OPD's final held-out accuracy in fewer steps (registered: > 1.5x faster)."""
    opd = arms(claim.scale_name, claim.scale, seed)["opd"]
    org = build_organism(opd.organism)
    reference = claim.run(opd)
    validation = tasks.generate(opd.source.family, "train", min(claim.scale["eval_n"], opd.source.n_problems), 0)
    extrapolation = Extrapolation(org.base, lambda model: accuracy(model, org.tokenizer, validation))
    stages = stage_steps(reference)[1:]
    states = train_variant(opd, hooks=[extrapolation.on_step_end], keep=stages)
    models = {"opd": reference.load_model, "effopd": lambda step: variant_model(opd, states[step])}
    scores = {arm: {step: accuracies(load(step), org.tokenizer, claim.scale) for step in stages}
              for arm, load in models.items()}
    for arm, by_step in scores.items():
        claim.record(arm, seed, **by_step[stages[-1]])
    curves = {arm: {step: acc["in_domain"] for step, acc in by_step.items()} for arm, by_step in scores.items()}
    kept = sum(was_kept for _, _, was_kept in extrapolation.history)
    measured = claim.record("effopd", seed, speedup=speedup(curves["opd"], curves["effopd"]),
                            extrapolations_kept=kept, extrapolations_tried=len(extrapolation.history))
    assert measured["speedup"] > 0 and 0 <= kept <= len(extrapolation.history)
