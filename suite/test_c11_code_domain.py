"""C11 (OPSFT, code results): "On code, Qwen3-4B trained on Eurus is scored with HumanEval+, MBPP+, and LCBv6.
From scratch, the means are GRPO 57.19 (20.3h), SFT 54.30 (9.8h), and OPSFT 58.07 (9.5h). Continued training on
a GRPO checkpoint sends SFT to 48.71 and OPSFT to 60.05."

The organism's Eurus is its ``code`` family (a one-line spec -> a small Python function), scored through
evalplus on held-out problems: a program counts when it passes the problem's tests and the extra "plus"
inputs. Every arm runs the calibration's recipe on the code family: GRPO, SFT on the teacher's code
trajectories, and OPSFT (SFT under the sign of GRPO's update at half its steps). The continued arms start
from GRPO's final weights and train as C06's do (7x the steps, the paper's 700 : 100), SFT unconstrained and
OPSFT along the whole GRPO update (the "original v").

Recorded as found: the base already writes most code programs correctly (``base.in_domain``), so a GRPO group
often has no reward variance and so no advantage; ``grpo.steps_with_gradient`` is the share of GRPO steps
with a nonzero gradient, and v's share of nonzero weights bounds what OPSFT can move.
"""

import statistics

import pytest

from opsft.claims.arms import (
    baseline,
    constrained,
    continued,
    on_family,
    opsft_recipe,
    paper_sft_length,
)
from opsft.claims.measure import code_accuracies
from opsft.pretraining import build_organism


def arms(scale_name, scale, seed):
    """The runs, all on the code family: the calibration's SFT and GRPO, OPSFT with v from that GRPO run, and
    lengthened SFT continued from GRPO, unconstrained and under the sign of its whole update."""
    grpo = on_family(baseline("grpo", scale, seed), "code")
    sft = on_family(baseline("sft", scale, seed), "code")
    sft_cont = continued(paper_sft_length(sft, grpo), grpo)
    return {"sft": sft, "grpo": grpo, "opsft": opsft_recipe(sft, grpo, "sign"), "sft_cont": sft_cont,
            "opsft_cont": constrained(sft_cont, grpo, "sign", direction_step=None)}


@pytest.mark.claim("C11")
def test_claim_code_domain(claim, seed):
    """Code accuracy through evalplus: OPSFT > SFT from the base, and again when both continue from GRPO."""
    configs = arms(claim.scale_name, claim.scale, seed)
    sft = configs["sft"]
    org = build_organism(sft.organism)
    runs = {arm: claim.run(cfg) for arm, cfg in configs.items()}
    models = {"base": org.base, **{arm: result.load_model() for arm, result in runs.items()}}
    for arm, model in models.items():
        measured = claim.record(arm, seed, **code_accuracies(model, org.tokenizer, claim.scale,
                                                             sft.source.n_problems))
        assert all(0 <= v <= 100 for v in measured.values()), f"{arm}: accuracy outside [0, 100]: {measured}"
    steps = runs["grpo"].metrics
    claim.record("grpo", seed, steps_with_gradient=statistics.fmean(m["grad_norm"] > 0 for m in steps),
                 mean_reward=100 * statistics.fmean(m["reward"] for m in steps))
