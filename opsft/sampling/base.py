"""The sampler interface shared by the HF and vLLM backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class Rollout:
    """Sampled sequences laid out for training.

    ``input_ids``/``attention_mask`` (N, L): left-padded prompt + completion (+ <eos>), right padding after;
    ``completion_mask`` (N, L-1): 1 on target positions that are completion tokens (the trained ones);
    ``texts``: decoded completions (no special tokens); N = len(prompts) * n, samples of a prompt adjacent.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]


class Sampler(Protocol):
    """Anything that samples ``n`` completions per prompt from a policy."""

    def sample(
        self, model: torch.nn.Module, prompts: list[str], n: int, temperature: float, max_new_tokens: int, seed: int,
        top_p: float = 1.0,
    ) -> Rollout:
        """Sample ``n`` completions for each prompt; ``temperature == 0`` means greedy."""
        ...


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only, so left padding does not shift them (as ``generate`` does)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def sequence_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L, V) logits of padded sequences (B, L), positions counted over real tokens. The mask reaches the
    model only where some row has a pad before a real token (left padding): with right padding alone, causal
    attention never takes a real token to a pad, so the model runs unmasked (SDPA's causal kernel, no (L, L)
    mask built) and every real token's logits are the masked forward's up to float rounding."""
    right_padded_only = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    return model(input_ids=input_ids, attention_mask=None if right_padded_only else attention_mask,
                 position_ids=position_ids(attention_mask)).logits
