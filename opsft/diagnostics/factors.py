"""Singular values and top-k singular subspaces of one float64 matrix, computed once and shared by every
metric of that matrix (NSS, principal angles, mask overlap, stable rank, Hill index, subspace similarity).

The device is chosen once per call (``resolve_device``: CUDA when present, else CPU); inputs and results
stay float64 and results come back on CPU.

CPU: the singular values are LAPACK's exact ones (``torch.linalg.svdvals``: bidiagonalisation, no vectors), of
W or W^T, whichever is tall (the faster reduction).
The top-k right singular vectors are the top-k eigenvectors of the Gram matrix G = W^T W (or W W^T for a
wide matrix, giving the left ones). This is used only where it is as accurate as the SVD's vectors: an
eigenvector of G is perturbed by about eps * sigma_1^2 / (sigma_k^2 - sigma_{k+1}^2), the SVD's by about
eps * sigma_1 / (sigma_k - sigma_{k+1}); the ratio is sigma_1 / (sigma_k + sigma_{k+1}), so the Gram route
runs when that ratio is at most ``GRAM_RATIO`` and k < min(m, n). Singular values never come from G (its
small eigenvalues lose all relative accuracy). Otherwise, and on CUDA, one thin ``torch.linalg.svd``.

On the Gram route, a small top-k subspace (k <= ``LANCZOS_MAX_K``) of a wide matrix (min(m, n) >=
``LANCZOS_MIN_DIM``, e.g. the top-16 of a 4096x4096 update) comes from ARPACK's implicitly restarted Lanczos on the
implicit Gram operator x -> W^T (W x) (torch matvecs at the pinned thread count, a fixed start vector, converged to
machine precision: tol = 0), which has the same accuracy as the dense eigensolver on G and skips its full
tridiagonalisation and back-transformation (about 0.5-2.3 s against 6 s at 4096 here); the dense route takes
over if it does not converge.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GRAM_RATIO = 100.0  # Gram-route vectors at most this many times less accurate than the SVD's (see above)
LANCZOS_MAX_K = 64  # a top-k subspace this small comes from Lanczos ...
LANCZOS_MIN_DIM = 512  # ... for a matrix at least this wide (below, the dense eigensolver is as fast)


@dataclass(frozen=True)
class Factors:
    """``values``: all min(m, n) singular values, descending; ``u`` (m x k) and ``v`` (n x k): orthonormal
    bases of the top-k left and right singular subspaces, nested: for every j <= k the first j columns span
    the top-j subspace. All float64 on CPU."""

    values: torch.Tensor
    u: torch.Tensor
    v: torch.Tensor


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a torch.device; None means CUDA when available, else CPU (chosen once per summary)."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _tall(w: torch.Tensor) -> torch.Tensor:
    """W, or the view W^T when W is wide: the same singular values, and LAPACK reduces a tall matrix faster
    (here svdvals of a 4096x12288 float64 matrix: 10.5 s; of its transpose: 6.5 s, values equal to 1e-14)."""
    return w if w.shape[0] >= w.shape[1] else w.T


def singular_values(w: torch.Tensor, device: str | torch.device | None = None) -> torch.Tensor:
    """sigma(W): all singular values of a finite matrix, descending, float64 on CPU (no vectors computed; of
    the tall one of W and W^T)."""
    return torch.linalg.svdvals(_tall(w.to(resolve_device(device), torch.float64))).cpu()


def _orthonormal_span(x: torch.Tensor) -> torch.Tensor:
    """Q of the thin QR x = QR: an orthonormal basis of span(x) for full-column-rank x."""
    return torch.linalg.qr(x).Q


def _gram_is_accurate(values: torch.Tensor, k: int) -> bool:
    """Whether top-k Gram eigenvectors are within GRAM_RATIO of the SVD's accuracy:
    k < min(m, n) and sigma_1 <= GRAM_RATIO * (sigma_k + sigma_{k+1})."""
    return k < values.numel() and float(values[0]) <= GRAM_RATIO * float(values[k - 1] + values[k])


def _top_eigenvectors(gram: torch.Tensor, k: int) -> torch.Tensor:
    """The k eigenvectors of a symmetric matrix with the largest eigenvalues, largest first."""
    return torch.linalg.eigh(gram).eigenvectors[:, -k:].flip(1)


def _gram_factors(w: torch.Tensor, values: torch.Tensor, k: int) -> Factors:
    """Top-k subspaces from the smaller Gram matrix: V_k = top eigenvectors of W^T W and U_k = orth(W V_k)
    (tall or square W), or U_k = top eigenvectors of W W^T and V_k = orth(W^T U_k) (wide W)."""
    if w.shape[0] >= w.shape[1]:
        v = _top_eigenvectors(w.T @ w, k)
        return Factors(values, _orthonormal_span(w @ v).cpu(), v.cpu())
    u = _top_eigenvectors(w @ w.T, k)
    return Factors(values, u.cpu(), _orthonormal_span(w.T @ u).cpu())


def _lanczos_top(apply, n: int, k: int) -> torch.Tensor | None:
    """The k eigenvectors with the largest eigenvalues of the symmetric positive semi-definite operator
    ``apply`` on R^n, largest first (float64), by ARPACK to machine precision from the start vector
    (1, ..., 1) / sqrt(n); None when ARPACK does not converge."""
    import numpy as np
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh

    operator = LinearOperator((n, n), matvec=lambda x: apply(torch.from_numpy(np.ravel(x))).numpy(), dtype=np.float64)
    try:
        values, vectors = eigsh(operator, k=k, which="LA", v0=np.full(n, n**-0.5), tol=0)
    except ArpackNoConvergence:
        return None
    return torch.from_numpy(np.ascontiguousarray(vectors[:, np.argsort(values)[::-1]]))


def _lanczos_factors(w: torch.Tensor, values: torch.Tensor, k: int) -> Factors | None:
    """``_gram_factors`` with the top-k eigenvectors of the Gram matrix from ``_lanczos_top`` on the implicit
    operator (never formed); None when Lanczos does not converge."""
    if w.shape[0] >= w.shape[1]:
        v = _lanczos_top(lambda x: w.T @ (w @ x), w.shape[1], k)
        return None if v is None else Factors(values, _orthonormal_span(w @ v), v)
    u = _lanczos_top(lambda x: w @ (w.T @ x), w.shape[0], k)
    return None if u is None else Factors(values, u, _orthonormal_span(w.T @ u))


def _svd_factors(w: torch.Tensor, k: int) -> Factors:
    """Top-k subspaces and all singular values from one thin exact SVD W = U S V^T (of the tall one of W and
    W^T: for a wide W, W^T = V S U^T gives U and V swapped)."""
    u, s, vh = torch.linalg.svd(_tall(w), full_matrices=False)
    if w.shape[0] < w.shape[1]:
        u, vh = vh.T, u.T
    return Factors(s.cpu(), u[:, :k].cpu(), vh[:k].T.cpu())


def top_factors(w: torch.Tensor, k: int, device: str | torch.device | None = None) -> Factors:
    """All singular values and the top-k singular subspaces of a finite matrix W (k capped at min(m, n)),
    float64: on CPU exact singular values plus Gram-route vectors where as accurate as the SVD's (by Lanczos
    for a small k of a wide matrix), else (and on CUDA) one thin SVD."""
    dev = resolve_device(device)
    x = w.to(dev, torch.float64)
    k = min(k, *x.shape)
    if dev.type == "cpu":
        values = torch.linalg.svdvals(_tall(x))
        if _gram_is_accurate(values, k):
            if k <= LANCZOS_MAX_K and min(x.shape) >= LANCZOS_MIN_DIM:
                found = _lanczos_factors(x, values, k)
                if found is not None:
                    return found
            return _gram_factors(x, values, k)
    return _svd_factors(x, k)
