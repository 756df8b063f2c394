"""Claim X02 (the Fisher abstract in GEO's related work): "Fisher identifies where gradients are concentrated, and
fixed sparse masks selected from the initial Fisher retain a large proportion of the improvement from full
training."

Both quantities are read off the same on-policy batches: the first batches a run's source draws from the
model it starts from, so the Fisher is estimated "from its own samples" and the gradient is the run's own
objective at initialization.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from opsft.config import RunConfig
from opsft.masks import fisher_diagonal
from opsft.objectives import batch_logprobs, make_objective
from opsft.pretraining import build_organism
from opsft.runs import initial_model, make_source, run_tokenizer

Tensors = dict[str, torch.Tensor]


def sequences(batch: Mapping[str, torch.Tensor]) -> Iterator[Tensors]:
    """Each sampled sequence of an on-policy batch alone, padding removed (so positions count from its first
    token, as in generation), with ``labels`` = its completion tokens and -100 on the prompt: the input
    ``opsft.masks.fisher_diagonal`` takes."""
    for ids, attention, completion in zip(batch["input_ids"], batch["attention_mask"], batch["mask"], strict=True):
        labels = torch.full_like(ids, -100)
        labels[1:] = torch.where(completion > 0, ids[1:], labels[1:])  # target t predicts token t + 1
        keep = attention.bool()
        yield {"input_ids": ids[keep][None], "attention_mask": attention[keep][None], "labels": labels[keep][None]}


def _squared_gradient(model: torch.nn.Module, config: RunConfig, batch: Mapping[str, torch.Tensor]) -> Tensors:
    """g^2 elementwise for g the gradient of the run's objective on one batch, as the train loop computes it."""
    loss, _ = make_objective(config.objective)(batch_logprobs(model, batch), dict(batch))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {n: (torch.zeros_like(p) if g is None else g).float().square() for (n, p), g in zip(named, grads, strict=True)}


def fisher_and_gradient_energy(config: RunConfig, batches: int) -> tuple[Tensors, Tensors]:
    """On the first ``batches`` on-policy batches of ``config``'s source, sampled from its start model
    theta_0 (temperature as configured): the diagonal Fisher F_i = E_y~p_theta0[(d log p(y) / d theta_i)^2]
    over those sequences (``fisher_diagonal``, one sequence at a time), and the gradient energy
    E_i = sum_b (d L_b / d theta_i)^2 of the run's own objective L_b on each batch b at theta_0."""
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    model = initial_model(config)
    source = make_source(config, model, build_organism(config.organism), run_tokenizer(config))
    drawn = [source.batch(model, step) for step in range(batches)]
    fisher = fisher_diagonal(model, (seq for batch in drawn for seq in sequences(batch)))
    energy = {n: torch.zeros_like(f) for n, f in fisher.items()}
    for batch in drawn:
        for name, g2 in _squared_gradient(model, config, batch).items():
            energy[name] += g2
    return fisher, energy


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
