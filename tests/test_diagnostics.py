"""Math of the parameter-space diagnostics: known answers, and agreement with independent float64
numpy/scipy computations to 1e-10 relative (GEO section 3.1, appendices C.3 and E; OPSFT Fig 2, 6)."""

from __future__ import annotations

import json
import math
import weakref

import numpy as np
import pytest
import scipy.linalg as sla
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from opsft import diagnostics as D
from opsft.checkpoints import save_state
from opsft.diagnostics import streaming
from opsft.organism.models import build_model

torch.set_num_threads(1)
RTOL = 1e-10
SHAPES = [(40, 40), (56, 24), (24, 56)]


def _rand(shape, seed, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _pair(shape, seed, eps=1e-2):
    w0 = _rand(shape, seed)
    return w0, w0 + _rand(shape, seed + 1, eps)


def _close(actual, expected, rtol=RTOL):
    np.testing.assert_allclose(
        np.asarray(actual, dtype=float), np.asarray(expected, dtype=float), rtol=rtol, atol=0
    )


# ---------------------------------------------------------------- known answers


def test_rotation_by_known_angle_gives_that_principal_angle():
    m, n, k, theta = 30, 12, 5, 0.3
    u, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((m, m)))
    v, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((n, n)))
    w0 = u[:, :n] @ np.diag(np.linspace(10, 1, n)) @ v.T
    # Givens rotation in the plane of u_1 (inside the top-k span) and u_m (outside the column space).
    rot = np.eye(m) + (math.cos(theta) - 1) * (np.outer(u[:, 0], u[:, 0]) + np.outer(u[:, -1], u[:, -1]))
    rot += math.sin(theta) * (np.outer(u[:, -1], u[:, 0]) - np.outer(u[:, 0], u[:, -1]))
    angles = D.principal_angles(torch.from_numpy(w0), torch.from_numpy(rot @ w0), k)
    _close(angles["left"][-1], theta, 1e-12)
    assert angles["left"][:-1].abs().max() < 1e-12 and angles["right"].abs().max() < 1e-12


@pytest.mark.parametrize("r", [1, 3, 7])
def test_rank_r_matrix_with_equal_singular_values_has_stable_rank_r(r):
    u, _ = torch.linalg.qr(_rand((30, r), 0))
    v, _ = torch.linalg.qr(_rand((20, r), 1))
    _close(D.stable_rank(3.5 * u @ v.T), r, 1e-12)


@pytest.mark.parametrize("c", [0.0, 0.25, 1.0, 1.7, 10.0])
def test_nss_of_scaled_matrix_is_abs_c_minus_one(c):
    w = _rand((24, 16), 3)
    assert D.spectral_shift(w, c * w) == pytest.approx(abs(c - 1), abs=1e-12)


@pytest.mark.parametrize("alpha", [0.7, 1.5, 3.0])
def test_hill_estimator_recovers_pareto_exponent_within_3_percent(alpha):
    samples = np.random.default_rng(7).pareto(alpha, 200_000) + 1.0  # P(X > x) = x^-alpha, x >= 1
    estimate = D.hill_tail_index(torch.from_numpy(samples), k=20_000)
    assert estimate == pytest.approx(alpha, rel=0.03)


def test_bf16_unchanged_fraction_either_side_of_the_rounding_boundary():
    half_ulp, tiny = 2.0**-8, 2.0**-20  # bf16 spacing at 1.0 is 2^-7; ties round to even (1.0)
    w0 = torch.ones(4)
    w1 = torch.tensor([1 + half_ulp - tiny, 1 + half_ulp, 1 + half_ulp + tiny, 1 - half_ulp / 2 - tiny])
    assert D.bf16_changed_mask(w0, w1).tolist() == [False, False, True, True]
    assert D.bf16_unchanged_fraction(w0, w1) == 0.5


def test_hill_index_of_rank_deficient_update_is_nan_not_a_log_of_roundoff():
    u, v = _rand((30, 2), 60), _rand((20, 2), 61)
    sigma = torch.linalg.svdvals(u @ v.T)  # rank 2: 18 singular values are round-off
    assert math.isnan(D.hill_tail_index(sigma, k=5)) and math.isnan(D.hill_tail_index(torch.zeros(6)))
    assert D.default_hill_k(sigma) == 2 and not math.isnan(D.hill_tail_index(sigma, k=2))


