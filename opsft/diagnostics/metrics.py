"""Per-tensor parameter-space metrics of OPSFT (arXiv 2609.36659) and GEO (arXiv 2606.07082, after PNT).

Every function takes tensors and returns numbers or tensors; nothing here reads files. Matrix metrics run
in float64 with exact singular values and singular subspaces (``opsft.diagnostics.factors``: LAPACK on CPU,
cuSOLVER where ``device`` is CUDA; GEO appendix C.3 prescribes exact float64 SVDs). ``device=None`` means
CUDA when available, else CPU. A NaN or infinity in an input gives NaN in the output, never an error hidden
in an average.
"""

from __future__ import annotations

import math

import torch

from opsft.diagnostics.factors import Factors, singular_values, top_factors

Device = str | torch.device | None

DEFAULT_ANGLE_K = 512  # GEO C.3: "We use k=512 by default"
DEFAULT_MASK_RANK = 64  # GEO C.3: "We use rank r=64 and alpha=0.5"
DEFAULT_MASK_ALPHA = 0.5
DEFAULT_SUBSPACE_K = 16  # GEO section 4.2: "V_16"


def as_matrix(t: torch.Tensor, name: str = "tensor", metric: str = "matrix metric") -> torch.Tensor:
    """``t`` as a float64 CPU matrix; a ValueError naming ``name`` and ``metric`` unless ``t`` is 2-D."""
    if t.ndim != 2:
        raise ValueError(f"{metric} needs a 2-D matrix, but {name!r} has shape {tuple(t.shape)}")
    return t.detach().to(device="cpu", dtype=torch.float64)


def check_same_shape(w0: torch.Tensor, w1: torch.Tensor, name: str = "tensor") -> None:
    """Raise a ValueError naming ``name`` when the two sides of a pair differ in shape."""
    if w0.shape != w1.shape:
        raise ValueError(f"{name!r} has shape {tuple(w0.shape)} before but {tuple(w1.shape)} after")


def _finite(*ts: torch.Tensor) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in ts)


# ---------------------------------------------------------------- bf16 visibility (OPSFT Table 6, GEO 3.1)


def bf16_changed_mask(w0: torch.Tensor, w1: torch.Tensor) -> torch.Tensor:
    """Visible-update mask M_ij = [bf16(W0_ij) != bf16(W+_ij)] (GEO section 3.1 / C.3: "Both W0 and W+ are
    cast to bf16 and then back to fp32 before comparison"). NaN entries count as changed; callers that
    average use ``bf16_unchanged_fraction``, which reports NaN instead."""
    return w0.detach().to(torch.bfloat16) != w1.detach().to(torch.bfloat16)


def bf16_unchanged_count(w0: torch.Tensor, w1: torch.Tensor, name: str = "tensor") -> float:
    """Number of entries with bf16(W0_ij) == bf16(W+_ij); NaN when either side holds a NaN/inf."""
    check_same_shape(w0, w1, name)
    if not _finite(w0, w1):
        return math.nan
    return float(w0.numel() - int(bf16_changed_mask(w0, w1).sum()))


def bf16_unchanged_fraction(w0: torch.Tensor, w1: torch.Tensor, name: str = "tensor") -> float:
    """bf16-aware update sparsity s = (1/n) sum_i [bf16(w_i) == bf16(w'_i)] (GEO section 3.1 and C.3,
    after PNT; OPSFT Table 6 reports its complement 1 - s, the share of visibly updated parameters)."""
    return bf16_unchanged_count(w0, w1, name) / w0.numel()


# ---------------------------------------------------------------- spectral geometry (GEO 3.1, C.3)


def _angles_between(q0: torch.Tensor, q1: torch.Tensor) -> torch.Tensor:
    """Principal angles (ascending, radians) between the column spans of orthonormal q0, q1 (same width).

    Knyazev & Argentati (2002), as in scipy.linalg.subspace_angles: cosines from svd(Q0^T Q1); for angles
    below 45 degrees the sines from svd(Q1 - Q0 Q0^T Q1) are used, which stay accurate for tiny angles."""
    cross = q0.T @ q1
    cos = torch.linalg.svdvals(cross).clamp(-1.0, 1.0)  # descending cosines -> ascending angles
    sin = torch.linalg.svdvals(q1 - q0 @ cross).clamp(-1.0, 1.0).flip(0)  # ascending sines
    return torch.where(cos**2 >= 0.5, torch.arcsin(sin), torch.arccos(cos))


def _angles_from_factors(f0: Factors, f1: Factors, k: int) -> dict[str, torch.Tensor]:
    """Principal angles between the top-k left ("left") and right ("right") subspaces of two factors."""
    return {
        "left": _angles_between(f0.u[:, :k], f1.u[:, :k]),
        "right": _angles_between(f0.v[:, :k], f1.v[:, :k]),
    }


