"""The shared factorizations of the diagnostics (opsft.diagnostics.factors) against a straightforward float64
reference: the implementation at commit 44326c9 (two thin SVDs per pair, a stable argsort per mask), kept
here. Every reported scalar agrees to 1e-6 relative, on closed-form and random cases, by both routes: the
CPU Gram route and the SVD route that also runs on CUDA (run here on CPU through the same code)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from opsft import diagnostics as D
from opsft.diagnostics import factors as F
from opsft.diagnostics import metrics as M

torch.set_num_threads(1)
RTOL = 1e-6
ATOL = 1e-12  # angles that are zero up to rounding (identical subspaces)


# ---------------------------------------------------------------- reference: the 44326c9 implementation


def _ref_svd(w):
    return torch.linalg.svd(w.double(), full_matrices=False)


def _ref_angles(q0, q1):
    cross = q0.T @ q1
    cos = torch.linalg.svdvals(cross).clamp(-1.0, 1.0)
    sin = torch.linalg.svdvals(q1 - q0 @ cross).clamp(-1.0, 1.0).flip(0)
    return torch.where(cos**2 >= 0.5, torch.arcsin(sin), torch.arccos(cos))


def _ref_extreme_mask(values, alpha, largest):
    flat = values.flatten()
    order = torch.argsort(flat, descending=largest, stable=True)
    mask = torch.zeros(flat.numel(), dtype=torch.bool)
    mask[order[: round(alpha * flat.numel())]] = True
    return mask.view_as(values)


def _ref_overlap(update, reference):
    visible = int(update.sum())
    return int((update & reference).sum()) / visible if visible else math.nan


def _ref_endpoint(w0, w1, k, rank, alpha):
    """Per-matrix endpoint scalars as commit 44326c9 computed them from two thin SVDs."""
    a, b = w0.double(), w1.double()
    (u0, s0, vh0), (u1, s1, vh1) = _ref_svd(a), _ref_svd(b)
    k = min(k, *a.shape)
    angles = {"left": _ref_angles(u0[:, :k], u1[:, :k]), "right": _ref_angles(vh0[:k].T, vh1[:k].T)}
    out = {
        f"angle_{side}_{stat}": float(getattr(angles[side], stat)())
        for side in angles
        for stat in ("mean", "max")
    }
    out["nss"] = float(torch.linalg.vector_norm(s1 - s0) / torch.linalg.vector_norm(s0))
    r = min(rank, s0.numel())
    recon = (u0[:, :r] * s0[:r]) @ vh0[:r]
    update = w0.to(torch.bfloat16) != w1.to(torch.bfloat16)
    out["principal"] = _ref_overlap(update, _ref_extreme_mask(recon.abs(), alpha, True))
    out["low_magnitude"] = _ref_overlap(update, _ref_extreme_mask(a.abs(), alpha, False))
    return out


def _ref_trajectory_point(dw, v_end_k, hill_k):
    _, s, vh = _ref_svd(dw)
    fro = float(torch.linalg.vector_norm(dw))
    k = v_end_k.shape[1]
    return {
        "stable_rank": fro**2 / float(s[0]) ** 2,
        "frobenius_norm": fro,
        "hill_index": D.hill_tail_index(s, hill_k),
        "subspace_similarity": float(torch.linalg.matrix_norm(vh[:k] @ v_end_k) ** 2 / k),
    }


# ---------------------------------------------------------------- cases


def _with_spectrum(shape, values, seed):
    """U diag(values) V^T with Haar-random U, V: a matrix with exactly these singular values."""
    gen = torch.Generator().manual_seed(seed)
    m, n = shape
    u, _ = torch.linalg.qr(torch.randn(m, len(values), generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(n, len(values), generator=gen, dtype=torch.float64))
    return (u * torch.as_tensor(values, dtype=torch.float64)) @ v.T


def _random(shape, seed, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


CASES = {
    "gaussian square": lambda: _random((96, 96), 0),
    "gaussian tall": lambda: _random((160, 64), 1),
    "gaussian wide": lambda: _random((48, 144), 2),
    "power-law spectrum": lambda: _with_spectrum((120, 80), np.arange(1, 81) ** -1.0, 3),
    "steep power law (SVD route)": lambda: _with_spectrum((90, 60), np.arange(1, 61) ** -3.0, 13),
    "spike plus bulk": lambda: _with_spectrum((100, 100), np.r_[[50.0, 30, 20], np.linspace(2, 1, 97)], 4),
    "rank 6 (k beyond the rank)": lambda: _random((70, 6), 5) @ _random((6, 50), 6),
}


def _close(actual, expected, rtol=RTOL):
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value, rel=rtol, abs=ATOL), key


@pytest.mark.parametrize("route", ["auto", "svd"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("k", "rank"), [(16, 8), (40, 4)])
def test_endpoint_matches_the_two_svd_reference(monkeypatch, route, case, k, rank):
    if route == "svd":  # the CUDA route, on CPU
        monkeypatch.setattr(F, "_gram_is_accurate", lambda values, k: False)
    w0 = CASES[case]().float()
    w1 = w0 + 1e-3 * _random(w0.shape, 99, float(w0.abs().mean())).float()
    out = D.endpoint_summary({"w": w0}, {"w": w1}, ["w"], k=k, rank=rank, device="cpu")["per_matrix"]["w"]
    _close(out, _ref_endpoint(w0, w1, k, rank, 0.5))


@pytest.mark.parametrize("route", ["auto", "svd"])
@pytest.mark.parametrize("case", ["gaussian tall", "gaussian wide", "power-law spectrum"])
def test_trajectory_matches_the_svd_reference(monkeypatch, route, case):
    if route == "svd":
        monkeypatch.setattr(F, "_gram_is_accurate", lambda values, k: False)
    _assert_trajectory_matches_the_reference(CASES[case](), 10)


def _assert_trajectory_matches_the_reference(base, seed):
    """trajectory_summary of base and four perturbed snapshots against the SVD reference, point by point."""
    snapshots = [{"w": base + 0.05 * t * t * _random(base.shape, seed + t)} for t in range(5)]
    snapshots[0] = {"w": base}
    out = D.trajectory_summary(snapshots, ["w"], subspace_k=4, hill_k=6, device="cpu")["per_matrix"]["w"]
    dws = [s["w"] - base for s in snapshots[1:]]
    v_end = _ref_svd(dws[-1])[2][:4].T
    for t, dw in enumerate(dws):
        _close({m: out[m][t] for m in out}, _ref_trajectory_point(dw, v_end, 6))


def test_identical_pair_has_zero_angles_and_nss():
    w = _random((64, 48), 7)
    out = D.endpoint_summary({"w": w}, {"w": w.clone()}, ["w"], k=12, rank=4, device="cpu")["per_matrix"]["w"]
    assert out["nss"] == 0 and max(out[f"angle_{s}_max"] for s in ("left", "right")) <= ATOL


def test_known_rotation_angle_by_both_routes(monkeypatch):
    """W+ = R W0 with R a rotation by theta in the plane of u_1 and a vector outside the column space."""
    m, n, theta = 30, 12, 0.3
    w0 = _with_spectrum((m, n), np.linspace(10, 1, n), 9)
    u = torch.linalg.svd(w0, full_matrices=True)[0]
    a, b = u[:, 0], u[:, -1]
    rot = torch.eye(m) + (math.cos(theta) - 1) * (torch.outer(a, a) + torch.outer(b, b))
    rot += math.sin(theta) * (torch.outer(b, a) - torch.outer(a, b))
    for gram in (True, False):
        monkeypatch.setattr(F, "_gram_is_accurate", lambda values, k, gram=gram: gram and k < values.numel())
        angles = D.principal_angles(w0, rot @ w0, 5, device="cpu")
        assert float(angles["left"][-1]) == pytest.approx(theta, rel=1e-12)
        assert float(angles["right"].abs().max()) < 1e-12


def test_gram_route_only_where_as_accurate_as_the_svd():
    values = torch.tensor([10.0, 5.0, 4.0, 1e-3, 1e-9])
    assert F.GRAM_RATIO == 100
    assert F._gram_is_accurate(values, 2)  # 10 <= 100 * (5 + 4)
    assert F._gram_is_accurate(values, 3)  # 10 <= 100 * (4 + 1e-3)
    assert not F._gram_is_accurate(values, 4)  # 10 > 100 * (1e-3 + 1e-9)
    assert not F._gram_is_accurate(values, 5)  # k = min(m, n): every vector, the SVD's job


def test_factors_are_nested_orthonormal_bases_of_the_top_subspaces():
    w = _with_spectrum((50, 90), np.linspace(9, 1, 50), 11)
    f = F.top_factors(w, 7, "cpu")
    u, s, vh = _ref_svd(w)
    torch.testing.assert_close(f.values, s, rtol=1e-12, atol=0)
    for j in (1, 3, 7):  # projectors onto the top-j subspaces agree
        torch.testing.assert_close(f.u[:, :j] @ f.u[:, :j].T, u[:, :j] @ u[:, :j].T, rtol=0, atol=1e-12)
        torch.testing.assert_close(f.v[:, :j] @ f.v[:, :j].T, vh[:j].T @ vh[:j], rtol=0, atol=1e-12)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.73])
def test_extreme_mask_selection_equals_a_stable_sort_with_ties(largest, alpha):
    values = torch.randint(0, 7, (37, 23), generator=torch.Generator().manual_seed(12)).double()
    assert torch.equal(M._extreme_mask(values, alpha, largest), _ref_extreme_mask(values, alpha, largest))


def test_device_defaults_to_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert F.resolve_device(None).type == expected and F.resolve_device("cpu").type == "cpu"


# ---------------------------------------------------------------- the Lanczos route (small k of a wide matrix)

WIDE_CASES = {
    "gaussian 560x520": lambda: _random((560, 520), 20),
    "power law 520x640": lambda: _with_spectrum((520, 640), np.arange(1, 521) ** -0.5, 21),
}


def _spy_lanczos(monkeypatch):
    calls = []
    real = F._lanczos_top

    def spy(apply, n, k):
        calls.append((n, k))
        return real(apply, n, k)

    monkeypatch.setattr(F, "_lanczos_top", spy)
    return calls


@pytest.mark.parametrize("case", sorted(WIDE_CASES))
def test_the_lanczos_route_matches_the_two_svd_reference(monkeypatch, case):
    calls = _spy_lanczos(monkeypatch)
    w0 = WIDE_CASES[case]()
    w1 = w0 + 1e-3 * _random(w0.shape, 98, float(w0.abs().mean()))
    out = D.endpoint_summary({"w": w0}, {"w": w1}, ["w"], k=16, rank=8, device="cpu")["per_matrix"]["w"]
    _close(out, _ref_endpoint(w0, w1, 16, 8, 0.5))
    _assert_trajectory_matches_the_reference(w0, 30)
    assert calls and all(k in (16, 4) and n in (520, 560) for n, k in calls), calls


def test_lanczos_that_does_not_converge_falls_back_to_the_dense_gram_route(monkeypatch):
    from scipy.sparse.linalg import ArpackNoConvergence

    def no_convergence(*args, **kwargs):
        raise ArpackNoConvergence("no convergence", np.zeros(0), np.zeros((0, 0)))

    w = WIDE_CASES["gaussian 560x520"]()
    expected = F.top_factors(w, 8, "cpu")
    monkeypatch.setattr("scipy.sparse.linalg.eigsh", no_convergence)
    assert F._lanczos_top(lambda x: x, 16, 2) is None
    fallback = F.top_factors(w, 8, "cpu")
    assert torch.equal(fallback.values, expected.values)
    assert float(torch.linalg.svdvals(fallback.v.T @ expected.v).min()) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("route", ["auto", "svd"])
def test_a_wide_matrix_is_reduced_as_its_transpose_with_sides_kept(monkeypatch, route):
    # W = U diag(s) V^T, 40 x 120 with a known spectrum: its values, and U_k / V_k on the right sides.
    if route == "svd":
        monkeypatch.setattr(F, "_gram_is_accurate", lambda values, k: False)
    gen = torch.Generator().manual_seed(21)
    u, _ = torch.linalg.qr(torch.randn(40, 40, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(120, 40, generator=gen, dtype=torch.float64))
    s = torch.linspace(10, 1, 40, dtype=torch.float64)
    w = (u * s) @ v.T
    f = F.top_factors(w, 5)
    torch.testing.assert_close(f.values, s, atol=1e-12, rtol=0)
    torch.testing.assert_close(F.singular_values(w), s, atol=1e-12, rtol=0)
    for got, true in ((f.u, u[:, :5]), (f.v, v[:, :5])):  # the same subspaces: |cosines| all 1
        torch.testing.assert_close(torch.linalg.svdvals(got.T @ true), torch.ones(5, dtype=torch.float64),
                                   atol=1e-10, rtol=0)