def test_subspace_similarity_is_one_for_same_subspace_and_zero_for_orthogonal():
    q, _ = torch.linalg.qr(_rand((40, 40), 4))
    base = _rand((30, 4), 5)
    same = D.subspace_similarity(base @ q[:, :4].T, 2 * _rand((30, 4), 6) @ q[:, :4].T, k=4)
    orthogonal = D.subspace_similarity(base @ q[:, :4].T, base @ q[:, 4:8].T, k=4)
    assert same == pytest.approx(1.0, abs=1e-12) and orthogonal == pytest.approx(0.0, abs=1e-12)


def test_mask_overlap_of_updates_confined_to_small_entries_is_all_low_magnitude():
    w0 = _rand((32, 32), 8)
    small = w0.abs() <= w0.abs().median()
    w1 = torch.where(small, w0 + 1.0, w0)
    out = D.mask_overlap(w0, w1, rank=4)
    assert out["low_magnitude"] == 1.0 and out["random_baseline"] == 0.5
    assert out["visible_fraction"] == pytest.approx(float(small.double().mean()))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(2, 12), n=st.integers(2, 12), seed=st.integers(0, 10_000), eps=st.floats(1e-6, 10.0))
def test_metric_ranges_hold_for_any_matrix(m, n, seed, eps):
    w0, w1 = _pair((m, n), seed, eps)
    assert 1 - 1e-12 <= D.stable_rank(w1 - w0) <= min(m, n) + 1e-12
    assert -1e-12 <= D.subspace_similarity(w0, w1, k=2) <= 1 + 1e-12
    angles = D.principal_angles(w0, w1, k=3)
    for side in ("left", "right"):
        assert bool(((angles[side] >= 0) & (angles[side] <= math.pi / 2 + 1e-12)).all())
        assert bool((angles[side].diff() >= -1e-12).all())  # ascending


# ---------------------------------------------------------------- agreement with float64 references


def _np_svd(w):
    return np.linalg.svd(w.numpy(), full_matrices=False)


@pytest.mark.parametrize("shape", SHAPES)
def test_principal_angles_match_scipy_subspace_angles(shape):
    w0, w1 = _pair(shape, 10)
    k = 9
    (u0, _, vh0), (u1, _, vh1) = _np_svd(w0), _np_svd(w1)
    ours = D.principal_angles(w0, w1, k)
    _close(ours["left"], np.sort(sla.subspace_angles(u0[:, :k], u1[:, :k])))
    _close(ours["right"], np.sort(sla.subspace_angles(vh0[:k].T, vh1[:k].T)))
    assert len(D.principal_angles(w0, w1)["left"]) == min(shape)  # default k = 512, capped at the rank


@pytest.mark.parametrize("shape", SHAPES)
def test_spectral_and_norm_metrics_match_numpy(shape):
    w0, w1 = _pair(shape, 20)
    dw = (w1 - w0).numpy()
    s0, s1 = np.linalg.svd(w0.numpy(), compute_uv=False), np.linalg.svd(w1.numpy(), compute_uv=False)
    _close(D.spectral_shift(w0, w1), np.linalg.norm(s1 - s0) / np.linalg.norm(s0))
    _close(D.stable_rank(w1 - w0), np.linalg.norm(dw, "fro") ** 2 / np.linalg.norm(dw, 2) ** 2)
    _close(D.frobenius_norm(w1 - w0), np.sqrt(np.sum(dw**2)))


def test_hill_index_matches_closed_form_and_ignores_order():
    x = np.random.default_rng(3).lognormal(size=50)
    top = np.sort(x)[::-1][:12]
    expected = 1.0 / np.mean(np.log(top[:-1] / top[-1]))
    _close(D.hill_tail_index(torch.from_numpy(x), k=12), expected)
    _close(D.hill_tail_index(torch.from_numpy(x[::-1].copy()), k=12), expected)
    assert D.default_hill_k(torch.from_numpy(x)) == 25


@pytest.mark.parametrize("shape", SHAPES)
def test_subspace_similarity_matches_numpy(shape):
    a, b = _pair(shape, 30, eps=0.5)
    va, vb = _np_svd(a)[2][:16].T, _np_svd(b)[2][:16].T
    _close(D.subspace_similarity(a, b), np.linalg.norm(va.T @ vb, "fro") ** 2 / 16)


