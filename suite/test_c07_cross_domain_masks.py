"""C07 (OPSFT Fig 4): "Overlap of update locations is about 0.4 both for DAPO versus DeepMath and for the code
set Eurus. Direction cosine inside math is only about 0.2. OPSFT trained on DeepMath with the DAPO direction is
slightly stronger than OPSFT that uses DeepMath's own direction. Swap in the Eurus direction and math gets
clearly worse. Same-domain masks transfer. Cross-domain masks do not."

The organism's DeepMath, DAPO and Eurus are the task families ``arith`` (math-A), ``arith_alt`` (math-B) and
``code``. Each runs the calibration's GRPO recipe; v of each is the bf16-visible sign of its update at half
its steps (what OPSFT uses). ``math_ab`` / ``math_code`` compare v(math-A) with v(math-B) / v(code): Jaccard
of locations, cosine of the sign vectors, and cosine of the raw updates (``opsft.compare``). OPSFT then
trains on math-A's teacher trajectories with each v (arms ``own``, ``other_math``, ``code``).

Recorded as found, not hidden: the base already solves most code problems, so a code GRPO group often has no
reward variance and no advantage; ``code.grpo_steps_with_gradient`` (share of steps with a nonzero gradient)
and ``code.v_nonzero`` (share of weights v marks) say how much direction that run produced. Without a
gradient AdamW's weight decay still shrinks every weight, theta <- theta (1 - lr wd), so such a v is -sign(theta)
on the few weights that crossed a bf16 rounding boundary, the same in every family: it then carries no domain.
A v with almost no nonzero entries freezes OPSFT near the base, which is then what ``code.in_domain`` measures.
"""

import statistics

import pytest

from opsft.claims.arms import baseline, on_family, opsft_recipe
from opsft.claims.measure import accuracies
from opsft.claims.movement import record_in_domain
from opsft.compare import compare_checkpoints
from opsft.pretraining import build_organism

FAMILIES = {"own": "arith", "other_math": "arith_alt", "code": "code"}


def arms(scale_name, scale, seed):
    """The runs: the calibration's GRPO run on each family (``grpo_<arm>``, the sources of v), and OPSFT on math-A's
    trajectories with v from each (``<arm>``)."""
    grpo, sft = baseline("grpo", scale, seed), baseline("sft", scale, seed)
    sources = {arm: on_family(grpo, family) for arm, family in FAMILIES.items()}
    return {**{f"grpo_{arm}": source for arm, source in sources.items()},
            **{arm: opsft_recipe(sft, source, "sign") for arm, source in sources.items()}}


@pytest.mark.claim("C07")
def test_claim_cross_domain_masks(claim, seed):
    """Overlap and cosine of v from math-A, math-B and code; OPSFT accuracy on math-A with each v."""
    configs = arms(claim.scale_name, claim.scale, seed)
    org = build_organism(configs["own"].organism)
    record_in_domain(claim, seed, {"base": org.base}, org.tokenizer)  # the start both OPSFT arms moved from
    sources = {arm: configs[f"grpo_{arm}"] for arm in FAMILIES}
    step = sources["own"].steps // 2
    snapshots = {arm: (claim.run(cfg).snapshot(0), claim.run(cfg).snapshot(step)) for arm, cfg in sources.items()}
    for pair, other in (("math_ab", "other_math"), ("math_code", "code")):
        overall = compare_checkpoints(*snapshots["own"], *snapshots[other], rule="bf16")["overall"]
        claim.record(pair, seed, jaccard=overall["jaccard"], cosine=overall["sign_cosine"],
                     delta_cosine=overall["delta_cosine"])
        claim.record(other, seed, v_nonzero=overall["frac_b"])
    claim.record("own", seed, v_nonzero=overall["frac_a"])
    code_steps = claim.run(sources["code"]).metrics
    claim.record("code", seed, grpo_mean_reward=100 * statistics.fmean(m["reward"] for m in code_steps),
                 grpo_steps_with_gradient=statistics.fmean(m["grad_norm"] > 0 for m in code_steps))
    for arm in FAMILIES:
        measured = claim.record(arm, seed, **accuracies(claim.run(configs[arm]).load_model(), org.tokenizer,
                                                        claim.scale))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
