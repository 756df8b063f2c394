"""Whole-checkpoint summaries for the claims suite: the endpoint PNT diagnostics of a pair (GEO section 3,
claim C16) and the cumulative-update trajectory of a snapshot sequence (GEO section 4, claims C17/C18).

Streamed as in ``opsft.diagnostics.streaming``: at most two loaded tensors at once, plus float64 working
copies and SVD factors of the matrix being analysed. Both return plain JSON-able dicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from opsft.checkpoints import WeightSource
from opsft.diagnostics import metrics as M
from opsft.diagnostics import streaming as S
from opsft.modules import module_type

# ---------------------------------------------------------------- endpoint PNT summary (GEO section 3)


def _matrix_endpoint(w0: torch.Tensor, w1: torch.Tensor, name: str, k: int, rank: int, alpha: float) -> dict:
    """Principal angles (mean/max, radians), NSS and mask overlaps of one matrix from two exact SVDs."""
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
    svd0, svd1 = M._svd(a), M._svd(b)
    angles = M._angles_from_svds(svd0, svd1, k)
    out = {
        f"angle_{side}_{stat}": float(getattr(angles[side], stat)())
        for side in angles
        for stat in ("mean", "max")
    }
    out["nss"] = M._nss_from_values(svd0[1], svd1[1])
    return out | M._mask_overlap_from_svd(a, b, svd0, rank, alpha)


def _endpoint_tensor(
    pair: Sequence[WeightSource],
    name: str,
    tally: S._Bf16Tally,
    explicit: bool,
    settings: tuple[int, int, float],
) -> dict | None:
    """Tally one tensor's bf16 counts and, for an analysed matrix, return its endpoint metrics; the pair
    is loaded in this frame and freed on return, so at most two tensors are held at once."""
    w0, w1 = S.load_aligned(pair, name)
    tally.add(name, w0, w1)
    return _matrix_endpoint(w0, w1, name, *settings) if S._analysed(name, w0, explicit) else None


def endpoint_summary(
    before: WeightSource,
    after: WeightSource,
    names: Sequence[str] | None = None,
    k: int = M.DEFAULT_ANGLE_K,
    rank: int = M.DEFAULT_MASK_RANK,
    alpha: float = M.DEFAULT_MASK_ALPHA,
) -> dict:
    """The PNT diagnostics of a checkpoint pair as GEO section 3 / Table 1 report them (claim C16):
    bf16 sparsity over all analysed parameters (``bf16_sparsity``), and per layer matrix, averaged without
    weighting (GEO C.3): principal angles between top-k singular subspaces (``principal_angles``, mean and
    max per matrix, radians), NSS (``spectral_shift``) and overlaps of the visible-update mask with the
    principal and low-magnitude masks (``mask_overlap``). One tensor pair in memory at a time; two exact
    float64 SVDs per matrix. Per-matrix values are under "per_matrix"; NaNs are listed, not averaged."""
    if k < 1 or rank < 1 or not 0 < alpha < 1:
        raise ValueError(
            f"endpoint_summary needs k >= 1, rank >= 1, 0 < alpha < 1; got {k=}, {rank=}, {alpha=}"
        )
    pair = [before, after]
    tally = S._Bf16Tally()
    per_matrix: dict[str, dict] = {}
    for name in S._selected(pair, names):
        result = _endpoint_tensor(pair, name, tally, names is not None, (k, rank, alpha))
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


def _svd_if_finite(dw: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
    return M._svd(dw) if M._finite(dw) else None


def _trajectory_point(
    dw: torch.Tensor,
    factors: tuple[torch.Tensor, ...] | None,
    v_end: torch.Tensor,
    hill_k: int | None,
    name: str,
) -> dict:
    """Stable rank, Frobenius norm, Hill index and subspace similarity of one cumulative update, from its
    SVD ``factors`` (None when dW holds NaN/inf: every metric NaN)."""
    if factors is None:
        return dict.fromkeys(TRAJECTORY_METRICS, math.nan)
    _, s, vh = factors
    fro = float(torch.linalg.vector_norm(dw))
    k = min(hill_k, s.numel()) if hill_k is not None else None
    return {
        "stable_rank": M._stable_rank_from(fro, s),
        "frobenius_norm": fro,
        "hill_index": M.hill_tail_index(s, k, name),
        "subspace_similarity": M._subspace_similarity_from(M._top_right_subspace(vh, v_end.shape[1]), v_end),
    }


def _matrix_trajectory(
    sources: Sequence[WeightSource], name: str, explicit: bool, subspace_k: int, hill_k: int | None
) -> list[dict] | None:
    """Trajectory points of one matrix for snapshots 1..T (None if it is not analysed): loads theta_0,
    theta_T (for V_K(end)), then each theta_t, keeping only W_0, dW_end and the current dW_t in float64."""
    w0 = S._load(sources[0], name)
    if not S._analysed(name, w0, explicit):
        return None
    base = M.as_matrix(w0, name, "trajectory_summary")
    last = len(sources) - 1
    d_end = S.load_checked(sources, last, name, w0.shape).to(torch.float64) - base
    k = min(subspace_k, *w0.shape)
    end_factors = _svd_if_finite(d_end)  # computed once: gives V_K(end) and the last point
    v_end = (
        M._top_right_subspace(end_factors[2], k)
        if end_factors is not None
        else torch.full((w0.shape[1], k), math.nan, dtype=torch.float64)
    )
    points = []
    for index in range(1, last):
        dw = S.load_checked(sources, index, name, w0.shape).to(torch.float64) - base
        points.append(_trajectory_point(dw, _svd_if_finite(dw), v_end, hill_k, name))
    points.append(_trajectory_point(d_end, end_factors, v_end, hill_k, name))
    return points


def trajectory_summary(
    snapshots: Sequence[WeightSource],
    names: Sequence[str] | None = None,
    subspace_k: int = M.DEFAULT_SUBSPACE_K,
    hill_k: int | None = None,
) -> dict:
    """Per-checkpoint trajectory of the cumulative update dW_t = W_t - W_0 (GEO section 4 and appendix E;
    claims C17/C18): for t = 1..T (snapshots[0] = W_0) the mean over layer matrices of stable rank
    ||dW_t||_F^2 / ||dW_t||_2^2, Frobenius norm ||dW_t||_F, Hill tail index of the singular values of dW_t
    (top ``hill_k``, default ``default_hill_k``) and subspace similarity ||V_K(t)^T V_K(end)||_F^2 / K with
    K = ``subspace_k``. One exact float64 SVD per matrix and checkpoint (T per matrix); about four float64 copies of the
    largest matrix in memory. A NaN in any matrix makes that checkpoint's mean NaN and is listed."""
    if len(snapshots) < 2:
        raise ValueError("trajectory_summary needs at least two snapshots (W_0 and one later)")
    per_matrix: dict[str, list[dict]] = {}
    for name in S._selected(snapshots, names):
        if names is None and module_type(name) == "embed":
            continue  # never analysed by default: skip before loading the largest tensor
        points = _matrix_trajectory(snapshots, name, names is not None, subspace_k, hill_k)
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