@pytest.mark.parametrize("shape", SHAPES)
def test_mask_overlap_matches_numpy(shape):
    w0 = _rand(shape, 40).float()
    w1 = w0 + torch.where(_rand(shape, 41) > 0.5, 0.05, 1e-5).float()  # only some changes survive bf16
    u, s, vh = _np_svd(w0.double())
    recon = np.abs((u[:, :8] * s[:8]) @ vh[:8])
    half = round(0.5 * recon.size)
    principal = np.zeros(recon.size, bool)
    principal[np.argsort(-recon.ravel())[:half]] = True
    low = np.zeros(recon.size, bool)
    low[np.argsort(np.abs(w0.numpy()).ravel())[:half]] = True
    visible = (w0.bfloat16() != w1.bfloat16()).numpy().ravel()
    out = D.mask_overlap(w0, w1, rank=8)
    assert out["principal"] == (visible & principal).sum() / visible.sum()
    assert out["low_magnitude"] == (visible & low).sum() / visible.sum()


# ---------------------------------------------------------------- bad input and NaN


def test_matrix_metric_on_1d_tensor_names_it():
    norm = torch.ones(8)
    with pytest.raises(ValueError, match=r"stable_rank.*'model.norm.weight'.*\(8,\)"):
        D.stable_rank(norm, name="model.norm.weight")
    with pytest.raises(ValueError, match="principal_angles"):
        D.principal_angles(norm, norm)


def test_pair_of_different_shapes_names_the_tensor():
    with pytest.raises(ValueError, match="'q'"):
        D.spectral_shift(torch.ones(3, 4), torch.ones(4, 3), name="q")


def test_nan_input_gives_nan_not_an_average():
    w0, w1 = _pair((12, 10), 50)
    w1[3, 4] = math.nan
    assert math.isnan(D.spectral_shift(w0, w1)) and math.isnan(D.stable_rank(w1 - w0))
    assert math.isnan(D.bf16_unchanged_fraction(w0, w1))
    assert math.isnan(D.subspace_similarity(w1 - w0, w0))
    assert D.principal_angles(w0, w1, 4)["left"].isnan().all()
    assert math.isnan(D.mask_overlap(w0, w1)["principal"])
    assert math.isnan(D.stable_rank(torch.zeros(3, 3)))  # no update, no direction


def test_module_types_of_qwen3_names():
    names = [n for n, _ in build_model("nano").named_parameters()]
    assert {D.module_type(n) for n in names} == {"q", "k", "v", "o", "gate", "up", "down", "embed", "norm"}


# ---------------------------------------------------------------- streaming over snapshots


def _snapshots(count, seed=0, scale=1e-2):
    """State dicts of a nano model: theta_0, then independent random interval updates of size ``scale``."""
    states = [{n: p.detach().clone() for n, p in build_model("nano", seed).named_parameters()}]
    gen = torch.Generator().manual_seed(seed + 100)
    for _ in range(1, count):
        states.append({n: t + scale * torch.randn(t.shape, generator=gen) for n, t in states[-1].items()})
    return states


def _delta(states, i, name):
    return (states[i][name].double() - states[0][name].double()).numpy().ravel()


def _np_cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_update_cosines_match_numpy_global_and_per_matrix(monkeypatch):
    monkeypatch.setattr(streaming, "GRAM_CHUNK", 4099)  # exercise chunked accumulation
    states = _snapshots(4)
    out = D.update_cosines(states)
    flat = [np.concatenate([t.double().numpy().ravel() for t in s.values()]) for s in states]
    interval = [flat[i] - flat[i - 1] for i in range(1, 4)]
    cumulative = [flat[i] - flat[0] for i in range(1, 4)]
    _close(out["interval"]["global"], [[_np_cos(a, b) for b in interval] for a in interval])
    _close(out["cumulative"]["global"], [[_np_cos(a, b) for b in cumulative] for a in cumulative])
    _close(out["final_cumulative"]["global"], [_np_cos(c, cumulative[-1]) for c in cumulative])
    matrices = [n for n, t in states[0].items() if t.ndim == 2 and D.module_type(n) != "embed"]
    per = [
        [[_np_cos(_delta(states, a, n), _delta(states, b, n)) for b in (1, 2, 3)] for a in (1, 2, 3)]
        for n in matrices
    ]
    _close(out["cumulative"]["matrix"], np.mean(per, axis=0))
    assert out["n_matrices"] == len(matrices) == 14


