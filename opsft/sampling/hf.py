"""Hugging Face ``generate`` backend: batched, KV-cached sampling on CPU (or any torch device)."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from opsft.sampling.base import Rollout


class HFSampler:
    """Samples with ``model.generate``; the torch RNG is seeded per call so a resumed run draws the same."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer

    @torch.no_grad()
    def sample(
        self, model: torch.nn.Module, prompts: list[str], n: int, temperature: float, max_new_tokens: int, seed: int,
        top_p: float = 1.0,
    ) -> Rollout:
        """``n`` completions per prompt (greedy when ``temperature == 0``; nucleus ``top_p`` otherwise),
        stopped at <eos> or the budget."""
        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left").to(next(model.parameters()).device)
        was_training = model.training
        model.eval()
        torch.manual_seed(seed)
        out = model.generate(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            do_sample=temperature > 0,
            temperature=temperature if temperature > 0 else None,
            top_k=0 if temperature > 0 else None,
            top_p=top_p if temperature > 0 and top_p < 1 else None,
            num_return_sequences=n,
            max_new_tokens=max_new_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )  # (P*n, Lp + Lc)
        model.train(was_training)
        prompt_len = enc["input_ids"].shape[1]
        prompt_mask = enc["attention_mask"].repeat_interleave(n, dim=0)  # (N, Lp)
        completion = out[:, prompt_len:]  # (N, Lc)
        # keep tokens up to and including the first <eos>; the rest is padding
        is_eos = completion.eq(tok.eos_token_id)
        after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0  # (N, Lc) strictly after the first eos
        comp_mask = (~after_eos).long()  # (N, Lc)
        completion = completion.masked_fill(after_eos, tok.pad_token_id)
        input_ids = torch.cat([out[:, :prompt_len], completion], dim=1)  # (N, L)
        attention_mask = torch.cat([prompt_mask, comp_mask], dim=1)  # (N, L)
        target_is_completion = torch.zeros_like(attention_mask)
        target_is_completion[:, prompt_len:] = comp_mask
        texts = tok.batch_decode(completion, skip_special_tokens=True)
        return Rollout(input_ids, attention_mask, target_is_completion[:, 1:], texts)
