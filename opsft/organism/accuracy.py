"""Scoring organism models on task families by sampling and verifying, in process: the quick path used while
building the organism, and the in-house greedy scorer that cross-checks the scorer of record (lm-eval,
``opsft.evals.organism_scores``) problem by problem."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from opsft.organism.tasks import Problem, is_correct
from opsft.sampling.hf import HFSampler

MAX_NEW_TOKENS = 64


def judged_completions(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    *,
    samples: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
    batch_size: int = 256,
) -> tuple[list[str], torch.Tensor]:
    """The sampled completions (``samples`` a problem, problem by problem), each ended at <eos> or after
    ``MAX_NEW_TOKENS`` tokens, and a (len(problems), samples) 0/1 tensor: whether each is verified correct
    (``tasks.is_correct``)."""
    sampler = HFSampler(tokenizer)
    texts, rows = [], []
    for i in range(0, len(problems), batch_size):
        chunk = problems[i : i + batch_size]
        roll = sampler.sample(model, [p.prompt for p in chunk], samples, temperature, MAX_NEW_TOKENS, seed + i)
        flags = [is_correct(p, t) for p, t in zip([p for p in chunk for _ in range(samples)], roll.texts, strict=True)]
        texts += roll.texts
        rows.append(torch.tensor(flags, dtype=torch.float32).view(len(chunk), samples))
    return texts, torch.cat(rows) if rows else torch.zeros(0, samples)


def correctness(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem],
                **sampling: Any) -> torch.Tensor:
    """A (len(problems), samples) 0/1 tensor: whether each sampled completion is verified correct
    (``judged_completions``, whose keyword arguments ``sampling`` are)."""
    return judged_completions(model, tokenizer, problems, **sampling)[1]


def accuracy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem]) -> float:
    """Greedy exact-answer accuracy (pass@1 at temperature 0) on ``problems``, in [0, 1]."""
    return correctness(model, tokenizer, problems).mean().item()