def test_fixed_direction_run_has_all_cosines_one():
    theta0 = {n: p.detach().clone() for n, p in build_model("nano", 1).named_parameters()}
    drift = {n: torch.randn_like(t) for n, t in theta0.items()}
    out = D.update_cosines([{n: t + 1e-2 * i * drift[n] for n, t in theta0.items()} for i in range(4)])
    for kind in ("interval", "cumulative"):
        _close(out[kind]["global"], np.ones((3, 3)), 1e-6)
        _close(out[kind]["matrix"], np.ones((3, 3)), 1e-6)


def _jaccard(a, b):
    return (a & b).sum() / (a | b).sum()


def test_update_locations_match_numpy_masks():
    states = _snapshots(4)
    states[2] = {n: torch.where(torch.rand(t.shape) < 0.5, states[1][n], t) for n, t in states[2].items()}
    out = D.update_locations(states)
    flat = [np.concatenate([t.bfloat16().float().numpy().ravel() for t in s.values()]) for s in states]
    masks = [flat[i] != flat[i - 1] for i in range(1, 4)]
    _close(out["interval"]["sparsity"], [1 - m.mean() for m in masks])
    _close(out["interval"]["jaccard_previous"][1:], [_jaccard(masks[i], masks[i - 1]) for i in (1, 2)])
    assert math.isnan(out["interval"]["jaccard_previous"][0])
    _close(out["interval"]["jaccard_last"], [_jaccard(m, masks[-1]) for m in masks])
    cum = [flat[i] != flat[0] for i in range(1, 4)]
    _close(out["cumulative"]["sparsity"], [1 - m.mean() for m in cum])


def test_bf16_sparsity_is_parameter_weighted_with_types_and_complement():
    before = {"a.q_proj.weight": torch.ones(10, 10), "a.norm.weight": torch.ones(30)}
    after = {
        "a.q_proj.weight": torch.ones(10, 10),
        "a.norm.weight": torch.cat([torch.ones(10), torch.full((20,), 2.0)]),
    }
    out = D.bf16_sparsity(before, after)
    assert out["overall"] == {"unchanged": 110 / 130, "updated": 1 - 110 / 130, "params": 130}
    assert out["by_type"]["norm"]["unchanged"] == pytest.approx(1 / 3) and out["by_type"]["q"]["updated"] == 0
    after["a.q_proj.weight"][0, 0] = math.nan
    nan_out = D.bf16_sparsity(before, after)
    assert math.isnan(nan_out["overall"]["unchanged"]) and nan_out["nan_tensors"] == ["a.q_proj.weight"]


def _sharded_folder(state, folder):
    """A HF-style sharded checkpoint: two safetensors files and model.safetensors.index.json."""
    folder.mkdir(parents=True)
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for fname, part in shards.items():
        save_file({n: state[n].contiguous() for n in part}, str(folder / fname))
    index = {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n in part}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_endpoint_summary_agrees_across_module_state_and_sharded_folder(tmp_path):
    model = build_model("nano", 2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1e-3 * torch.randn_like(p))
    save_state(before, tmp_path / "before" / "model.safetensors")
    after_state = {n: p.detach().clone() for n, p in model.named_parameters()}
    folder = _sharded_folder(after_state, tmp_path / "after")
    from_module = D.endpoint_summary(before, model, k=8, rank=4)
    from_folders = D.endpoint_summary(tmp_path / "before", folder, k=8, rank=4)
    assert json.dumps(from_module, sort_keys=True) == json.dumps(from_folders, sort_keys=True)
    name = "model.layers.1.mlp.down_proj.weight"
    angles = D.principal_angles(before[name], after_state[name], 8)
    entry = from_module["per_matrix"][name]
    _close(entry["angle_right_max"], angles["right"].max())
    _close(entry["nss"], D.spectral_shift(before[name], after_state[name]))
    assert entry["principal"] == D.mask_overlap(before[name], after_state[name], 4)["principal"]
    assert from_module["matrices"]["nss"]["n"] == 14 and from_module["bf16_sparsity"]["overall"][
        "params"
    ] == sum(t.numel() for t in before.values())


