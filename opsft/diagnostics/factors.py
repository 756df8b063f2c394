"""Singular values and top-k singular subspaces of one float64 matrix, computed once and shared by every
metric of that matrix (NSS, principal angles, mask overlap, stable rank, Hill index, subspace similarity).

The device is chosen once per call (``resolve_device``: CUDA when present, else CPU); inputs and results
stay float64 and results come back on CPU.

CPU: the singular values are LAPACK's exact ones (``torch.linalg.svdvals``: bidiagonalisation, no vectors).
The top-k right singular vectors are the top-k eigenvectors of the Gram matrix G = W^T W (or W W^T for a
wide matrix, giving the left ones). This is used only where it is as accurate as the SVD's vectors: an
eigenvector of G is perturbed by about eps * sigma_1^2 / (sigma_k^2 - sigma_{k+1}^2), the SVD's by about
eps * sigma_1 / (sigma_k - sigma_{k+1}); the ratio is sigma_1 / (sigma_k + sigma_{k+1}), so the Gram route
runs when that ratio is at most ``GRAM_RATIO`` and k < min(m, n). Singular values never come from G (its
small eigenvalues lose all relative accuracy). Otherwise, and on CUDA, one thin ``torch.linalg.svd``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

GRAM_RATIO = 100.0  # Gram-route vectors at most this many times less accurate than the SVD's (see above)


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


def singular_values(w: torch.Tensor, device: str | torch.device | None = None) -> torch.Tensor:
    """sigma(W): all singular values of a finite matrix, descending, float64 on CPU (no vectors computed)."""
    return torch.linalg.svdvals(w.to(resolve_device(device), torch.float64)).cpu()


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


def _svd_factors(w: torch.Tensor, k: int) -> Factors:
    """Top-k subspaces and all singular values from one thin exact SVD W = U S V^T."""
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    return Factors(s.cpu(), u[:, :k].cpu(), vh[:k].T.cpu())


def top_factors(w: torch.Tensor, k: int, device: str | torch.device | None = None) -> Factors:
    """All singular values and the top-k singular subspaces of a finite matrix W (k capped at min(m, n)),
    float64: on CPU exact singular values plus Gram-route vectors where as accurate as the SVD's, else
    (and on CUDA) one thin SVD."""
    dev = resolve_device(device)
    x = w.to(dev, torch.float64)
    k = min(k, *x.shape)
    if dev.type == "cpu":
        values = torch.linalg.svdvals(x)
        if _gram_is_accurate(values, k):
            return _gram_factors(x, values, k)
    return _svd_factors(x, k)
