"""Filters and per-document metrics of the organism's lm-eval tasks (see the YAML templates beside this file).

Each document has ``answer`` (gold) and gets k completions (``repeats: k``); the metrics are those of
``opsft.evals.math``: avg@k = mean correctness over the k samples, pass@k = 1 - C(k-c, k)/C(k, k)
(1 if any sample is correct), maj@k = correctness of the most frequent boxed answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opsft.evals.math import are_correct, extract_boxed, maj_at_k, pass_at_k
from opsft.organism.tasks import answer_is_correct


def keep_all_samples(resps: Sequence[Sequence[str]], docs: Sequence[dict]) -> list[list[str]]:
    """Keep every repeat of every document (lm-eval's default ``take_first`` drops all but the first)."""
    return [list(samples) for samples in resps]


def _metrics(completions: Sequence[str], correct: Sequence[bool]) -> dict[str, float]:
    """avg@k, pass@k and maj@k of one document's k completions."""
    k = len(completions)
    return {
        "avg_at_k": sum(correct) / k,
        "pass_at_k": pass_at_k(k, sum(correct), k),
        "maj_at_k": maj_at_k([[extract_boxed(c) for c in completions]], [list(correct)]),
    }


def _process(doc: dict, results: Sequence, check: Callable[[list[str], str], list[bool]]) -> dict[str, float]:
    """Metrics of one document; ``results[0]`` is the list of its k completions (kept by the filter)."""
    completions = list(results[0]) if not isinstance(results[0], str) else [results[0]]
    return _metrics(completions, check(completions, str(doc["answer"])))


def process_math_verify(doc: dict, results: Sequence) -> dict[str, float]:
    """Correct when the completion has a ``\\boxed{}`` answer that math-verify (gold first) accepts."""
    return _process(doc, results, lambda comps, gold: are_correct(comps, [gold] * len(comps), require_boxed=True))


def process_exact_match(doc: dict, results: Sequence) -> dict[str, float]:
    """Correct when the completion's last ``\\boxed{}`` content equals the gold string exactly: the organism's
    own verifier (``opsft.organism.tasks.answer_is_correct``), so lm-eval and the organism's rewards give one
    answer one verdict."""
    return _process(doc, results, lambda comps, gold: [answer_is_correct(c, gold) for c in comps])
