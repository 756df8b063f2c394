"""Measure the organism build: cold (empty cache: pretrain base and teacher, measure their accuracy) and warm
(load from the cache); write them as section ``organism`` of results/perf.md.

Usage: python scripts/bench_organism.py [--organism micro] [--out results/perf.md] [--cache DIR]

Pretraining runs at the fixed thread count of every cached computation (``opsft.threads``), whatever the
machine has.

With ``--cache`` the cold build goes into DIR (which must not hold the organism yet) and is kept there, so the
measurement doubles as the first build of a working cache; without it a temporary folder is used and removed.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from opsft.threads import CACHED_THREADS


def bench_build(name: str, cache: Path) -> dict[str, float]:
    """Seconds to build organism ``name`` into the empty cache folder ``cache`` (per model and in all) and to
    load it warm from there."""
    from opsft.pretraining import build_organism

    models = cache / "organisms" / "models"
    if models.exists() and any(models.iterdir()):
        raise SystemExit(f"--cache {cache}: {models} already holds organism models, so the build would not be cold")
    os.environ["OPSFT_CACHE"] = str(cache)
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
    parser.add_argument("--out", default="results/perf.md")
    parser.add_argument("--cache", type=Path, default=None, help="build into this cache and keep it")
    args = parser.parse_args()
    if args.cache is None:
        with tempfile.TemporaryDirectory() as cache:
            figures = bench_build(args.organism, Path(cache))
    else:
        figures = bench_build(args.organism, args.cache.resolve())
    caption = (f"Organism `{args.organism}` build on {platform.processor() or platform.machine()}, "
               f"{CACHED_THREADS} torch thread (pinned for every cached computation), load average {os.getloadavg()[0]:.1f} at the end (other jobs inflate times).")
    print(write_figures_section(args.out, "organism", caption, figures))


if __name__ == "__main__":
    main()
