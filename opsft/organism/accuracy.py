"""Scoring organism models on task families by sampling and verifying (the quick path used while building
and calibrating; the reported evaluation suite lives in ``opsft.evals``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from opsft.organism.tasks import Problem, is_correct
from opsft.sampling.hf import HFSampler

MAX_NEW_TOKENS = 64


def correctness(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    *,
    samples: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
    batch_size: int = 256,
) -> torch.Tensor:
    """A (len(problems), samples) 0/1 tensor: whether each sampled completion is verified correct."""
    sampler = HFSampler(tokenizer)
    rows = []
    for i in range(0, len(problems), batch_size):
        chunk = problems[i : i + batch_size]
        roll = sampler.sample(model, [p.prompt for p in chunk], samples, temperature, MAX_NEW_TOKENS, seed + i)
        flags = [is_correct(p, t) for p, t in zip([p for p in chunk for _ in range(samples)], roll.texts, strict=True)]
        rows.append(torch.tensor(flags, dtype=torch.float32).view(len(chunk), samples))
    return torch.cat(rows) if rows else torch.zeros(0, samples)


def accuracy(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem]) -> float:
    """Greedy exact-answer accuracy (pass@1 at temperature 0) on ``problems``, in [0, 1]."""
    return correctness(model, tokenizer, problems).mean().item()
