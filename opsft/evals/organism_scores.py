"""The organism's greedy scores of record, through lm-eval: each named set of problems of one generated-answer
family becomes a local task (``opsft.evals.organism.local_task``, rendered by ``write_local_tasks``), every set
runs in one lm-eval run over the in-memory model (HFLM), greedy, ``MAX_NEW_TOKENS`` new tokens, and each
problem's verdict (its ``avg_at_k`` of one sample) and the completion judged are read back from lm-eval's logged
samples.

One answer gets one score. This path and the in-house greedy scorer (``opsft.organism.accuracy.correctness``:
the training sampler and ``tasks.is_correct``, kept as a fast cross-check) judge a completion by one verifier,
the organism's ``tasks.answer_is_correct`` (which the tasks' ``process_results`` call), and end it where the
organism's sampler does: at <eos> or after ``MAX_NEW_TOKENS`` tokens (the tasks stop at no string).
``disagreements`` lists every problem on which the two paths still differ.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from opsft.evals.generation import Sampling
from opsft.evals.lm_eval_adapter import (
    LocalTask,
    hub_offline,
    lm_eval_output,
    logged_samples,
    write_local_tasks,
)
from opsft.evals.organism import local_task
from opsft.organism.accuracy import MAX_NEW_TOKENS, judged_completions
from opsft.organism.tasks import Problem

GREEDY = Sampling(k=1, temperature=0.0, max_new_tokens=MAX_NEW_TOKENS)
# Set (to anything but "" or "0") to have every scoring of record checked against the in-house scorer.
CROSS_CHECK_ENV = "OPSFT_SCORING_CROSS_CHECK"


@dataclass(frozen=True)
class Scored:
    """A verdict (0/1) on each problem of a set, in the set's order, and the greedy completion it judged."""

    correct: tuple[int, ...]
    completions: tuple[str, ...]


def set_task(name: str, problems: Sequence[Problem]) -> LocalTask:
    """The lm-eval task ``organism_NAME`` over one set of problems of one family; a ValueError naming the set
    when it is empty, mixes families, or is multiple choice (lm-eval scores that by log-likelihood, which no
    greedy completion has a counterpart of)."""
    families = sorted({p.family for p in problems})
    if len(families) != 1:
        raise ValueError(f"scoring set {name!r} needs problems of one family, has {families or 'none'}")
    task = local_task(families[0], problems)
    if task.template == "multiple_choice":
        raise ValueError(f"scoring set {name!r}: family {families[0]!r} is multiple choice, scored by log-likelihood")
    return dataclasses.replace(task, name=f"organism_{name}")


def lm_eval_scored(model: Any, tokenizer: Any, sets: Mapping[str, Sequence[Problem]],
                   batch_size: int = 256) -> dict[str, Scored]:
    """Each named set of problems scored through lm-eval (its task ``set_task``), all in one offline run under
    ``GREEDY`` sampling with ``log_samples``."""
    tasks = {name: set_task(name, problems) for name, problems in sets.items()}
    with tempfile.TemporaryDirectory(prefix="opsft-scores-") as tmp, hub_offline():
        folder = write_local_tasks(list(tasks.values()), tmp, GREEDY)
        out = lm_eval_output(model, tokenizer, [t.name for t in tasks.values()], include_path=folder,
                             batch_size=batch_size, log_samples=True)
    scored = {}
    for name, task in tasks.items():
        samples = logged_samples(out, task.name, len(task.rows))
        scored[name] = Scored(correct=tuple(int(s["avg_at_k"]) for s in samples),
                              completions=tuple(s["filtered_resps"][0][0] for s in samples))
    return scored


def in_house_scored(model: torch.nn.Module, tokenizer: Any, problems: Sequence[Problem]) -> Scored:
    """The in-house greedy scorer's verdicts and the completions it judged (``judged_completions``, what
    ``correctness`` reads)."""
    texts, verdicts = judged_completions(model, tokenizer, problems)
    return Scored(correct=tuple(verdicts[:, 0].int().tolist()), completions=tuple(texts))


def disagreements(model: torch.nn.Module, tokenizer: Any, sets: Mapping[str, Sequence[Problem]],
                  scored: Mapping[str, Scored]) -> list[str]:
    """One line (set, index, prompt, gold, both verdicts and completions) per problem on which the in-house
    scorer's verdict or completion differs from lm-eval's ``scored`` (``lm_eval_scored`` of the same sets)."""
    lines = []
    for name, problems in sets.items():
        ours, theirs = in_house_scored(model, tokenizer, problems), scored[name]
        for i, p in enumerate(problems):
            if (ours.correct[i], ours.completions[i]) != (theirs.correct[i], theirs.completions[i]):
                lines.append(f"{name}[{i}] {p.prompt!r} gold {p.answer!r}: in-house {ours.correct[i]} "
                             f"{ours.completions[i]!r}, lm-eval {theirs.correct[i]} {theirs.completions[i]!r}")
    return lines


def cross_check_requested() -> bool:
    """Whether ``CROSS_CHECK_ENV`` asks for every scoring of record to be checked against the in-house scorer."""
    return os.environ.get(CROSS_CHECK_ENV, "") not in ("", "0")


def check_against_in_house(model: torch.nn.Module, tokenizer: Any, sets: Mapping[str, Sequence[Problem]],
                           scored: Mapping[str, Scored]) -> None:
    """A RuntimeError listing every problem on which the in-house scorer differs from lm-eval's ``scored``."""
    lines = disagreements(model, tokenizer, sets, scored)
    if lines:
        raise RuntimeError(f"{len(lines)} problem(s) scored differently by lm-eval and the in-house scorer:\n"
                           + "\n".join(lines))
