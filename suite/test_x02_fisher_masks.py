"""X02 (the Fisher abstract, GEO's related work): "Fisher identifies where gradients are concentrated, and fixed
sparse masks selected from the initial Fisher retain a large proportion of the improvement from full training."

On the organism's RL run (the calibration's GRPO): the diagonal Fisher of the base from its own samples (the
run's first FISHER_BATCHES on-policy batches) and the GRPO gradient at the base. ``fisher.heldout_mass_excess``
is the share of the gradient energy sum g^2 inside the top-RHO Fisher mask minus the share of weights the mask
holds, the gradient taken on FISHER_BATCHES held-out batches: other prompts (none of the Fisher's batches
holds them) sampled with other seeds (``opsft.claims.fisher.heldout_source``); > 0: gradients concentrate
where the Fisher, estimated elsewhere, is large. ``heldout_gradient_mass`` is its first term.
``fisher.mass_excess`` (kept for continuity, ``gradient_mass`` its first term) is the same with the gradient on
the Fisher's own batches, where part of the excess is by construction. The mask is then fixed and GRPO
retrained under it (``masked``, uncached); ``fisher.gain_kept`` = (masked - base) / (full - base) held-out
accuracy, NaN when full GRPO gained nothing over the base, as on the organism it may (then there is no gain to
keep, and the raw accuracies beside it say so); ``gain_kept_train`` the same on the training set.

RHO = 0.2 was fixed before running: about the share of weights the organism's GRPO run visibly updates
(results/organism.md: 21.9%), so the mask is as sparse as RL's own footprint.
"""

import pytest

from opsft.claims.arms import baseline
from opsft.claims.fisher import fisher_and_gradient_energy, gain_kept, mass_in_mask
from opsft.claims.measure import accuracies
from opsft.claims.variants import train_variant, variant_model
from opsft.masks import top_fraction
from opsft.pretraining import build_organism

RHO = 0.2
FISHER_BATCHES = 2


def arms(scale_name, scale, seed):
    """The runs: the calibration's GRPO run (``full``). GRPO under the Fisher mask (``masked``) is retrained
    uncached (``opsft.claims.variants``), not a run of the cache."""
    return {"full": baseline("grpo", scale, seed)}


@pytest.mark.claim("X02")
def test_claim_fisher_masks(claim, seed):
    """Held-out gradient energy concentrates in the Fisher mask; GRPO under that fixed mask keeps over half the
    gain."""
    grpo = arms(claim.scale_name, claim.scale, seed)["full"]
    org = build_organism(grpo.organism)
    fisher, energy, heldout_energy = fisher_and_gradient_energy(grpo, FISHER_BATCHES)
    mask = top_fraction(fisher, RHO)
    mass, share = mass_in_mask(energy, mask)
    heldout_mass, _ = mass_in_mask(heldout_energy, mask)
    masked = variant_model(grpo, train_variant(grpo, masks=mask, keep=[grpo.steps])[grpo.steps])
    models = {"base": org.base, "full": claim.run(grpo).load_model(), "masked": masked}
    acc = {arm: claim.record(arm, seed, **accuracies(model, org.tokenizer, claim.scale))
           for arm, model in models.items()}
    claim.record("fisher", seed, mass_excess=mass - share, gradient_mass=mass, mask_share=share,
                 heldout_mass_excess=heldout_mass - share, heldout_gradient_mass=heldout_mass,
                 gain_kept=gain_kept(*(acc[arm]["in_domain"] for arm in ("masked", "full", "base"))),
                 gain_kept_train=gain_kept(*(acc[arm]["train_set"] for arm in ("masked", "full", "base"))))
    assert RHO <= share < RHO + 0.05, f"the Fisher mask holds {share:.3f} of the weights, asked for {RHO}"
