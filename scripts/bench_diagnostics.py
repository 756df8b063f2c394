"""Seconds per diagnostic on one N x N matrix pair (default 4096), seconds of the per-matrix work of
`opsft diagnose` per Qwen3-8B matrix shape, and the projected time of one Qwen3-8B base->RL pair; written to
results/perf.md, section "diagnostics". Usage: python scripts/bench_diagnostics.py [--size 4096]
[--out results/perf.md] [--no-shapes]

``--floor`` instead times the exact float64 reductions no exact route can skip, per Qwen3-8B shape (section
"diagnostics_floor"): every singular value takes a bidiagonal reduction (``torch.linalg.svdvals``), and a top-k
singular subspace either a full SVD or the Gram matrix and its tridiagonal reduction (``eigvalsh``: the
reduction and the values, no vectors). An endpoint summary needs both for W0 and W+; the trajectory point of dW
needs its values (its top-16 subspace comes from Lanczos, cheap), so one matrix of `opsft diagnose` costs at
least 2 x (svdvals + Gram + eigvalsh) + svdvals on the exact routes available here."""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable

import torch

from opsft import diagnostics as D
from opsft.io import update_markdown_section
from opsft.provenance import provenance

# Seconds at commit 44326c9 (two exact SVDs per pair), 4096x4096 float64, 2 cores, as measured in the issue.
OLD_SECONDS = {
    "stable_rank": 3.4,
    "spectral_shift (NSS)": 6.5,
    "principal_angles k=512": 29.0,
    "endpoint_summary, one matrix (shared factors)": 34.0,
}
# Qwen3-8B (config.json): 36 layers, hidden 4096, intermediate 12288, 32 q heads and 8 kv heads of 128.
QWEN3_8B_SHAPES = {  # (out, in) of each layer matrix: count over the model
    (4096, 4096): 2 * 36,  # q_proj (32 x 128 = 4096 rows), o_proj
    (1024, 4096): 2 * 36,  # k_proj, v_proj (8 x 128 = 1024 rows)
    (12288, 4096): 2 * 36,  # gate_proj, up_proj
    (4096, 12288): 36,  # down_proj
}
H100_FP64_FLOPS = 50e12  # the low end of the H100's dense FP64 (tensor core) peak


