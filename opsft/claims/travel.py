"""How far, and along what, a run moved from where it started: the update Delta = theta_after - theta_before,
streamed tensor by tensor in float64 (claims X05 and C19).

- distance:      ||Delta||_2 over every floating parameter (tied weights counted once);
- share along s: cos^2(Delta, s) = <Delta, s>^2 / (||Delta||^2 ||s||^2), the share of the squared distance
                 that lies along the sign pattern s in {-1, 0, +1}^N (1 when every weight on s's support moved
                 the same amount in s's direction, the drift the ratchet predicts; about 2/pi for
                 half-normal magnitudes on the support; 0 when Delta is orthogonal to s);
- stable rank:   ||dW||_F^2 / ||dW||_2^2 of each layer matrix's update, averaged over matrices.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

import torch

from opsft.checkpoints import WeightSource
from opsft.diagnostics import stable_rank
from opsft.diagnostics.streaming import is_layer_matrix
from opsft.directions import paired_tensors


def distance(before: WeightSource, after: WeightSource) -> float:
    """||theta_after - theta_before||_2 over every floating parameter, accumulated in float64."""
    total = 0.0
    for _, tb, ta in paired_tensors(before, after):
        delta = ta.to(torch.float64) - tb.to(torch.float64)
        total += float((delta * delta).sum())
    return math.sqrt(total)


def share_along(before: WeightSource, after: WeightSource, signs: Mapping[str, torch.Tensor]) -> float:
    """cos^2(Delta, s) = <Delta, s>^2 / (||Delta||^2 ||s||^2) for the update Delta = after - before and a sign
    pattern ``signs`` (name -> tensor in {-1, 0, +1}, one entry per parameter); NaN when Delta or s is zero.
    A KeyError names a parameter that ``signs`` lacks, a ValueError one whose shape differs."""
    dot = delta_sq = signs_sq = 0.0
    for name, tb, ta in paired_tensors(before, after):
        if name not in signs:
            raise KeyError(f"share_along: the sign pattern has no entry for parameter {name!r}")
        s = signs[name].to(torch.float64)
        if s.shape != ta.shape:
            raise ValueError(f"share_along: sign pattern {name!r} has shape {list(s.shape)}, "
                             f"the parameter {list(ta.shape)}")
        delta = ta.to(torch.float64) - tb.to(torch.float64)
        dot += float((delta * s).sum())
        delta_sq += float((delta * delta).sum())
        signs_sq += float((s * s).sum())
    if delta_sq == 0 or signs_sq == 0:
        return math.nan
    return dot * dot / (delta_sq * signs_sq)


def mean_stable_rank(before: WeightSource, after: WeightSource) -> float:
    """Mean over layer matrices (GEO C.3: 2-D, embeddings excluded) of the stable rank ||dW||_F^2 / ||dW||_2^2
    of dW = W_after - W_before; NaN when no matrix moved."""
    ranks = [stable_rank(ta.to(torch.float64) - tb.to(torch.float64), name)
             for name, tb, ta in paired_tensors(before, after) if is_layer_matrix(name, ta)]
    ranks = [r for r in ranks if not math.isnan(r)]
    return statistics.fmean(ranks) if ranks else math.nan
