"""Batched sampling of k completions per prompt from an in-memory transformers model (left padding)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


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


@torch.inference_mode()
def generate(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], sampling: Sampling
) -> list[list[str]]:
    """``sampling.k`` decoded continuations (prompt removed, special tokens skipped) for each prompt, in order."""
    if tokenizer.padding_side != "left":
        raise ValueError("generation needs a left-padding tokenizer (tokenizer.padding_side == 'left')")
    was_training = model.training
    model.eval()
    torch.manual_seed(sampling.seed)
    greedy = sampling.temperature == 0
    options = {"do_sample": False} if greedy else {
        "do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0
    }
    per_batch = max(1, sampling.batch_size // sampling.k)
    out: list[list[str]] = []
    for start in range(0, len(prompts), per_batch):
        batch = tokenizer(list(prompts[start : start + per_batch]), return_tensors="pt", padding=True)
        tokens = model.generate(
            **batch,
            max_new_tokens=sampling.max_new_tokens,
            num_return_sequences=sampling.k,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **options,
        )
        texts = tokenizer.batch_decode(tokens[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        out.extend(texts[i : i + sampling.k] for i in range(0, len(texts), sampling.k))
    model.train(was_training)
    return out
