"""Batched sampling of k completions per prompt from an in-memory transformers model (left padding)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from opsft.sampling.hf import HFSampler


@dataclass(frozen=True)
class Sampling:
    """How completions are drawn: k per prompt; temperature 0 means greedy (then use k = 1)."""

    k: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 32
    batch_size: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 1 or self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError(f"Sampling needs k, max_new_tokens and batch_size >= 1: {self}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"Sampling needs temperature >= 0 and 0 < top_p <= 1: {self}")


def generate(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], sampling: Sampling
) -> list[list[str]]:
    """``sampling.k`` decoded continuations (prompt removed, special tokens skipped) for each prompt, in order,
    drawn by the training sampler (:class:`opsft.sampling.hf.HFSampler`) in batches of ``batch_size``."""
    if tokenizer.padding_side != "left":
        raise ValueError("generation needs a left-padding tokenizer (tokenizer.padding_side == 'left')")
    sampler = HFSampler(tokenizer)
    per_batch = max(1, sampling.batch_size // sampling.k)
    out: list[list[str]] = []
    for start in range(0, len(prompts), per_batch):
        chunk = list(prompts[start : start + per_batch])
        texts = sampler.sample(model, chunk, sampling.k, sampling.temperature, sampling.max_new_tokens,
                               sampling.seed + start, top_p=sampling.top_p).texts
        out.extend(texts[i : i + sampling.k] for i in range(0, len(texts), sampling.k))
    return out
