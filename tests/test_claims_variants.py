"""Uncached claim arms (X02, X03): the same training as the run graph, plus a location mask and step hooks."""

import pytest
import torch
from safetensors.torch import load_file

from ablations.claims import scale_profile
from opsft.claims.arms import baseline
from opsft.claims.variants import train_variant, variant_model
from opsft.runs import run

pytestmark = pytest.mark.slow

OPD = baseline("opd", scale_profile("smoke"), seed=0)  # the OPD arm X03 extrapolates, at smoke scale


def test_without_mask_or_hooks_a_variant_trains_exactly_the_cached_run(cache_env):
    cached = load_file(str(run(OPD).snapshot() / "model.safetensors"))
    state = train_variant(OPD, keep=[OPD.steps])[OPD.steps]
    assert all(torch.equal(state[name], tensor) for name, tensor in cached.items())


def test_a_location_mask_freezes_the_weights_outside_it_and_hooks_see_every_step(cache_env):
    base = run(OPD).load_model(0)
    masks = {n: torch.rand(p.shape, generator=torch.Generator().manual_seed(0)) < 0.5
             for n, p in base.named_parameters()}
    seen = []
    states = train_variant(OPD, masks=masks, hooks=[lambda step, model: seen.append(step)], keep=[1, 3])
    assert seen == list(range(1, OPD.steps + 1)) and sorted(states) == [1, 3]
    trained = dict(variant_model(OPD, states[3]).named_parameters())
    for name, before in base.named_parameters():
        outside = ~masks[name]
        assert torch.equal(trained[name][outside], before[outside]), f"{name} moved outside the mask"
    assert any(not torch.equal(trained[n][masks[n]], p[masks[n]]) for n, p in base.named_parameters())
    with pytest.raises(ValueError, match="outside"):
        train_variant(OPD, keep=[OPD.steps + 1])
