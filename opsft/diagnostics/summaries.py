"""Whole-checkpoint summaries for the claims suite: the endpoint PNT diagnostics of a pair (GEO section 3,
claim C16) and the cumulative-update trajectory of a snapshot sequence (GEO section 4, claims C17/C18).

Streamed as in ``opsft.diagnostics.streaming``: at most two loaded tensors at once, plus float64 working
copies and the factors (``opsft.diagnostics.factors``) of the matrix being analysed: each matrix is
factorized once and every metric of it reads that one factorization. Both return plain JSON-able dicts.
``device`` (None: CUDA when available, else CPU) is where the factorizations run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from opsft.checkpoints import WeightSource
from opsft.diagnostics import metrics as M
from opsft.diagnostics import streaming as S
from opsft.diagnostics.factors import Factors, resolve_device, top_factors
from opsft.modules import module_type

# ---------------------------------------------------------------- endpoint PNT summary (GEO section 3)


def _matrix_endpoint(
    w0: torch.Tensor, w1: torch.Tensor, name: str, settings: tuple[int, int, float], device: torch.device
) -> dict:
    """Principal angles (mean/max, radians), NSS and mask overlaps of one matrix from one factorization of
    each side (``top_factors`` with max(k, rank) vectors: W0's serves the angles, NSS and the mask)."""
    k, rank, alpha = settings
    a, b = M.as_matrix(w0, name, "endpoint_summary"), M.as_matrix(w1, name, "endpoint_summary")
    if not M._finite(a, b):
        nan = {
            "angle_left_mean": math.nan,
            "angle_left_max": math.nan,
            "angle_right_mean": math.nan,
            "angle_right_max": math.nan,
            "nss": math.nan,
        }
        return nan | M.mask_overlap(a, b, rank, alpha, name)
    width = max(k, rank)
    f0, f1 = top_factors(a, width, device), top_factors(b, width, device)
    angles = M._angles_from_factors(f0, f1, min(k, *a.shape))
    out = {
        f"angle_{side}_{stat}": float(getattr(angles[side], stat)())
        for side in angles
        for stat in ("mean", "max")
    }
    out["nss"] = M._nss_from_values(f0.values, f1.values)
    return out | M._mask_overlap_from_factors(a, b, f0, rank, alpha)


def _endpoint_tensor(
    pair: Sequence[WeightSource],
    name: str,
    tally: S._Bf16Tally,
    explicit: bool,
    settings: tuple[int, int, float],
    device: torch.device,
) -> dict | None:
    """Tally one tensor's bf16 counts and, for an analysed matrix, return its endpoint metrics; the pair
    is loaded in this frame and freed on return, so at most two tensors are held at once."""
    w0, w1 = S.load_aligned(pair, name)
    tally.add(name, w0, w1)
    return _matrix_endpoint(w0, w1, name, settings, device) if S._analysed(name, w0, explicit) else None


def endpoint_summary(
    before: WeightSource,
    after: WeightSource,
    names: Sequence[str] | None = None,
    k: int = M.DEFAULT_ANGLE_K,
    rank: int = M.DEFAULT_MASK_RANK,
    alpha: float = M.DEFAULT_MASK_ALPHA,
    *,
    device: str | torch.device | None = None,
) -> dict:
    """The PNT diagnostics of a checkpoint pair as GEO section 3 / Table 1 report them (claim C16):
    bf16 sparsity over all analysed parameters (``bf16_sparsity``), and per layer matrix, averaged without
    weighting (GEO C.3): principal angles between top-k singular subspaces (``principal_angles``, mean and
    max per matrix, radians), NSS (``spectral_shift``) and overlaps of the visible-update mask with the
    principal and low-magnitude masks (``mask_overlap``). One tensor pair in memory at a time; one exact
    float64 factorization (``top_factors``) per side and matrix, on ``device``. Per-matrix values are under
    "per_matrix"; NaNs are listed, not averaged."""
    if k < 1 or rank < 1 or not 0 < alpha < 1:
        raise ValueError(
            f"endpoint_summary needs k >= 1, rank >= 1, 0 < alpha < 1; got {k=}, {rank=}, {alpha=}"
        )
    pair, dev = [before, after], resolve_device(device)
    tally = S._Bf16Tally()
    per_matrix: dict[str, dict] = {}
    for name in S._selected(pair, names):
        result = _endpoint_tensor(pair, name, tally, names is not None, (k, rank, alpha), dev)
        if result is not None:
            per_matrix[name] = result
    keys = next(iter(per_matrix.values())).keys() if per_matrix else []
    return {
        "bf16_sparsity": tally.result(),
        "matrices": {key: S.summarize({n: v[key] for n, v in per_matrix.items()}) for key in keys},
        "per_matrix": per_matrix,
        "settings": {"k": k, "rank": rank, "alpha": alpha},
    }


# ---------------------------------------------------------------- trajectory summary (GEO section 4)


TRAJECTORY_METRICS = ("stable_rank", "frobenius_norm", "hill_index", "subspace_similarity")


def _factors_if_finite(dw: torch.Tensor, k: int, device: torch.device) -> Factors | None:
    """``top_factors`` of dW with k right vectors, or None when dW holds NaN/inf."""
    return top_factors(dw, k, device) if M._finite(dw) else None


def _trajectory_point(
    dw: torch.Tensor,
    factors: Factors | None,
    v_end: torch.Tensor,
    hill_k: int | None,
    name: str,
) -> dict:
    """Stable rank, Frobenius norm, Hill index and subspace similarity of one cumulative update, from its
    ``factors`` (None when dW holds NaN/inf: every metric NaN)."""
    if factors is None:
        return dict.fromkeys(TRAJECTORY_METRICS, math.nan)
    s = factors.values
    fro = float(torch.linalg.vector_norm(dw))
    k = min(hill_k, s.numel()) if hill_k is not None else None
    return {
        "stable_rank": M._stable_rank_from(fro, s),
        "frobenius_norm": fro,
        "hill_index": M.hill_tail_index(s, k, name),
        "subspace_similarity": M._subspace_similarity_from(factors.v, v_end),
    }


def _matrix_trajectory(
    sources: Sequence[WeightSource],
    name: str,
    explicit: bool,
    settings: tuple[int, int | None],
    device: torch.device,
) -> list[dict] | None:
    """Trajectory points of one matrix for snapshots 1..T (None if it is not analysed): loads theta_0,
    theta_T (for V_K(end)), then each theta_t, keeping only W_0, dW_end and the current dW_t in float64.
    One factorization per dW_t (singular values and top-K right vectors); dW_end's is computed once."""
    subspace_k, hill_k = settings
    w0 = S._load(sources[0], name)
    if not S._analysed(name, w0, explicit):
        return None
    base = M.as_matrix(w0, name, "trajectory_summary")
    last = len(sources) - 1
    d_end = S.load_checked(sources, last, name, w0.shape).to(torch.float64) - base
    k = min(subspace_k, *w0.shape)
    end_factors = _factors_if_finite(d_end, k, device)  # computed once: V_K(end) and the last point
    v_end = (
        end_factors.v
        if end_factors is not None
        else torch.full((w0.shape[1], k), math.nan, dtype=torch.float64)
    )
    points = []
    for index in range(1, last):
        dw = S.load_checked(sources, index, name, w0.shape).to(torch.float64) - base
        points.append(_trajectory_point(dw, _factors_if_finite(dw, k, device), v_end, hill_k, name))
    points.append(_trajectory_point(d_end, end_factors, v_end, hill_k, name))
    return points


def trajectory_summary(
    snapshots: Sequence[WeightSource],
    names: Sequence[str] | None = None,
    subspace_k: int = M.DEFAULT_SUBSPACE_K,
    hill_k: int | None = None,
    *,
    device: str | torch.device | None = None,
) -> dict:
    """Per-checkpoint trajectory of the cumulative update dW_t = W_t - W_0 (GEO section 4 and appendix E;
    claims C17/C18): for t = 1..T (snapshots[0] = W_0) the mean over layer matrices of stable rank
    ||dW_t||_F^2 / ||dW_t||_2^2, Frobenius norm ||dW_t||_F, Hill tail index of the singular values of dW_t
    (top ``hill_k``, default ``default_hill_k``) and subspace similarity ||V_K(t)^T V_K(end)||_F^2 / K with
    K = ``subspace_k``. One exact float64 factorization (``top_factors``, on ``device``) per matrix and
    checkpoint (T per matrix); about four float64 copies of the largest matrix in memory. A NaN in any
    matrix makes that checkpoint's mean NaN and is listed."""
    if len(snapshots) < 2:
        raise ValueError("trajectory_summary needs at least two snapshots (W_0 and one later)")
    per_matrix: dict[str, list[dict]] = {}
    dev = resolve_device(device)
    for name in S._selected(snapshots, names):
        if names is None and module_type(name) == "embed":
            continue  # never analysed by default: skip before loading the largest tensor
        points = _matrix_trajectory(snapshots, name, names is not None, (subspace_k, hill_k), dev)
        if points is not None:
            per_matrix[name] = points
    steps = len(snapshots) - 1
    series = {
        metric: [S.summarize({n: pts[t][metric] for n, pts in per_matrix.items()}) for t in range(steps)]
        for metric in TRAJECTORY_METRICS
    }
    return {
        "labels": [S.snapshot_label(s, i) for i, s in enumerate(snapshots)][1:],
        "mean": {metric: [point["mean"] for point in points] for metric, points in series.items()},
        "nan": {
            metric: sorted({n for point in points for n in point["nan"]}) for metric, points in series.items()
        },
        "per_matrix": {
            n: {m: [p[m] for p in pts] for m in TRAJECTORY_METRICS} for n, pts in per_matrix.items()
        },
        "n_matrices": len(per_matrix),
        "settings": {"subspace_k": subspace_k, "hill_k": hill_k if hill_k is not None else "top half"},
    }
