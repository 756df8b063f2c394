"""Measure the evaluators: math-verify checks/s, evalplus tasks/s on all of MBPP+, and one organism model's
suite wall time; write them as section ``evals`` of results/perf.md.

Usage: python scripts/bench_evals.py [--suite ci] [--threads 2] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import torch


def bench_math() -> dict[str, float]:
    """Checks per second on the integer fast path and on the math-verify pool (LaTeX fractions)."""
    from opsft.evals.math import are_correct

    n_fast, n_slow = 20000, 400
    start = time.perf_counter()
    are_correct([f"so \\boxed{{{i}}}" for i in range(n_fast)], [str(i) for i in range(n_fast)])
    fast = n_fast / (time.perf_counter() - start)
    are_correct(["\\boxed{\\frac{1}{2}}"], ["0.5"])  # start the workers outside the timing
    start = time.perf_counter()
    ok = are_correct([f"\\boxed{{\\frac{{{i}}}{{2}}}}" for i in range(n_slow)], [str(i / 2) for i in range(n_slow)])
    slow = n_slow / (time.perf_counter() - start)
    assert all(ok)
    return {"math fast path (checks/s)": fast, "math-verify pool (checks/s)": slow}


def bench_evalplus() -> dict[str, float]:
    """Ground-truth time and canonical-solution tasks/s over all 378 MBPP+ tasks (must score 100%)."""
    from opsft.evals.evalplus_adapter import canonical_program, check_solutions, ground_truth, load_mbpp_plus

    problems = load_mbpp_plus()
    start = time.perf_counter()
    expected = ground_truth(problems)
    truth_s = time.perf_counter() - start
    start = time.perf_counter()
    results = check_solutions(problems, [(t, canonical_program(p)) for t, p in problems.items()], expected)
    rate = len(results) / (time.perf_counter() - start)
    passed = sum(r.plus_ok for r in results)
    return {"MBPP+ ground truth (s, uncached)": truth_s, "MBPP+ canonical pass rate": passed / len(results),
            "evalplus (tasks/s)": rate}


def bench_suite(suite: str) -> dict[str, float]:
    """Wall time of ``evaluate`` on the micro organism's base (trained: it stops at <eos>) and on a freshly
    initialised micro model (the worst case: it never stops before the token budget)."""
    from opsft.evals.suite import evaluate
    from opsft.organism.models import build_model
    from opsft.pretraining import build_organism

    org = build_organism("micro")
    out = {}
    for label, model in (("trained base", org.base), ("random init", build_model("micro", seed=0))):
        start = time.perf_counter()
        frame = evaluate(model, org.tokenizer, suite)
        out[f"organism suite '{suite}', {label} (s, {len(frame)} rows)"] = time.perf_counter() - start
    return out


def main() -> None:
    """Run the three measurements and write the markdown section."""
    from opsft.io import write_figures_section

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="ci")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        os.environ.setdefault("XDG_CACHE_HOME", cache)  # evalplus reads it at import, below
        figures = {**bench_math(), **bench_evalplus(), **bench_suite(args.suite)}
    caption = (f"Evaluators on {platform.processor() or platform.machine()}, {args.threads} torch threads, "
               f"load average {os.getloadavg()[0]:.1f} at the end (other jobs inflate times).")
    print(write_figures_section(args.out, "evals", caption, figures))


if __name__ == "__main__":
    main()