def test_trajectory_summary_matches_per_matrix_metrics():
    states = _snapshots(4, scale=1e-3)
    out = D.trajectory_summary(states, subspace_k=4, hill_k=6)
    name = "model.layers.0.self_attn.q_proj.weight"
    dws = [s[name].double() - states[0][name].double() for s in states[1:]]
    per = out["per_matrix"][name]
    _close(per["stable_rank"], [D.stable_rank(d) for d in dws])
    _close(per["frobenius_norm"], [D.frobenius_norm(d) for d in dws])
    _close(per["hill_index"], [D.hill_tail_index(torch.linalg.svdvals(d), 6) for d in dws])
    _close(per["subspace_similarity"], [D.subspace_similarity(d, dws[-1], 4) for d in dws])
    _close(
        out["mean"]["stable_rank"], np.mean([m["stable_rank"] for m in out["per_matrix"].values()], axis=0)
    )
    assert out["mean"]["subspace_similarity"][-1] == pytest.approx(1.0)
    assert out["labels"] == ["snapshot1", "snapshot2", "snapshot3"]


def test_nan_in_one_matrix_is_reported_and_not_averaged():
    states = _snapshots(3)
    bad = "model.layers.0.mlp.up_proj.weight"
    states[1][bad] = states[1][bad].clone()
    states[1][bad][0, 0] = math.nan
    traj = D.trajectory_summary(states, subspace_k=4)
    assert math.isnan(traj["mean"]["stable_rank"][0]) and not math.isnan(traj["mean"]["stable_rank"][1])
    assert traj["nan"]["stable_rank"] == [bad]
    end = D.endpoint_summary(states[0], states[1], k=4, rank=4)
    assert math.isnan(end["matrices"]["nss"]["mean"]) and end["matrices"]["nss"]["nan"] == [bad]
    assert bad in D.update_cosines(states)["interval"]["nan_matrices"]
    assert D.update_locations(states)["nan_tensors"] == [bad]


def test_different_architectures_name_the_snapshot_and_tensors():
    nano = {n: p.detach() for n, p in build_model("nano").named_parameters()}
    micro = {n: p.detach() for n, p in build_model("micro").named_parameters()}
    with pytest.raises(D.SnapshotMismatchError, match=r"shape \(192, 64\) in snapshot 0 but \(384, 128\)"):
        D.trajectory_summary([nano, micro], names=["model.layers.0.mlp.gate_proj.weight"])
    with pytest.raises(D.SnapshotMismatchError, match="embed_tokens"):
        D.endpoint_summary(nano, micro)


def test_missing_tensor_is_named():
    states = _snapshots(2)
    del states[1]["model.layers.1.self_attn.o_proj.weight"]
    with pytest.raises(
        D.SnapshotMismatchError, match="snapshot 1.*missing tensors.*layers.1.self_attn.o_proj"
    ):
        D.update_cosines(states)
    with pytest.raises(KeyError, match="nope"):
        D.bf16_sparsity(states[0], states[0], names=["nope"])


def test_bad_settings_are_named():
    states = _snapshots(2)
    with pytest.raises(ValueError, match="alpha=1.5"):
        D.endpoint_summary(states[0], states[1], alpha=1.5)
    with pytest.raises(ValueError, match="visible"):
        D.update_locations(states, visible="fp8")
    with pytest.raises(ValueError, match="k=1"):
        D.hill_tail_index(torch.ones(5), k=1)


def test_explicit_1d_tensor_in_matrix_diagnostics_is_named():
    states = _snapshots(2)
    with pytest.raises(ValueError, match="'model.norm.weight' has shape"):
        D.trajectory_summary(states, names=["model.norm.weight"])


def _track_live_loads(monkeypatch):
    """Make every tensor the streaming code loads a fresh copy and record how many are alive at once."""
    live, peak = [0], [0]

    def release():
        live[0] -= 1

    def load(source, name):
        tensor = original(source, name).clone()
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        weakref.finalize(tensor, release)
        return tensor

    original = streaming._load
    monkeypatch.setattr(streaming, "_load", load)
    return peak


@pytest.mark.parametrize(
    ("diagnostic", "bound"),
    [
        (lambda s: D.endpoint_summary(s[0], s[-1], k=4, rank=4), 2),
        (lambda s: D.bf16_sparsity(s[0], s[-1]), 2),
        (lambda s: D.trajectory_summary(s, subspace_k=4), 2),
        (lambda s: D.update_cosines(s), 4),
        (lambda s: D.update_locations(s), 4),
    ],
)
def test_streaming_holds_one_tensor_per_snapshot_needed(monkeypatch, diagnostic, bound):
    states = _snapshots(4)
    peak = _track_live_loads(monkeypatch)
    diagnostic(states)
    assert peak[0] == bound
