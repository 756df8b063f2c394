"""From a ConstraintConfig to a live constraint: extract v (or the subspace bases) from the snapshots of the run
that supplies it (resolved by the caller, ``opsft.runs``), and hook the constraint onto the optimizer."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch

from opsft.config import ConstraintConfig
from opsft.constraints import SUBSPACE_MODES, ConstraintHandle, constrain
from opsft.directions import extract
from opsft.masks import subspace_bases


class Snapshots(Protocol):
    """A finished run whose weights can be read at a step (``opsft.runs.RunResult``)."""

    def snapshot(self, step: int | None = None) -> Path:
        """The folder of the weights at ``step`` (None: the final weights)."""


def constraint_from_config(cfg: ConstraintConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                           source: Snapshots) -> ConstraintHandle:
    """Hook ``cfg.mode`` onto ``optimizer`` with v = sign(theta_step - theta_0) of ``source``, the finished run of
    ``cfg.direction_run``
    (bf16-visible or exact rule), or, for the subspace modes, the top-``rank`` right singular vectors of that
    cumulative update."""
    before, after = source.snapshot(0), source.snapshot(cfg.direction_step)
    if cfg.mode in SUBSPACE_MODES:
        return constrain(optimizer, model, mode=cfg.mode, rank=cfg.rank,
                         bases=subspace_bases(before, after, rank=cfg.rank))
    direction = extract(before, after, rule=cfg.rule, step=cfg.direction_step)
    return constrain(optimizer, model, direction, mode=cfg.mode, seed=cfg.seed, reset_moments=cfg.reset_moments,
                     match_kept_fraction=cfg.match_kept_fraction)