def principal_angles(
    w0: torch.Tensor,
    w1: torch.Tensor,
    k: int = DEFAULT_ANGLE_K,
    name: str = "tensor",
    *,
    device: Device = None,
) -> dict[str, torch.Tensor]:
    """Principal angles (radians, ascending) between the top-k singular subspaces of W0 and W+:
    theta = arccos(sigma(U_{0,k}^T U_{+,k})) for "left" and the same with V for "right" (GEO section 3.1
    and C.3, after PNT). k defaults to 512 and is capped at min(m, n). Exact float64 subspaces
    (``top_factors``; C.3 warns that GPU SVD "can produce unstable angles for near-identical matrices", which
    is why the GPU path stays float64); small angles use the arcsin form. NaN vectors on NaN/inf input."""
    a, b = as_matrix(w0, name, "principal_angles"), as_matrix(w1, name, "principal_angles")
    check_same_shape(a, b, name)
    if k < 1:
        raise ValueError(f"principal_angles needs k >= 1, got k={k} for {name!r}")
    if not _finite(a, b):
        nan = torch.full((min(k, *a.shape),), math.nan, dtype=torch.float64)
        return {"left": nan, "right": nan.clone()}
    k = min(k, *a.shape)
    return _angles_from_factors(top_factors(a, k, device), top_factors(b, k, device), k)


def _nss_from_values(s0: torch.Tensor, s1: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(s1 - s0) / torch.linalg.vector_norm(s0))


def spectral_shift(
    w0: torch.Tensor, w1: torch.Tensor, name: str = "tensor", *, device: Device = None
) -> float:
    """Normalized spectral shift NSS = ||sigma(W+) - sigma(W0)||_2 / ||sigma(W0)||_2, singular values in
    descending order (GEO section 3.1 and C.3, after PNT). Exact float64 singular values; NaN on NaN input."""
    a, b = as_matrix(w0, name, "spectral_shift"), as_matrix(w1, name, "spectral_shift")
    check_same_shape(a, b, name)
    if not _finite(a, b):
        return math.nan
    return _nss_from_values(singular_values(a, device), singular_values(b, device))


def _extreme_mask(values: torch.Tensor, alpha: float, largest: bool) -> torch.Tensor:
    """Boolean mask of the c = round(alpha * n) largest (or smallest) entries, ties broken by position (the
    first c of a stable sort): with key = -x (or x) and t its c-th smallest value, every key < t plus the
    first c - #{key < t} entries with key == t. Selection, not a sort: O(n)."""
    key = (-values if largest else values).flatten()
    count = round(alpha * key.numel())
    if count == 0:
        return torch.zeros_like(values, dtype=torch.bool)
    kth = torch.kthvalue(key, count).values
    below, tie = key < kth, key == kth
    mask = below | (tie & (torch.cumsum(tie, 0) <= count - int(below.sum())))
    return mask.view_as(values)


def _overlap(update: torch.Tensor, reference: torch.Tensor) -> float:
    """|M_upd & M_ref| / |M_upd|: the share of visible updates inside the reference mask (NaN if none)."""
    visible = int(update.sum())
    return int((update & reference).sum()) / visible if visible else math.nan


def _rank_r_reconstruction(w: torch.Tensor, factors: Factors, rank: int) -> torch.Tensor:
    """U_r S_r V_r^T = W V_r V_r^T: the best rank-r approximation of W from its top-r right subspace."""
    v = factors.v[:, :rank]
    return (w @ v) @ v.T


def _mask_overlap_from_factors(
    w0: torch.Tensor, w1: torch.Tensor, factors0: Factors, rank: int, alpha: float
) -> dict[str, float]:
    """Mask overlaps (see ``mask_overlap``) from the factors of the float64 matrix W0."""
    reconstruction = _rank_r_reconstruction(w0, factors0, rank)
    update = bf16_changed_mask(w0, w1)
    return {
        "principal": _overlap(update, _extreme_mask(reconstruction.abs(), alpha, largest=True)),
        "low_magnitude": _overlap(update, _extreme_mask(w0.abs(), alpha, largest=False)),
        "random_baseline": alpha,
        "visible_fraction": int(update.sum()) / update.numel(),
    }


def mask_overlap(
    w0: torch.Tensor,
    w1: torch.Tensor,
    rank: int = DEFAULT_MASK_RANK,
    alpha: float = DEFAULT_MASK_ALPHA,
    name: str = "tensor",
    *,
    device: Device = None,
) -> dict[str, float]:
    """Overlap |M_upd & M_*| / |M_upd| of the bf16-visible update mask M_upd with (GEO section 3.1, C.3,
    after PNT): M_princ, the top-alpha entries by magnitude of the rank-r reconstruction U_r S_r V_r^T of W0
    (exact top-r subspace), and M_low, the bottom-alpha entries of |W0|; reported beside the random
    baseline alpha.
    Masks hold exactly round(alpha * n) entries (ties broken by position). NaN when nothing is visibly
    updated or an input holds NaN/inf."""
    a, b = as_matrix(w0, name, "mask_overlap"), as_matrix(w1, name, "mask_overlap")
    check_same_shape(a, b, name)
    if not 0.0 < alpha < 1.0 or rank < 1:
        raise ValueError(f"mask_overlap needs rank >= 1 and 0 < alpha < 1, got rank={rank}, alpha={alpha}")
    if not _finite(a, b):
        return {
            "principal": math.nan,
            "low_magnitude": math.nan,
            "random_baseline": alpha,
            "visible_fraction": math.nan,
        }
    return _mask_overlap_from_factors(a, b, top_factors(a, rank, device), rank, alpha)


