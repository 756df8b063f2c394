"""Measure the organism build: cold (empty cache: pretrain base and teacher, measure their accuracy) and warm
(load from the cache); write them as section ``organism`` of results/perf.md, beside the figures recorded at
44326c9 (the Speed issue's).

Usage: python scripts/bench_organism.py [--organism micro] [--length-chunks 1 4] [--out results/perf.md]
[--cache DIR]

Pretraining runs at the fixed thread count of every cached computation (``opsft.threads``), whatever the
machine has. ``--length-chunks`` builds the organism once per value of its recipe's ``pretrain_length_chunks``
(each batch in that many length-sorted, trimmed groups: ``opsft.objectives.batch_logprobs``), one after the other;
a value other than the recipe's own is another organism (another digest), built with the recipe patched.

With ``--cache`` the first build goes into DIR (which must not hold the organism yet) and is kept there, so the
measurement doubles as the first build of a working cache; without it temporary folders are used and removed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from unittest import mock

from opsft.threads import CACHED_THREADS

# The Speed issue's figures (44326c9, the recorded micro build), shown beside this run's.
RECORDED = {"cold build, total (s)": 681, "of which base pretraining (s)": 113,
            "of which teacher pretraining (s)": 674, "of which accuracy measurement (s)": 2.91,
            "warm load (s)": 0.026, "base in-domain (arith) accuracy (%)": 27,
            "teacher in-domain (arith) accuracy (%)": 90.5}


def bench_build(name: str, cache: Path, length_chunks: int) -> dict[str, float]:
    """Seconds to build organism ``name``, its recipe's ``pretrain_length_chunks`` set to ``length_chunks``, into
    the empty cache folder ``cache`` (per model and in all) and to load it warm from there; and its accuracies."""
    from opsft.organism.specs import ORGANISMS
    from opsft.pretraining import build_organism

    models = cache / "organisms" / "models"
    if models.exists() and any(models.iterdir()):
        raise SystemExit(f"--cache {cache}: {models} already holds organism models, so the build would not be cold")
    os.environ["OPSFT_CACHE"] = str(cache)
    spec = replace(ORGANISMS[name], pretrain_length_chunks=length_chunks)
    with mock.patch.dict(ORGANISMS, {name: spec}):
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
    """Build once cold and once warm per ``--length-chunks`` value and write the markdown section."""
    from opsft.io import update_markdown_section
    from opsft.organism.specs import ORGANISMS
    from opsft.provenance import provenance

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--organism", default="micro")
    parser.add_argument("--length-chunks", type=int, nargs="+", default=None,
                        help="pretrain_length_chunks values to build with (default: the recipe's own)")
    parser.add_argument("--out", default="results/perf.md")
    parser.add_argument("--cache", type=Path, default=None, help="build the first value into this cache and keep it")
    args = parser.parse_args()
    own = ORGANISMS[args.organism].pretrain_length_chunks
    columns = {}
    for i, chunks in enumerate(args.length_chunks or [own]):
        if i == 0 and args.cache is not None:
            columns[chunks] = bench_build(args.organism, args.cache.resolve(), chunks)
        else:
            with tempfile.TemporaryDirectory() as cache:
                columns[chunks] = bench_build(args.organism, Path(cache), chunks)
    prov = provenance()
    lines = [f"Organism `{args.organism}` build, {CACHED_THREADS} torch thread per model (pinned for every cached "
             "computation; base and teacher train in parallel), one build per value of the recipe's "
             f"`pretrain_length_chunks` (the recipe's own: {own}), one after the other. "
             "`python scripts/bench_organism.py`",
             f"commit {(prov['commit'] or '?')[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, "
             f"{prov['machine']['cpu']}, load average {os.getloadavg()[0]:.1f} at the end (other jobs inflate "
             f"times), {prov['utc']}", "",
             "| measure | recorded at 44326c9 | " + " | ".join(f"length chunks {c}" for c in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    lines += [f"| {key} | {RECORDED[key]:.3g} | " + " | ".join(f"{col[key]:.3g}" for col in columns.values()) + " |"
              for key in RECORDED]
    text = "\n".join(lines)
    update_markdown_section(args.out, "organism", text)
    print(text)


if __name__ == "__main__":
    main()
