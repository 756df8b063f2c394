"""Hugging Face backend: batched, KV-cached sampling on CPU (or any torch device).

Tokens come from the lean decode loop (:mod:`opsft.sampling.lean`: ``generate``'s distribution with one prefill
per prompt and finished rows dropped) wherever it applies, else (and with ``reference=True``) from
``model.generate`` itself."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from opsft.sampling.base import Rollout
from opsft.sampling.lean import Decoding, lean_decodes, lean_tokens


class HFSampler:
    """Samples ``n`` completions per prompt; the torch RNG is seeded per call so a resumed run draws the same.

    ``reference=True`` always decodes with ``model.generate`` (what the lean loop is tested against)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, reference: bool = False):
        self.tokenizer = tokenizer
        self.reference = reference

    @torch.no_grad()
    def sample(
        self, model: torch.nn.Module, prompts: list[str], n: int, temperature: float, max_new_tokens: int,
        seed: int, top_p: float = 1.0,
    ) -> Rollout:
        """``n`` completions per prompt (greedy when ``temperature == 0``; nucleus ``top_p`` otherwise),
        stopped at <eos> or the budget."""
        tok = self.tokenizer
        device = next(model.parameters()).device
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left").to(device)
        d = Decoding(n, temperature, top_p, max_new_tokens, tok.pad_token_id, tok.eos_token_id)
        decode = generate_tokens if self.reference or not lean_decodes(model) else lean_tokens
        was_training = model.training
        model.eval()
        torch.manual_seed(seed)
        out = decode(model, enc["input_ids"], enc["attention_mask"], d)  # (P*n, Lp + Lc)
        model.train(was_training)
        return layout(tok, out, enc["attention_mask"], n)


def generate_tokens(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    d: Decoding) -> torch.Tensor:
    """(P*n, Lp + Lc) prompt + completion ids from ``model.generate`` on left-padded (P, Lp) prompts."""
    return model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        do_sample=d.sampled,
        temperature=d.temperature if d.sampled else None,
        top_k=0 if d.sampled else None,
        top_p=d.top_p if d.sampled and d.top_p < 1 else None,
        num_return_sequences=d.n,
        max_new_tokens=d.max_new_tokens,
        pad_token_id=d.pad_id,
        eos_token_id=d.eos_id,
    )  # (P*n, Lp + Lc)


def layout(tok: PreTrainedTokenizerBase, out: torch.Tensor, prompt_mask: torch.Tensor, n: int) -> Rollout:
    """The rollout of decoded ``out`` (N, Lp + Lc) given the (P, Lp) prompt mask: tokens after a row's first
    <eos> become padding and leave the masks."""
    prompt_len = prompt_mask.shape[1]
    prompt_mask = prompt_mask.repeat_interleave(n, dim=0)  # (N, Lp)
    completion = out[:, prompt_len:]  # (N, Lc)
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