# ---------------------------------------------------------------- update trajectory (GEO section 4, app. E)


def frobenius_norm(dw: torch.Tensor, name: str = "tensor") -> float:
    """||dW||_F = sqrt(sum_ij dW_ij^2), in float64 (GEO appendix E, "Frobenius norm")."""
    return float(torch.linalg.vector_norm(as_matrix(dw, name, "frobenius_norm")))


def _stable_rank_from(fro: float, s: torch.Tensor) -> float:
    top = float(s[0]) if s.numel() else 0.0
    return fro**2 / top**2 if top > 0 else math.nan


def stable_rank(dw: torch.Tensor, name: str = "tensor", *, device: Device = None) -> float:
    """Stable rank ||dW||_F^2 / ||dW||_2^2 (GEO section 4.1 and appendix E). Exact float64 spectral norm;
    NaN for a zero matrix (no update, no direction) or NaN input."""
    m = as_matrix(dw, name, "stable_rank")
    if not _finite(m):
        return math.nan
    return _stable_rank_from(float(torch.linalg.vector_norm(m)), singular_values(m, device))


def _numerically_positive(x: torch.Tensor) -> torch.Tensor:
    """Values above max(x) * len(x) * eps(float64): the LAPACK rank tolerance; smaller ones count as 0."""
    return x > x.max() * x.numel() * torch.finfo(torch.float64).eps


def default_hill_k(singular_values: torch.Tensor) -> int:
    """Default Hill sample size: the top half of the numerically positive singular values, at least 2.
    GEO appendix E does not state its k; this choice is ours."""
    x = singular_values.detach().flatten().to(torch.float64)
    positive = int(_numerically_positive(x).sum()) if x.numel() else 0
    return max(2, positive // 2)


def hill_tail_index(singular_values: torch.Tensor, k: int | None = None, name: str = "tensor") -> float:
    """Hill (1975) tail-index estimate from the k largest values x_(1) >= ... >= x_(k):
    alpha_hat = [ (1/(k-1)) sum_{i=1}^{k-1} ln(x_(i) / x_(k)) ]^{-1}
    (GEO section 4.1 and appendix E, on the top singular values of dW_t). For Pareto samples with
    P(X > x) = x^-a, alpha_hat -> a. k defaults to ``default_hill_k``; the input order does not matter.
    NaN when x_(k) is numerically zero (below max * n * eps, a rank-deficient update) or on NaN input."""
    x = singular_values.detach().flatten().to(device="cpu", dtype=torch.float64)
    k = default_hill_k(x) if k is None else k
    if k < 2:
        raise ValueError(f"hill_tail_index needs k >= 2, got k={k} for {name!r}")
    if k > x.numel():
        raise ValueError(f"hill_tail_index: k={k} exceeds the {x.numel()} values of {name!r}")
    if not _finite(x) or not bool(_numerically_positive(x).sum() >= k):
        return math.nan
    top = torch.sort(x, descending=True).values[:k]
    mean_log_excess = float(torch.log(top[:-1] / top[-1]).mean())
    return 1.0 / mean_log_excess if mean_log_excess > 0 else math.inf


def _subspace_similarity_from(v_t: torch.Tensor, v_end: torch.Tensor) -> float:
    """||V_t^T V_end||_F^2 / k for orthonormal n x k bases V_t, V_end."""
    k = v_t.shape[1]
    return float(torch.linalg.matrix_norm(v_t.T @ v_end) ** 2 / k)


def subspace_similarity(
    dw_t: torch.Tensor,
    dw_end: torch.Tensor,
    k: int = DEFAULT_SUBSPACE_K,
    name: str = "tensor",
    *,
    device: Device = None,
) -> float:
    """Subspace similarity ||V_k(t)^T V_k(end)||_F^2 / k between the top-k right singular subspaces of the
    cumulative updates dW_t and dW_end (GEO section 4.2, Fig 5; K = 16). 1 = same subspace, k/n = random.
    k is capped at min(m, n). Exact float64 subspaces (``top_factors``); NaN on NaN input."""
    a, b = as_matrix(dw_t, name, "subspace_similarity"), as_matrix(dw_end, name, "subspace_similarity")
    check_same_shape(a, b, name)
    if not _finite(a, b):
        return math.nan
    return _subspace_similarity_from(top_factors(a, k, device).v, top_factors(b, k, device).v)
