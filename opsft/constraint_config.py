"""From a ConstraintConfig to a live constraint: resolve the run that supplies v, extract v (or the
subspace bases) from its snapshots, and hook the constraint onto the optimizer."""

from __future__ import annotations

from pathlib import Path

import torch

from opsft.config import ConstraintConfig
from opsft.constraints import ConstraintHandle, constrain
from opsft.directions import extract
from opsft.masks import subspace_bases


def constraint_from_config(cfg: ConstraintConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                           cache: Path | None = None) -> ConstraintHandle:
    """Hook ``cfg.mode`` onto ``optimizer`` with v = sign(theta_step - theta_0) of ``cfg.direction_run``
    (bf16-visible or exact rule), or, for ``subspace``, the top-``rank`` right singular vectors of that
    cumulative update."""
    from opsft.runs import run  # the run graph depends on this module, not the other way round

    source = run(cfg.direction_run, cache)
    before, after = source.snapshot(0), source.snapshot(cfg.direction_step)
    if cfg.mode == "subspace":
        return constrain(optimizer, model, mode="subspace", rank=cfg.rank,
                         bases=subspace_bases(before, after, rank=cfg.rank))
    direction = extract(before, after, rule=cfg.rule, step=cfg.direction_step)
    return constrain(optimizer, model, direction, mode=cfg.mode, seed=cfg.seed, reset_moments=cfg.reset_moments,
                     match_kept_fraction=cfg.match_kept_fraction)
