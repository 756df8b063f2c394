"""Time the claims' scorer of record, lm-eval (``opsft.evals.organism_scores.lm_eval_scored``: HFLM over the
in-memory model, the family's local task, log_samples), against the in-house greedy scorer it is cross-checked
with (``opsft.organism.accuracy.correctness``: the organism's sampler and ``tasks.is_correct``), in seconds per
1000 problems, on the nano and micro organisms' bases (the smoke and ci students) and on random-init nano and
`small` models (the worst case: they never stop before the token budget; `small` random init is the case of the
`regime` scale's scoring budget, ``bench_regime.TARGETS["scoring"]``); repetitions alternate the two scorers.
Both run in this one process at the pinned thread count of ``calibrate.score_problems``. Writes section
``scoring`` of results/perf.md.

Usage: OPSFT_CACHE=... python scripts/bench_scoring.py [--n 1000] [--repeats 3] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from bench_regime import TARGETS

from opsft.calibrate import TEST_DRAW_SEED
from opsft.evals.organism_scores import lm_eval_scored
from opsft.organism import tasks
from opsft.organism.accuracy import correctness
from opsft.provenance import provenance
from opsft.threads import CACHED_THREADS, pinned_threads

FAMILIES = ("arith", "neg")  # the in-domain test split and one held-out family of the claims' scoring
FIXED_COST_PROBLEMS = 8
BUDGET_MODEL = "small, random init"  # the `regime` scale's student, never stopping early: its scoring budget's case


def timed(fn: Callable[[], list[int]]) -> tuple[float, list[int]]:
    """Wall seconds of one call and its per-problem verdicts."""
    start = time.perf_counter()
    verdicts = fn()
    return time.perf_counter() - start, verdicts


def scorers(model: torch.nn.Module, tokenizer, problems: Sequence[tasks.Problem]) -> dict[str, Callable]:
    """The two scorers on ``problems``, each returning 0/1 per problem."""
    return {"organism": lambda: correctness(model, tokenizer, problems)[:, 0].int().tolist(),
            "lm-eval": lambda: list(lm_eval_scored(model, tokenizer, {"set": problems})["set"].correct)}


def compare(model: torch.nn.Module, tokenizer, problems: Sequence[tasks.Problem], repeats: int) -> dict[str, float]:
    """Median seconds per 1000 problems of each scorer over ``repeats`` alternating rounds, and the number of
    problems on which their verdicts differ."""
    times: dict[str, list[float]] = {"organism": [], "lm-eval": []}
    verdicts: dict[str, list[int]] = {}
    for _ in range(repeats):
        for name, fn in scorers(model, tokenizer, problems).items():
            seconds, verdicts[name] = timed(fn)
            times[name].append(1000 * seconds / len(problems))
    differ = sum(a != b for a, b in zip(verdicts["organism"], verdicts["lm-eval"], strict=True))
    return {**{name: statistics.median(t) for name, t in times.items()}, "differ": differ}


def render(rows: list[tuple[str, str, int, dict[str, float]]], fixed: dict[str, float], repeats: int) -> str:
    """The markdown section: what was timed, provenance, one row per (model, family), the fixed cost of a call
    and the `regime` budget."""
    prov = provenance()
    regime = [r for model, family, _, r in rows if model == BUDGET_MODEL]
    lines = [
        "Scoring greedy accuracy: the claims' scorer of record, lm-eval (`evals.organism_scores.lm_eval_scored`: "
        "HFLM over the in-memory model, the family's local task, log_samples), against the in-house greedy scorer "
        "it is cross-checked with (`accuracy.correctness`: the organism's sampler and `tasks.is_correct`), seconds "
        f"per 1000 problems, median of {repeats} alternating rounds in one process, {CACHED_THREADS} torch thread "
        "(as `calibrate.score_problems`). `python scripts/bench_scoring.py`",
        f"commit {str(prov['commit'])[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, "
        f"{prov['machine']['cpu']}, {prov['machine']['cores']} cores, load average {os.getloadavg()[0]:.1f} "
        f"at the end (other jobs inflate times), {prov['utc']}",
        "",
        "| model | family (test split) | problems | in-house scorer (s / 1000) | lm-eval (s / 1000) | ratio "
        "| problems scored differently |",
        "|---|---|---|---|---|---|---|",
        *(f"| {model} | {family} | {n} | {r['organism']:.2f} | {r['lm-eval']:.2f} | "
          f"{r['lm-eval'] / r['organism']:.1f}x | {r['differ']:.0f} |" for model, family, n, r in rows),
        "",
        f"Fixed cost of one call on {FIXED_COST_PROBLEMS} arith problems (s): "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in fixed.items()) + ".",
        f"`regime` budget (`bench_regime.TARGETS`): {TARGETS['scoring']:.0f} s per 1000 problems on {BUDGET_MODEL}; "
        f"lm-eval takes {max(r['lm-eval'] for r in regime):.1f} s at most here, "
        f"{max(r['lm-eval'] / r['organism'] for r in regime):.2f}x the in-house scorer under the same load.",
    ]
    return "\n".join(lines)


def bench_models() -> tuple[dict[str, torch.nn.Module], object]:
    """The models timed (fp32, fused layers as the organisms build them) and their tokenizer."""
    from opsft.organism.models import build_model
    from opsft.pretraining import build_organism

    nano, micro = build_organism("nano"), build_organism("micro")
    models = {"nano base": nano.base, "micro base": micro.base, "nano, random init": build_model("nano", seed=0),
              BUDGET_MODEL: build_model("small", seed=0)}
    return {label: model.float().eval() for label, model in models.items()}, nano.tokenizer


def main() -> None:
    """Time both scorers on each model and family and write the markdown section."""
    from opsft.io import update_markdown_section

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    models, tokenizer = bench_models()
    rows = []
    with pinned_threads():
        small = tasks.generate("arith", "test", FIXED_COST_PROBLEMS, TEST_DRAW_SEED)
        per_1000 = compare(models["nano base"], tokenizer, small, args.repeats)
        fixed = {name: per_1000[name] * FIXED_COST_PROBLEMS / 1000 for name in ("organism", "lm-eval")}
        for family in FAMILIES:
            problems = tasks.generate(family, "test", args.n, TEST_DRAW_SEED, at_most=True)
            for label, model in models.items():
                rows.append((label, family, len(problems), compare(model, tokenizer, problems, args.repeats)))
                print(rows[-1], flush=True)
    text = render(rows, fixed, args.repeats)
    update_markdown_section(args.out, "scoring", text)
    print(text)


if __name__ == "__main__":
    main()
