"""Each rank's share of the global batch, weighted so that the gradient average DDP and FSDP2 take equals
the gradient of the global batch's loss.

The inner source makes the whole global batch on every rank (it is a pure function of seed and step, so
the ranks agree); each rank keeps rows ``[r * B/W, (r + 1) * B/W)``. Gradient averaging computes
(1/W) sum_r grad L_r. For a loss that is a mean over the batch's trained tokens, L = sum_r S_r / N with
S_r the summed token losses of rank r, while L_r = S_r / n_r; weighting L_r by w_r = W n_r / N makes the
average exact: (1/W) sum_r w_r grad L_r = grad (sum_r S_r / N). For a mean over sequences (GRPO/OPD with
``seq_mean``) every rank holds B/W sequences and w_r = 1.
"""

from __future__ import annotations

from typing import Literal

import torch

from opsft.config import ObjectiveConfig
from opsft.constraints import unwrap_model
from opsft.distributed.world import World, split_rows
from opsft.objectives import Objective
from opsft.train import Source

Normalizer = Literal["tokens", "sequences"]
LOSS_WEIGHT = "loss_weight"


def loss_normalizer(objective: ObjectiveConfig) -> Normalizer:
    """What the objective's loss divides by (see opsft.objectives): ``sequences`` for GRPO/OPD with
    ``seq_mean`` aggregation, ``tokens`` for SFT, DFT and ``token_sum`` (a mean over all trained tokens)."""
    if objective.name in ("grpo", "opd") and objective.aggregation == "seq_mean":
        return "sequences"
    return "tokens"


def rank_weight(mask: torch.Tensor, rows: slice, world_size: int, normalizer: Normalizer) -> float:
    """w_r = W n_r / N for a token mean (n_r: trained tokens in this rank's ``rows`` of the (B, T) ``mask``,
    N: in the whole batch; 1 when N = 0), 1 for a sequence mean over equal shares."""
    if normalizer == "sequences":
        return 1.0
    total = float(mask.sum())
    return world_size * float(mask[rows].sum()) / total if total > 0 else 1.0


class ShardedSource:
    """This rank's rows of ``inner``'s global batch, on the rank's device, with ``batch["loss_weight"]``
    (see the module docstring); wrap the objective with :func:`weighted` to apply it."""

    def __init__(self, inner: Source, world: World, normalizer: Normalizer = "tokens") -> None:
        if normalizer not in ("tokens", "sequences"):
            raise ValueError(f"normalizer must be 'tokens' or 'sequences', got {normalizer!r}")
        self.inner, self.world, self.normalizer = inner, world, normalizer

    def batch(self, model: torch.nn.Module, step: int) -> dict[str, torch.Tensor]:
        """The global batch of ``step`` from the inner source (sampled by the unwrapped model), cut to this
        rank's rows; a ValueError when the world size does not divide its row count."""
        full = self.inner.batch(unwrap_model(model), step)
        per = split_rows(full["input_ids"].shape[0], self.world.size, f"global batch of step {step + 1}")
        rows = slice(self.world.rank * per, (self.world.rank + 1) * per)
        local = {key: value[rows].to(self.world.device) for key, value in full.items()}
        weight = rank_weight(full["mask"], rows, self.world.size, self.normalizer)
        local[LOSS_WEIGHT] = torch.tensor(weight, dtype=torch.float64, device=self.world.device)
        return local


def weighted(objective: Objective) -> Objective:
    """``objective`` with its loss multiplied by ``batch["loss_weight"]``, rounded to the loss's dtype
    (metrics unchanged)."""

    def loss(logp: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        value, metrics = objective(logp, batch)
        return value * batch[LOSS_WEIGHT].to(value.dtype), metrics

    return loss
