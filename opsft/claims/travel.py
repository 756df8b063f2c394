"""How far, and along what, a run moved from where it started: the update Delta = theta_after - theta_before,
streamed tensor by tensor in float64 (claims X05 and C19).

- distance:      ||Delta||_2 over every floating parameter (tied weights counted once);
- share along s: cos^2(Delta, s) = <Delta, s>^2 / (||Delta||^2 ||s||^2), the share of the squared distance
                 that lies along the sign pattern s in {-1, 0, +1}^N (1 when every weight on s's support moved
                 the same amount in s's direction, the drift the ratchet predicts; about 2/pi for
                 half-normal magnitudes on the support; 0 when Delta is orthogonal to s);
- agreement on s's support: |{i : s_i != 0, sign(Delta_i) = s_i}| / |{i : s_i != 0}|, the share of the weights
                 s marks on which the update took s's sign (about 1/2 when the two are unrelated and every
                 marked weight moved; 1 for a drift along s);
- stable rank:   ||dW||_F^2 / ||dW||_2^2 of each layer matrix's update, averaged over matrices;
- pattern stable rank: ||S||_F^2 / ||S||_2^2 of a sign pattern S's layer matrices, how coherent a drift along S
                 is (a low stable rank moves every input along few directions);
- drifted:       theta + (d / ||s||) s, the ratchet's limit with no training signal at all: every weight s marks
                 moved by the same amount in s's sign, ||Delta|| = d.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping

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


def _updates_with_signs(before: WeightSource, after: WeightSource, signs: Mapping[str, torch.Tensor],
                        what: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(Delta, s)`` per parameter, both float64; a KeyError names a parameter that ``signs`` lacks, a
    ValueError one whose shape differs (``what``: the caller's name, for the message)."""
    for name, tb, ta in paired_tensors(before, after):
        if name not in signs:
            raise KeyError(f"{what}: the sign pattern has no entry for parameter {name!r}")
        s = signs[name].to(torch.float64)
        if s.shape != ta.shape:
            raise ValueError(f"{what}: sign pattern {name!r} has shape {list(s.shape)}, "
                             f"the parameter {list(ta.shape)}")
        yield ta.to(torch.float64) - tb.to(torch.float64), s


def share_along(before: WeightSource, after: WeightSource, signs: Mapping[str, torch.Tensor]) -> float:
    """cos^2(Delta, s) = <Delta, s>^2 / (||Delta||^2 ||s||^2) for the update Delta = after - before and a sign
    pattern ``signs`` (name -> tensor in {-1, 0, +1}, one entry per parameter); NaN when Delta or s is zero.
    A KeyError names a parameter that ``signs`` lacks, a ValueError one whose shape differs."""
    dot = delta_sq = signs_sq = 0.0
    for delta, s in _updates_with_signs(before, after, signs, "share_along"):
        dot += float((delta * s).sum())
        delta_sq += float((delta * delta).sum())
        signs_sq += float((s * s).sum())
    if delta_sq == 0 or signs_sq == 0:
        return math.nan
    return dot * dot / (delta_sq * signs_sq)


def travel_per_weight(before: WeightSource, after: WeightSource, signs: Mapping[str, torch.Tensor]) -> float:
    """<Delta, s> / ||s||^2: how far, on average, each weight a sign pattern marks moved along its sign (the
    drift law's measured travel, ``opsft.claims.drift_law``); NaN for an all-zero pattern; errors as in
    ``share_along``."""
    dot = support = 0.0
    for delta, s in _updates_with_signs(before, after, signs, "travel_per_weight"):
        dot += float((delta * s).sum())
        support += float((s * s).sum())
    return dot / support if support else math.nan


def agreement_on_support(before: WeightSource, after: WeightSource, signs: Mapping[str, torch.Tensor]) -> float:
    """|{i : s_i != 0, sign(Delta_i) = s_i}| / |{i : s_i != 0}|: on the weights a sign pattern ``signs`` marks,
    the share whose update Delta = after - before (exact, no bf16 rounding) has the pattern's sign. A weight that
    did not move counts as disagreeing. NaN for an all-zero pattern; errors as in ``share_along``."""
    agree = support = 0
    for delta, s in _updates_with_signs(before, after, signs, "agreement_on_support"):
        marked = s != 0
        support += int(marked.sum())
        agree += int((marked & (torch.sign(delta) == s)).sum())
    return agree / support if support else math.nan