def _pair(shape: tuple[int, int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A float32 W0 ~ N(0, 0.02^2) and W+ = W0 + an update of relative size ~1e-3, as after post-training."""
    gen = torch.Generator().manual_seed(seed)
    w0 = 0.02 * torch.randn(*shape, generator=gen)
    return w0, w0 + 2e-5 * torch.randn(*shape, generator=gen)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(size: int) -> list[tuple[str, float]]:
    """(metric, seconds) for every per-matrix diagnostic on one size x size pair (CPU)."""
    w0, w1 = _pair((size, size))
    dw = w1 - w0
    sigma = torch.linalg.svdvals(dw.double())
    snapshots = [{"w": w0 + i * (w1 - w0) / 4} for i in range(5)]
    cases: list[tuple[str, Callable[[], object]]] = [
        ("bf16_unchanged_fraction", lambda: D.bf16_unchanged_fraction(w0, w1)),
        ("frobenius_norm", lambda: D.frobenius_norm(dw)),
        ("stable_rank", lambda: D.stable_rank(dw, device="cpu")),
        ("hill_tail_index (given singular values)", lambda: D.hill_tail_index(sigma)),
        ("spectral_shift (NSS)", lambda: D.spectral_shift(w0, w1, device="cpu")),
        ("principal_angles k=512", lambda: D.principal_angles(w0, w1, 512, device="cpu")),
        ("mask_overlap r=64 alpha=0.5", lambda: D.mask_overlap(w0, w1, device="cpu")),
        ("subspace_similarity k=16", lambda: D.subspace_similarity(dw, 2 * dw, device="cpu")),
        (
            "endpoint_summary, one matrix (shared factors)",
            lambda: D.endpoint_summary({"w": w0}, {"w": w1}, ["w"], device="cpu"),
        ),
        (
            "trajectory_summary, one matrix, one checkpoint",
            lambda: D.trajectory_summary([{"w": w0}, {"w": w1}], ["w"], device="cpu"),
        ),
        (
            "trajectory_summary, one matrix, 5 snapshots",
            lambda: D.trajectory_summary(snapshots, ["w"], device="cpu"),
        ),
    ]
    return [(label, _time(fn)) for label, fn in cases]


def diagnose_matrix_seconds(shape: tuple[int, int]) -> float:
    """Seconds of the per-matrix work of `opsft diagnose` on one base->RL pair of this shape (CPU):
    endpoint summary, one-checkpoint trajectory, update cosines and locations; reading files excluded."""
    w0, w1 = _pair(shape)
    pair = [{"w": w0}, {"w": w1}]
    start = time.perf_counter()
    D.endpoint_summary(*pair, ["w"], device="cpu")
    D.trajectory_summary(pair, ["w"], device="cpu")
    D.update_cosines(pair, ["w"])
    D.update_locations(pair, ["w"])
    return time.perf_counter() - start


def svd_flops(shape: tuple[int, int]) -> float:
    """Flops of one thin SVD with vectors of an m x n matrix, p = max, q = min: 4 p q^2 + 22 q^3
    (Golub and Van Loan, 4th ed., table 8.6.1, R-SVD)."""
    p, q = max(shape), min(shape)
    return 4 * p * q**2 + 22 * q**3


def h100_projection_seconds(efficiency: float) -> float:
    """Projected seconds of the factorizations of one Qwen3-8B pair on one H100 (three thin float64 SVDs per
    matrix: W0, W+ and dW) at ``efficiency`` of H100_FP64_FLOPS. A projection, not a measurement."""
    flops = sum(count * 3 * svd_flops(shape) for shape, count in QWEN3_8B_SHAPES.items())
    return flops / (efficiency * H100_FP64_FLOPS)


def floor_seconds(shape: tuple[int, int]) -> dict[str, float]:
    """Seconds of each exact float64 kernel on one matrix of ``shape`` at this process's thread count: all
    singular values, the smaller Gram matrix, its eigenvalues (tridiagonal reduction), its full eigh and the
    thin SVD, each of the tall one of W and W^T."""
    w = _pair(shape)[0].double()
    tall = w if shape[0] >= shape[1] else w.T  # reduced as opsft.diagnostics.factors reduces it
    gram = tall.T @ tall
    return {"svdvals": _time(lambda: torch.linalg.svdvals(tall)),
            "gram": _time(lambda: tall.T @ tall),
            "eigvalsh": _time(lambda: torch.linalg.eigvalsh(gram)),
            "eigh": _time(lambda: torch.linalg.eigh(gram)),
            "svd": _time(lambda: torch.linalg.svd(tall, full_matrices=False))}


def render_floor(floors: dict[tuple[int, int], dict[str, float]], measured: dict[tuple[int, int], float]) -> str:
    """The "diagnostics_floor" section: kernel seconds per shape, the floor of one matrix's `opsft diagnose`
    work (W0's and W+'s svdvals + Gram + eigvalsh, and dW's svdvals) against the per-matrix seconds measured in
    section "diagnostics", and the Qwen3-8B totals."""
    prov = provenance()
    lines = [
        "Floor of the exact float64 diagnostics: seconds of the reductions no exact route skips, per Qwen3-8B "
        "shape (every singular value: a bidiagonal reduction, `svdvals`; a top-k subspace: a full SVD, or the "
        "Gram matrix and its tridiagonal reduction, `eigvalsh`, before any vector). An endpoint summary needs "
        "both for W0 and W+ (2 x (svdvals + Gram + eigvalsh)); one matrix of `opsft diagnose` adds dW's "
        "singular values (its top-16 subspace comes from Lanczos). These are the reductions of the exact "
        "routes available here, not a bound on every algorithm. `python scripts/bench_diagnostics.py --floor`",
        f"commit {str(prov['commit'])[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, "
        f"{prov['machine']['cpu']}, {prov['machine']['torch_threads']} threads on {prov['machine']['cores']} "
        f"cores, load average {_load()} at the end, {prov['utc']}",
        "",
        "| shape (out x in) | svdvals | Gram | eigvalsh | eigh (all vectors) | thin SVD | endpoint floor | "
        "diagnose floor per matrix | measured per matrix (section diagnostics) | matrices |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    total_floor = total_measured = 0.0
    for shape, count in QWEN3_8B_SHAPES.items():
        f = floors[shape]
        one = f["svdvals"] + f["gram"] + f["eigvalsh"]
        per_matrix = 2 * one + f["svdvals"]
        total_floor += count * per_matrix
        total_measured += count * measured.get(shape, float("nan"))
        lines.append(f"| {shape[0]}x{shape[1]} | {f['svdvals']:.2f} | {f['gram']:.2f} | {f['eigvalsh']:.2f} | "
                     f"{f['eigh']:.2f} | {f['svd']:.2f} | {2 * one:.1f} | {per_matrix:.1f} | "
                     f"{measured.get(shape, float('nan')):.1f} | {count} |")
    lines += ["", f"Qwen3-8B pair: floor {total_floor:.0f} s ({total_floor / 3600:.2f} h), measured "
              f"{total_measured:.0f} s ({total_measured / 3600:.2f} h); the Speed issue's target is 1 h, and 10 s for "
              "one 4096x4096 endpoint summary."]
    return "\n".join(lines)


def _measured_per_matrix(path: str) -> dict[tuple[int, int], float]:
    """Seconds per matrix by shape from the "diagnostics" section of ``path`` (empty when absent)."""
    text = open(path).read() if os.path.exists(path) else ""
    return {(int(a), int(b)): float(sec)
            for a, b, sec in re.findall(r"^\| (\d+)x(\d+) \| \d+ \| ([\d.]+) \| [\d.]+ \|$", text, re.M)}


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _metric_table(size: int, timings: list[tuple[str, float]], loads: tuple[str, str]) -> list[str]:
    lines = [
        f"Seconds per metric on one {size}x{size} float32 pair (float64 factorizations, CPU), load average "
        f"{loads[0]} before / {loads[1]} after (other jobs inflate times). Old: commit 44326c9, as measured "
        "in the Speed issue (two thin SVDs per pair).",
        "",
        "| metric | seconds (old, 44326c9) | seconds (now) |",
        "|---|---|---|",
    ]
    lines += [
        f"| {label} | {OLD_SECONDS[label] if label in OLD_SECONDS else '-'} | {seconds:.3f} |"
        for label, seconds in timings
    ]
    return lines


def _projection_table(per_shape: dict[tuple[int, int], float], loads: tuple[str, str]) -> list[str]:
    lines = [
        "",
        "Qwen3-8B base->RL pair, `opsft diagnose` per-matrix work (endpoint, trajectory, cosines, locations; "
        f"reading files excluded), CPU, measured per shape, load average {loads[0]} before / {loads[1]} "
        "after:",
        "",
        "| shape (out x in) | matrices | seconds per matrix | seconds |",
        "|---|---|---|---|",
    ]
    total = 0.0
    for shape, count in QWEN3_8B_SHAPES.items():
        total += count * per_shape[shape]
        lines.append(
            f"| {shape[0]}x{shape[1]} | {count} | {per_shape[shape]:.1f} | {count * per_shape[shape]:.0f} |"
        )
    lines += [
        f"| total | {sum(QWEN3_8B_SHAPES.values())} | | {total:.0f} ({total / 3600:.2f} h) |",
        "",
        "One H100 (projection, not a measurement; no GPU was available): three thin float64 SVDs per matrix, "
        f"{sum(count * 3 * svd_flops(s) for s, count in QWEN3_8B_SHAPES.items()):.2e} flops; at 50 TFLOP/s "
        f"FP64 that is {h100_projection_seconds(1.0):.0f} s at full peak, "
        f"{h100_projection_seconds(0.1):.0f} s at 10% of peak (SVD is partly memory-bound), plus reading the "
        "checkpoints and the bf16 masks on CPU.",
    ]
    return lines


def render(
    size: int,
    timings: list[tuple[str, float]],
    loads: tuple[str, str] = ("?", "?"),
    per_shape: dict[tuple[int, int], float] | None = None,
    shape_loads: tuple[str, str] = ("?", "?"),
) -> str:
    """The markdown section: provenance line, old-vs-new metric table and, when measured, the Qwen3-8B
    per-shape projection."""
    prov = provenance()
    lines = [
        "Diagnostics: `python scripts/bench_diagnostics.py`",
        f"commit {str(prov['commit'])[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, "
        f"{prov['machine']['cpu']}, {prov['machine']['torch_threads']} threads on {prov['machine']['cores']} "
        f"cores, {prov['utc']}",
        "",
        *_metric_table(size, timings, loads),
    ]
    if per_shape is not None:
        lines += _projection_table(per_shape, shape_loads)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--out", default="results/perf.md")
    parser.add_argument("--no-shapes", action="store_true", help="skip the Qwen3-8B per-shape projection")
    parser.add_argument("--floor", action="store_true", help="time the exact reductions per shape instead")
    args = parser.parse_args()
    if args.floor:
        body = render_floor({shape: floor_seconds(shape) for shape in QWEN3_8B_SHAPES},
                            _measured_per_matrix(args.out))
        print(body)
        update_markdown_section(args.out, "diagnostics_floor", body)
        return
    before = _load()
    timings = run(args.size)
    loads = (before, _load())
    per_shape, shape_loads = None, ("?", "?")
    if not args.no_shapes:
        before = _load()
        per_shape = {shape: diagnose_matrix_seconds(shape) for shape in QWEN3_8B_SHAPES}
        shape_loads = (before, _load())
    body = render(args.size, timings, loads, per_shape, shape_loads)
    print(body)
    update_markdown_section(args.out, "diagnostics", body)


if __name__ == "__main__":
    main()
