"""Claim X02 (the Fisher abstract in GEO's related work): "Fisher identifies where gradients are concentrated, and
fixed sparse masks selected from the initial Fisher retain a large proportion of the improvement from full
training."

The Fisher is estimated "from its own samples": the first batches a run's source draws from the model it
starts from. The gradient (the run's own objective at initialization) is read off twice: on those same
batches, where its mass in the Fisher mask is partly by construction (both are squares of gradients of the
same sampled tokens), and on held-out batches, whose prompts none of the Fisher's batches holds and whose
samples are drawn with other step seeds, which is the prediction the claim makes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

import torch

from opsft.config import ObjectiveConfig, RunConfig
from opsft.masks import fisher_diagonal
from opsft.objectives import batch_logprobs, make_objective
from opsft.pretraining import build_organism
from opsft.runs import initial_model, make_source, run_tokenizer
from opsft.sources import RolloutSource, StaticSource

Tensors = dict[str, torch.Tensor]


class FisherEnergy(NamedTuple):
    """The diagonal Fisher F at theta_0, the gradient energy E on the batches F was estimated on, and the
    gradient energy on held-out batches (``heldout_source``)."""

    fisher: Tensors
    energy: Tensors
    heldout_energy: Tensors


def sequences(batch: Mapping[str, torch.Tensor]) -> Iterator[Tensors]:
    """Each sampled sequence of an on-policy batch alone, padding removed (so positions count from its first
    token, as in generation), with ``labels`` = its completion tokens and -100 on the prompt: the input
    ``opsft.masks.fisher_diagonal`` takes."""
    for ids, attention, completion in zip(batch["input_ids"], batch["attention_mask"], batch["mask"], strict=True):
        labels = torch.full_like(ids, -100)
        labels[1:] = torch.where(completion > 0, ids[1:], labels[1:])  # target t predicts token t + 1
        keep = attention.bool()
        yield {"input_ids": ids[keep][None], "attention_mask": attention[keep][None], "labels": labels[keep][None]}


def _squared_gradient(model: torch.nn.Module, objective: ObjectiveConfig,
                      batch: Mapping[str, torch.Tensor]) -> Tensors:
    """g^2 elementwise for g the gradient of ``objective`` on one batch, as the train loop computes it."""
    loss, _ = make_objective(objective)(batch_logprobs(model, batch), dict(batch))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {n: (torch.zeros_like(p) if g is None else g).float().square() for (n, p), g in zip(named, grads, strict=True)}


def gradient_energy(model: torch.nn.Module, objective: ObjectiveConfig,
                    batches: Iterable[Mapping[str, torch.Tensor]]) -> Tensors:
    """The gradient energy E_i = sum_b (d L_b / d theta_i)^2 of ``objective`` L_b on each batch b at the model's
    weights (float32; a ValueError when ``batches`` is empty)."""
    energy: Tensors = {}
    for batch in batches:
        for name, g2 in _squared_gradient(model, objective, batch).items():
            energy[name] = energy[name] + g2 if name in energy else g2
    if not energy:
        raise ValueError("gradient_energy: `batches` yielded no batch")
    return energy


def heldout_source(source: StaticSource | RolloutSource, batches: int) -> RolloutSource:
    """A copy of the on-policy ``source`` drawing only from P \\ U, its finite prompt set P less the prompts U of
    its steps 0 .. ``batches`` - 1 (those the Fisher is estimated on, compared by prompt text), so no batch
    of the copy shares a prompt with them. A batch of the copy holds min(prompts_per_step, |P \\ U|) prompts;
    a ValueError when P \\ U is empty, a TypeError for a source that does not sample the model (static data)."""
    if not isinstance(source, RolloutSource):
        raise TypeError(f"held-out on-policy batches need a rollout source, got {type(source).__name__} "
                        "(SourceConfig.kind must be 'rollout')")
    used = {e.prompt for step in range(batches) for e in source.prompts(step)}
    rest = [e for e in source.examples if e.prompt not in used]
    if not rest:
        raise ValueError(f"the first {batches} batches use all {len(source.examples)} prompts of the source: none "
                         "is left for held-out batches (raise SourceConfig.n_problems or lower the batches)")
    heldout = copy.copy(source)
    heldout.examples = rest
    return heldout


def fisher_and_gradient_energy(config: RunConfig, batches: int) -> FisherEnergy:
    """On the first ``batches`` on-policy batches of ``config``'s source (steps 0 .. batches - 1), sampled
    from its start model theta_0 (temperature as configured): the diagonal Fisher F_i =
    E_y~p_theta0[(d log p(y) / d theta_i)^2] over those sequences (``fisher_diagonal``, one sequence at a
    time) and the gradient energy E_i = sum_b (d L_b / d theta_i)^2 of the run's objective L_b
    (``gradient_energy``) on the same batches; and E on ``batches`` held-out batches: steps batches ..
    2 * batches - 1 (other sampling seeds) of ``heldout_source`` (no prompt of the Fisher's batches)."""
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    model = initial_model(config)
    source = make_source(config, model, build_organism(config.organism), run_tokenizer(config))
    drawn = [source.batch(model, step) for step in range(batches)]
    heldout = heldout_source(source, batches)
    held = [heldout.batch(model, step) for step in range(batches, 2 * batches)]
    fisher = fisher_diagonal(model, (seq for batch in drawn for seq in sequences(batch)))
    return FisherEnergy(fisher, gradient_energy(model, config.objective, drawn),
                        gradient_energy(model, config.objective, held))


def mass_in_mask(energy: Mapping[str, torch.Tensor], mask: Mapping[str, torch.Tensor]) -> tuple[float, float]:
    """(share of the total energy inside the mask, share of entries the mask holds): sum_{i in M} E_i / sum_i E_i
    and |M| / N, over every tensor of ``energy`` (a KeyError names a tensor the mask lacks)."""
    inside = total = kept = count = 0.0
    for name, e in energy.items():
        if name not in mask:
            raise KeyError(f"mask has no tensor {name!r}")
        m = mask[name].bool()
        inside += float(e.double()[m].sum())
        total += float(e.double().sum())
        kept += int(m.sum())
        count += m.numel()
    return (inside / total if total > 0 else float("nan")), kept / count


def gain_kept(masked: float, full: float, base: float) -> float:
    """(masked - base) / (full - base): the share of full training's gain a masked run keeps; NaN when full
    training gained nothing (there is then no gain to keep)."""
    return (masked - base) / (full - base) if full > base else float("nan")