def mean_stable_rank(before: WeightSource, after: WeightSource) -> float:
    """Mean over layer matrices (GEO C.3: 2-D, embeddings excluded) of the stable rank ||dW||_F^2 / ||dW||_2^2
    of dW = W_after - W_before; NaN when no matrix moved."""
    ranks = [stable_rank(ta.to(torch.float64) - tb.to(torch.float64), name)
             for name, tb, ta in paired_tensors(before, after) if is_layer_matrix(name, ta)]
    ranks = [r for r in ranks if not math.isnan(r)]
    return statistics.fmean(ranks) if ranks else math.nan



def share_in_subspace(before: WeightSource, after: WeightSource, bases: Mapping[str, torch.Tensor]) -> float:
    """Share of the update's squared Frobenius norm that lies in the right subspaces ``bases`` (name -> V_K, with
    orthonormal columns): sum ||dW V_K V_K^T||_F^2 / sum ||dW||_F^2 over the weights with a basis, dW = W_after -
    W_before in float64. 1 for an update inside the subspaces (C19: is the projected run's update where it was
    projected?), about K / in for a random one; NaN when none of those weights moved."""
    inside = total = 0.0
    for name, tb, ta in paired_tensors(before, after):
        if name in bases:
            dw, basis = ta.to(torch.float64) - tb.to(torch.float64), bases[name].to(torch.float64)
            inside += float(torch.linalg.matrix_norm(dw @ basis) ** 2)  # ||dW V V^T||_F = ||dW V||_F
            total += float(torch.linalg.matrix_norm(dw) ** 2)
    return inside / total if total > 0 else math.nan


def rank_below(stable_rank_value: float, default: int) -> int:
    """GEO section 4.2's K, "slightly below the effective dimension observed near the projection point": the
    largest whole number not above the measured stable rank (at least 1); ``default`` when it is NaN."""
    return default if math.isnan(stable_rank_value) else max(1, math.floor(stable_rank_value))


def pattern_stable_rank(signs: Mapping[str, torch.Tensor]) -> float:
    """Mean over layer matrices (2-D, embeddings excluded) of the stable rank ||S||_F^2 / ||S||_2^2 of a sign
    pattern S itself, i.e. of a uniform drift along it: low for a coherent pattern (sign(a b^T) has stable rank
    1), about min(m, n) / (1 + sqrt(min / max))^2 for independent random signs. NaN when no matrix is marked."""
    ranks = [stable_rank(t.to(torch.float64), name) for name, t in sorted(signs.items()) if is_layer_matrix(name, t)]
    ranks = [r for r in ranks if not math.isnan(r)]
    return statistics.fmean(ranks) if ranks else math.nan

@torch.no_grad()
def drifted(model: torch.nn.Module, signs: Mapping[str, torch.Tensor], length: float) -> torch.nn.Module:
    """``model`` moved in place to theta + (length / ||s||) s for the sign pattern ``signs`` (name -> tensor in
    {-1, 0, +1} per named parameter; tied weights once): a uniform drift along s whose length ||Delta||_2 is
    ``length``; a zero length leaves it as it is. A KeyError names a parameter the pattern lacks; a ValueError a
    negative length, or a positive one along an all-zero pattern."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(signs))
    if missing:
        raise KeyError(f"drifted: the sign pattern has no entry for parameter {missing[0]!r}")
    if not length >= 0:
        raise ValueError(f"drifted: length must be >= 0, got {length}")
    if length == 0:
        return model
    norm = math.sqrt(sum(float(signs[n].to(torch.float64).abs().sum()) for n in params))
    if norm == 0:
        raise ValueError("drifted: the sign pattern is zero everywhere, so it has no direction to drift along")
    step = length / norm
    for name, p in params.items():
        p.add_(signs[name].to(device=p.device, dtype=torch.float64).mul(step).to(p.dtype))
    return model
