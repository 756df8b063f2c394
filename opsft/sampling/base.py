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
