"""The one entry point: ``evaluate(model, tokenizer, suite=...)`` -> a tidy frame (task, metric, value, interval, n, k).

An organism suite scores, on the test split of :mod:`opsft.organism.tasks`:
- the in-domain math families: avg@k / pass@k / maj@k / accuracy std with :mod:`opsft.evals.math`, plus the
  behaviour metrics of their completions (length, case-split and logical cues per 1k words);
- the ``code`` family through evalplus (base and base+plus pass rates over all samples, pass@k);
- the held-out families through lm-eval (generation tasks with all k samples kept; multiple choice by
  log-likelihood);
- optionally the real math benchmarks (papers' protocol) and the real lm-eval tasks of OPSFT Table 1.
``interval`` is a 95% half-width (0 where none applies); ``n`` problems, ``k`` samples each.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from opsft.evals import organism
from opsft.evals.behaviour import behaviour
from opsft.evals.benchmarks import MathProtocol, benchmark_mean, score_math_benchmarks
from opsft.evals.evalplus_adapter import check_solutions, read_evalplus_jsonl, write_evalplus_jsonl
from opsft.evals.generation import Sampling, generate
from opsft.evals.lm_eval_adapter import (
    LocalTask,
    lm_eval_output,
    output_rows,
    run_real_tasks,
    write_local_tasks,
)
from opsft.evals.math import mean_ci95, mean_pass_at_k, score_completions
from opsft.organism import tasks

COLUMNS = ("task", "metric", "value", "interval", "n", "k")
Row = dict[str, Any]


@dataclass(frozen=True)
class Suite:
    """What ``evaluate`` runs; each family draws ``n`` test problems with ``seed``."""

    math_families: tuple[str, ...] = ("arith", "arith_alt")
    code_family: str | None = "code"
    held_out: tuple[str, ...] = tasks.HELD_OUT
    n: int = 64
    sampling: Sampling = field(default_factory=lambda: Sampling(k=4, temperature=1.0, max_new_tokens=48))
    seed: int = 0
    math_benchmarks: MathProtocol | None = None  # the real benchmarks: only for real models
    real_tasks: tuple[str, ...] = ()  # OPSFT Table 1 lm-eval names (skipped without local data)
    workers: int = 2


SUITES: dict[str, Suite] = {
    "smoke": Suite(n=8, sampling=Sampling(k=2, temperature=1.0, max_new_tokens=24)),
    "ci": Suite(n=64, sampling=Sampling(k=4, temperature=1.0, max_new_tokens=48)),
    "full": Suite(n=500, sampling=Sampling(k=8, temperature=1.0, max_new_tokens=64)),
}


def row(task: str, metric: str, value: float, interval: float, n: int, k: int) -> Row:
    """One tidy result row."""
    return {"task": task, "metric": metric, "value": float(value), "interval": float(interval), "n": n, "k": k}


def family_test_problems(family: str, n: int, seed: int) -> list[tasks.Problem]:
    """``n`` test problems of a family, or all of them when the family has fewer (e.g. the times table)."""
    try:
        return tasks.generate(family, "test", n, seed)
    except ValueError:
        low, high = 0, n  # the largest feasible count lies in [low, high)
        while high - low > 1:
            mid = (low + high) // 2
            try:
                tasks.generate(family, "test", mid, seed)
                low = mid
            except ValueError:
                high = mid
        if low == 0:
            raise
        return tasks.generate(family, "test", low, seed)


def math_family_rows(model: Any, tokenizer: Any, family: str, suite: Suite) -> list[Row]:
    """avg@k, pass@k, maj@k, accuracy std and behaviour metrics of one math family's test split, each answer
    judged by the organism's one rule (``tasks.answer_is_correct``), as its greedy scores are."""
    problems = family_test_problems(family, suite.n, suite.seed)
    completions = generate(model, tokenizer, [p.prompt for p in problems], suite.sampling)
    score, _ = score_completions(completions, [p.answer for p in problems], judge=tasks.answer_is_correct)
    flat = [c for group in completions for c in group]
    habits = behaviour(flat, [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in flat])
    n, k = score.n, score.k
    return [
        row(family, "avg_at_k", score.avg, score.avg_ci, n, k),
        row(family, "pass_at_k", score.pass_k, 0.0, n, k),
        row(family, "maj_at_k", score.maj, 0.0, n, k),
        row(family, "accuracy_std", score.std, 0.0, n, k),
        row(family, "response_length", habits.length, 0.0, n, k),
        row(family, "case_split_per_1k_words", habits.case_split_per_1k, 0.0, n, k),
        row(family, "logical_per_1k_words", habits.logical_per_1k, 0.0, n, k),
    ]


