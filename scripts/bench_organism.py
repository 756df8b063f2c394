"""Measure the organism build: cold (empty cache: pretrain base and teacher, measure their accuracy) and warm
(load from the cache); write them as section ``organism`` of results/perf.md.

Usage: python scripts/bench_organism.py [--organism micro] [--threads 2] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import torch


def bench_build(name: str) -> dict[str, float]:
    """Seconds to build organism ``name`` into an empty cache (per model and in all) and to load it warm."""
    from opsft.organism.build import build_organism

    with tempfile.TemporaryDirectory() as cache:
        os.environ["OPSFT_CACHE"] = cache
        start = time.perf_counter()
        cold = build_organism(name)
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        build_organism(name)
        warm_s = time.perf_counter() - start
    seconds = cold.report["build_seconds"]
    return {"cold build, total (s)": cold_s, "of which base pretraining (s)": seconds["base"],
            "of which teacher pretraining (s)": seconds["teacher"], "of which accuracy measurement (s)": seconds["measure"],
            "warm load (s)": warm_s,
            "base in-domain (arith) accuracy (%)": 100 * cold.report["accuracy"]["base"]["arith"],
            "teacher in-domain (arith) accuracy (%)": 100 * cold.report["accuracy"]["teacher"]["arith"]}


def main() -> None:
    """Build once cold and once warm and write the markdown section."""
    from opsft.io import write_figures_section

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--organism", default="micro")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    figures = bench_build(args.organism)
    caption = (f"Organism `{args.organism}` build on {platform.processor() or platform.machine()}, {args.threads} "
               f"torch threads, load average {os.getloadavg()[0]:.1f} at the end (other jobs inflate times).")
    print(write_figures_section(args.out, "organism", caption, figures))


if __name__ == "__main__":
    main()
