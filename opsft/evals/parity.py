"""Organism problems scored through lm-eval, problem by problem, to set beside the organism's own greedy scorer
(``opsft.organism.accuracy.correctness``): the family's local task (``opsft.evals.organism.local_task``),
greedy, one sample, ``MAX_NEW_TOKENS`` new tokens, read back from lm-eval's logged samples."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opsft.evals.generation import Sampling
from opsft.evals.lm_eval_adapter import hub_offline, lm_eval_output, write_local_tasks
from opsft.evals.organism import local_task
from opsft.organism.accuracy import MAX_NEW_TOKENS
from opsft.organism.tasks import Problem

GREEDY = Sampling(k=1, temperature=0.0, max_new_tokens=MAX_NEW_TOKENS)


@dataclass(frozen=True)
class Scored:
    """lm-eval's verdict (0/1: its per-document ``avg_at_k`` of one sample) on each problem, in the problems'
    order, and the greedy completion it judged (after lm-eval's stop sequences)."""

    correct: tuple[int, ...]
    completions: tuple[str, ...]


def lm_eval_scored(model: Any, tokenizer: Any, problems: Sequence[Problem], batch_size: int = 256) -> Scored:
    """Score generated answers to problems of one family through lm-eval: its task ``organism_FAMILY``
    written with ``write_local_tasks`` under ``GREEDY`` sampling, run offline with ``log_samples``.

    Multiple-choice families (``mc``) are refused: lm-eval scores them by log-likelihood, which no greedy
    completion has a counterpart of."""
    if not problems or any(p.family != problems[0].family for p in problems):
        raise ValueError("lm_eval_scored needs a non-empty list of problems of one family")
    task = local_task(problems[0].family, problems)
    if task.template == "multiple_choice":
        raise ValueError(f"family {problems[0].family!r} is multiple choice: lm-eval scores it by log-likelihood")
    with tempfile.TemporaryDirectory(prefix="opsft-parity-") as tmp, hub_offline():
        folder = write_local_tasks([task], tmp, GREEDY)
        out = lm_eval_output(model, tokenizer, [task.name], include_path=folder, batch_size=batch_size,
                             log_samples=True)
    samples = sorted(out["samples"][task.name], key=lambda s: s["doc_id"])
    if [s["doc_id"] for s in samples] != list(range(len(problems))):
        raise RuntimeError(f"lm-eval logged {len(samples)} samples for {len(problems)} problems of {task.name}")
    return Scored(correct=tuple(int(s["avg_at_k"]) for s in samples),
                  completions=tuple(s["filtered_resps"][0][0] for s in samples))