def code_family_verdicts(model: Any, tokenizer: Any, family: str, suite: Suite,
                         folder: Path) -> tuple[list[list[bool]], list[list[bool]]]:
    """Whether each sample of each test problem of the code family passes evalplus's base tests, and the base
    and extra "plus" tests: two (problems x k) matrices in the draw's order, the dataset written into ``folder``."""
    problems = family_test_problems(family, suite.n, suite.seed)
    path = write_evalplus_jsonl(organism.code_problems(problems), folder / f"{family}.jsonl")
    dataset = read_evalplus_jsonl(path, dataset=family)
    completions = generate(model, tokenizer, [p.prompt for p in problems], suite.sampling)
    task_ids = list(dataset)
    # The same program is checked once: sampled completions repeat often.
    unique = sorted({(task_ids[i], problems[i].prompt + c) for i, group in enumerate(completions) for c in group})
    verdicts = dict(zip(unique, check_solutions(dataset, unique, dataset=family, workers=suite.workers), strict=True))
    base = [[verdicts[(task_ids[i], problems[i].prompt + c)].base_ok for c in g] for i, g in enumerate(completions)]
    plus = [[verdicts[(task_ids[i], problems[i].prompt + c)].plus_ok for c in g] for i, g in enumerate(completions)]
    return base, plus


def code_family_rows(model: Any, tokenizer: Any, family: str, suite: Suite, folder: Path) -> list[Row]:
    """evalplus base / base+plus pass rates (mean over all samples) and base+plus pass@k of the code family
    (``code_family_verdicts``)."""
    base, plus = code_family_verdicts(model, tokenizer, family, suite, folder)
    n, k = len(base), suite.sampling.k
    return [
        row(family, "base_avg_at_k", _mean(base), mean_ci95([sum(r) / k for r in base]), n, k),
        row(family, "plus_avg_at_k", _mean(plus), mean_ci95([sum(r) / k for r in plus]), n, k),
        row(family, "plus_pass_at_k", mean_pass_at_k(plus, k), 0.0, n, k),
    ]


def _mean(matrix: Sequence[Sequence[bool]]) -> float:
    """Mean of a 0/1 matrix with equal row lengths: avg@k."""
    return sum(sum(r) for r in matrix) / sum(len(r) for r in matrix)


def held_out_output(model: Any, tokenizer: Any, suite: Suite, folder: Path,
                    log_samples: bool = False) -> tuple[list[LocalTask], dict[str, Any]]:
    """The held-out families as lm-eval tasks ``organism_FAMILY`` (rendered into ``folder``) and the dict lm-eval
    returns for them (with each document's metrics under ``samples`` when ``log_samples``)."""
    local = [organism.local_task(f, family_test_problems(f, suite.n, suite.seed)) for f in suite.held_out]
    write_local_tasks(local, folder, suite.sampling)
    return local, lm_eval_output(model, tokenizer, [t.name for t in local], include_path=folder, batch_size=256,
                                 seed=suite.seed, log_samples=log_samples)


def held_out_rows(model: Any, tokenizer: Any, suite: Suite, folder: Path) -> list[Row]:
    """The held-out families' rows (``held_out_output``)."""
    return output_rows(held_out_output(model, tokenizer, suite, folder)[1])


def benchmark_rows(model: Any, tokenizer: Any, protocol: MathProtocol, max_new_tokens: int) -> list[Row]:
    """avg@k of each real math benchmark under ``protocol`` and their mean (the papers' headline)."""
    sampling = Sampling(k=protocol.k, temperature=protocol.temperature, top_p=protocol.top_p,
                        max_new_tokens=max_new_tokens)
    scores = score_math_benchmarks(lambda prompts, _k: generate(model, tokenizer, prompts, sampling), protocol)
    rows = [row(name, "avg_at_k", s.avg, s.avg_ci, s.n, s.k) for name, s in scores.items()]
    rows.append(row("math_mean", "avg_at_k", benchmark_mean(scores), 0.0, sum(s.n for s in scores.values()), protocol.k))
    return rows


def evaluate(model: Any, tokenizer: Any, suite: str | Suite = "ci") -> pd.DataFrame:
    """Every evaluation of ``suite`` (a name in SUITES or a Suite) on one model, as a tidy frame."""
    if isinstance(suite, str):
        if suite not in SUITES:
            raise KeyError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
        suite = SUITES[suite]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="opsft-evals-") as tmp:
        folder = Path(tmp)
        for family in suite.math_families:
            rows += math_family_rows(model, tokenizer, family, suite)
        if suite.code_family:
            rows += code_family_rows(model, tokenizer, suite.code_family, suite, folder)
        if suite.held_out:
            rows += held_out_rows(model, tokenizer, suite, folder / "lm_eval_tasks")
    if suite.math_benchmarks is not None:
        rows += benchmark_rows(model, tokenizer, suite.math_benchmarks, suite.sampling.max_new_tokens)
    if suite.real_tasks:
        rows += run_real_tasks(model, tokenizer, suite.real_tasks)
    return pd.DataFrame(rows, columns=list(COLUMNS))
