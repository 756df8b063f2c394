"""Seconds per diagnostic on one N x N matrix pair (default 4096), written to results/perf.md, section
"diagnostics". Usage: python scripts/bench_diagnostics.py [--size 4096] [--out results/perf.md]"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch

from opsft import diagnostics as D
from opsft.io import update_markdown_section
from opsft.provenance import provenance


def _pair(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A float32 W0 ~ N(0, 0.02^2) and W+ = W0 + an update of relative size ~1e-3, as after post-training."""
    gen = torch.Generator().manual_seed(0)
    w0 = 0.02 * torch.randn(size, size, generator=gen)
    return w0, w0 + 2e-5 * torch.randn(size, size, generator=gen)


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(size: int) -> list[tuple[str, float]]:
    """(metric, seconds) for every per-matrix diagnostic on one size x size pair."""
    w0, w1 = _pair(size)
    dw = w1 - w0
    sigma = torch.linalg.svdvals(dw.double())
    cases: list[tuple[str, Callable[[], object]]] = [
        ("bf16_unchanged_fraction", lambda: D.bf16_unchanged_fraction(w0, w1)),
        ("frobenius_norm", lambda: D.frobenius_norm(dw)),
        ("stable_rank", lambda: D.stable_rank(dw)),
        ("hill_tail_index (given singular values)", lambda: D.hill_tail_index(sigma)),
        ("spectral_shift (NSS)", lambda: D.spectral_shift(w0, w1)),
        ("principal_angles k=512", lambda: D.principal_angles(w0, w1, 512)),
        ("mask_overlap r=64 alpha=0.5", lambda: D.mask_overlap(w0, w1)),
        ("subspace_similarity k=16", lambda: D.subspace_similarity(dw, 2 * dw)),
        (
            "endpoint_summary, one matrix (shared SVDs)",
            lambda: D.endpoint_summary({"w": w0}, {"w": w1}, ["w"]),
        ),
        (
            "trajectory_summary, one matrix, one checkpoint",
            lambda: D.trajectory_summary([{"w": w0}, {"w": w1}], ["w"]),
        ),
    ]
    return [(label, _time(fn)) for label, fn in cases]


def render(size: int, timings: list[tuple[str, float]]) -> str:
    """The markdown section: provenance line and a metric | seconds table."""
    prov = provenance()
    lines = [
        f"Diagnostics: seconds per metric on one {size}x{size} matrix (float64 exact SVDs, CPU). "
        "`python scripts/bench_diagnostics.py`",
        f"commit {str(prov['commit'])[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, {prov['machine']['cpu']}, "
        f"{prov['machine']['torch_threads']} threads on {prov['machine']['cores']} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end (other jobs inflate times), {prov['utc']}",
        "",
        "| metric | seconds |",
        "|---|---|",
    ]
    lines += [f"| {label} | {seconds:.3f} |" for label, seconds in timings]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    body = render(args.size, run(args.size))
    print(body)
    update_markdown_section(args.out, "diagnostics", body)


if __name__ == "__main__":
    main()
