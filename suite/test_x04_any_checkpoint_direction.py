"""X04 (our own): v and every diagnostic can be computed between any two Hugging Face checkpoint folders
(sharded safetensors, streamed one tensor at a time), so that OPSFT can start from any released RL model and
its base.

The base model (the organism's, or the recipe's model folder) and the GRPO run (at half its steps and at the
end) are written as sharded HF folders (``save_pretrained``, several shards and an index). v = sign(theta_GRPO - theta_base) under the
bf16-visible rule is extracted from the folders and from the models in memory; ``streamed.sign_agreement`` is
the share of weights on which the two agree (``v_nonzero``: the share v marks, near 0 when GRPO barely moved,
as at smoke scale). Every diagnostic of ``opsft diagnose`` (endpoint, trajectory,
cosines, locations) is computed both ways too; ``streamed.diagnostics_difference`` is the largest absolute
difference between the two results (provenance aside).
"""

import pytest

from opsft.checkpoints import save_sharded
from opsft.claims.arms import baseline
from opsft.claims.measure import largest_difference, sign_agreement
from opsft.diagnostics import compute_all
from opsft.directions import extract
from opsft.runs import base_model

SHARDS = 3


def arms(scale_name, scale, seed):
    """The runs: the calibration's GRPO run, whose half-way and final weights are written as HF folders."""
    return {"grpo": baseline("grpo", scale, seed)}


@pytest.mark.claim("X04")
def test_claim_any_checkpoint_direction(claim, seed, tmp_path):
    """v and the diagnostics from sharded HF folders equal those from the same models in memory."""
    grpo = arms(claim.scale_name, claim.scale, seed)["grpo"]
    run = claim.run(grpo)
    models = [base_model(grpo), run.load_model(grpo.steps // 2), run.load_model()]
    folders = [tmp_path / f"snapshot{i}" for i in range(len(models))]  # the labels diagnostics give models
    shards = [save_sharded(model, folder, SHARDS) for model, folder in zip(models, folders, strict=True)]
    v = extract(folders[0], folders[-1], rule="bf16")
    agreement = sign_agreement(v, extract(models[0], models[-1], rule="bf16"))
    streamed, in_memory = ({k: r for k, r in compute_all(s).items() if k != "provenance"} for s in (folders, models))
    measured = claim.record("streamed", seed, sign_agreement=agreement, v_nonzero=v.fraction_nonzero,
                            diagnostics_difference=largest_difference(streamed, in_memory), shards=min(shards))
    assert measured["shards"] >= 2, f"the folders were not sharded: {shards} files"
    assert measured["diagnostics_difference"] <= 1e-9, "diagnostics from folders differ from those in memory"
