"""A lean decode loop over a causal LM's forward and a preallocated KV cache: the tokens ``model.generate``
draws, bit for bit, without its per-call set-up, per-step machinery and the cache's per-step concatenation.

What it reproduces of ``generate`` (transformers 5, ``GenerationMixin._sample``), as every draw must match:

- the batch: each prompt repeated ``n`` times (adjacent) before the prefill, all ``N`` rows kept to the end (a
  row's logits depend on the batch it is computed in, so finished rows are neither dropped nor shared);
- the inputs: positions ``cumsum(mask) - 1`` (0 on left padding), the 2-D mask (dropped when it is all ones:
  SDPA then runs unmasked), ``logits_to_keep=1``, and attention over exactly the positions so far (the cache
  writes into preallocated buffers and hands attention views of the filled length, the values and shapes a
  ``DynamicCache`` hands it; a ``StaticCache`` attends over its whole length: other last bits of the logits);
- the draw: float32 last-position logits, the temperature then top-p warpers, ``softmax`` and one
  ``multinomial`` over all ``N`` rows a step (finished rows too: the RNG stream advances as in ``generate``),
  or ``argmax`` when greedy; a finished row gets ``pad``;
- the stop: after the step in which every row has produced <eos>, or after ``max_new_tokens`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache, GenerationMixin
from transformers.cache_utils import DynamicLayer
from transformers.generation.logits_process import LogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper

# generation-config fields that change nothing ``lean_tokens`` draws (ids it is given, defaults it assumes)
NEUTRAL_GENERATION_FIELDS = frozenset({"pad_token_id", "bos_token_id", "eos_token_id", "use_cache",
                                       "output_attentions", "output_hidden_states", "_from_model_config",
                                       "transformers_version"})


@dataclass(frozen=True)
class Decoding:
    """What to draw: ``n`` completions per prompt, at most ``max_new_tokens`` tokens each, stopped at
    ``eos_id`` and padded with ``pad_id``; greedy when ``temperature == 0``, else from
    softmax(logits / temperature) restricted to the smallest top-``top_p`` nucleus (``top_p == 1``: the
    whole vocabulary)."""

    n: int
    temperature: float
    top_p: float
    max_new_tokens: int
    pad_id: int
    eos_id: int

    def __post_init__(self):
        if not self.sampled and self.n != 1:
            raise ValueError(f"greedy decoding draws one completion per prompt (as generate), n={self.n}")

    @property
    def sampled(self) -> bool:
        """Whether tokens are drawn at random (else the argmax)."""
        return self.temperature > 0


def reproduces_generate(model: torch.nn.Module) -> bool:
    """Whether ``lean_tokens`` draws exactly what ``model.generate`` draws for ``model``: a decoder-only LM on
    the CPU (where the equivalence is tested), on the stock input preparation, default dynamic cache and
    ``logits_to_keep``, whose generation config adds no logits processor, stopping rule or extra output of
    its own (special-token ids and defaults only)."""
    if not isinstance(model, GenerationMixin) or model.config.is_encoder_decoder:
        return False
    if model.device.type != "cpu":
        return False
    cls, config = type(model), model.generation_config.to_diff_dict()
    stock = all(getattr(cls, name) is getattr(GenerationMixin, name)
                for name in ("generate", "prepare_inputs_for_generation",
                             "_update_model_kwargs_for_generation"))
    neutral = (set(config) <= NEUTRAL_GENERATION_FIELDS and config.get("use_cache", True) is not False
               and not config.get("output_attentions") and not config.get("output_hidden_states"))
    return stock and neutral and model._supports_default_dynamic_cache() and model._supports_logits_to_keep()


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` that writes into buffers of ``capacity`` positions instead of concatenating:
    ``update`` returns views of exactly the positions filled so far, the tensors ``DynamicLayer`` would
    return, without copying the whole cache every step."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Empty (B, H, capacity, D) key and value buffers, zero positions filled."""
        self.device, self.filled = key_states.device, 0
        batch_heads, head_dim = key_states.shape[:-2], key_states.shape[-1]
        self.key_buffer = key_states.new_empty(*batch_heads, self.capacity, head_dim)  # (B, H, capacity, D)
        self.value_buffer = value_states.new_empty(*batch_heads, self.capacity, head_dim)  # (B, H, cap, D)
        self.keys, self.values = self.key_buffer[..., :0, :], self.value_buffer[..., :0, :]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, H, S, D) states; return the (B, H, filled, D) views of all positions so far."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, self.filled = self.filled, self.filled + key_states.shape[-2]
        self.key_buffer[..., start:self.filled, :] = key_states
        self.value_buffer[..., start:self.filled, :] = value_states
        self.keys = self.key_buffer[..., :self.filled, :]  # (B, H, filled, D)
        self.values = self.value_buffer[..., :self.filled, :]  # (B, H, filled, D)
        return self.keys, self.values


def kv_cache(model: torch.nn.Module, capacity: int) -> DynamicCache:
    """``generate``'s ``DynamicCache`` for ``model``, plain layers preallocated for ``capacity`` positions."""
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer
                    for layer in cache.layers]
    return cache


def warpers(d: Decoding) -> list[LogitsProcessor]:
    """``generate``'s warpers for ``d``, in its order: logits / temperature (unless 1), then top-p."""
    if not d.sampled:
        return []
    chain: list[LogitsProcessor] = []
    if d.temperature != 1.0:
        chain.append(TemperatureLogitsWarper(float(d.temperature)))
    if d.top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p=d.top_p, min_tokens_to_keep=1))
    return chain


def next_tokens(logits: torch.Tensor, chain: list[LogitsProcessor], d: Decoding) -> torch.Tensor:
    """(N,) tokens from (N, V) float32 logits: argmax (greedy), or one multinomial draw from
    softmax(warped logits) per row."""
    if not d.sampled:
        return logits.argmax(dim=-1)  # (N,)
    for warp in chain:
        logits = warp(None, logits)  # (N, V)
    probs = torch.nn.functional.softmax(logits, dim=-1)  # (N, V)
    return torch.multinomial(probs, num_samples=1).squeeze(1)  # (N,)


def last_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None,
                positions: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
    """(N, V) float32 logits at the last of ``ids`` (N, S), the cache extended by S positions."""
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                logits_to_keep=1, return_dict=True)
    return out.logits[:, -1].float()  # (N, V)


@torch.no_grad()
def lean_tokens(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                d: Decoding) -> torch.Tensor:
    """(P*n, Lp + Lc) prompt + completion ids of left-padded (P, Lp) prompts, as ``model.generate`` returns
    them (Lc <= ``max_new_tokens``: the steps until every row has emitted <eos>)."""
    ids = input_ids.repeat_interleave(d.n, dim=0)  # (N, Lp)
    mask = attention_mask.repeat_interleave(d.n, dim=0)  # (N, Lp)
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)  # (N, Lp)
    step_mask = None if bool(mask.eq(1).all()) else mask  # (N, Lp) or None, as generate drops it
    cache, chain = kv_cache(model, ids.shape[1] + d.max_new_tokens), warpers(d)
    unfinished = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)  # (N,)
    step_ids, drawn = ids, []
    for step in range(d.max_new_tokens):
        if step:
            step_ids, positions = drawn[-1][:, None], positions[:, -1:] + 1  # (N, 1), (N, 1)
            if step_mask is not None:
                ones = step_mask.new_ones(step_mask.shape[0], 1)  # (N, 1)
                step_mask = torch.cat([step_mask, ones], dim=1)  # (N, Lp + step)
        token = next_tokens(last_logits(model, step_ids, step_mask, positions, cache), chain, d)  # (N,)
        drawn.append(torch.where(unfinished, token, d.pad_id))  # (N,)
        unfinished &= drawn[-1].ne(d.eos_id)
        if not bool(unfinished.any()):
            break
    return torch.cat([ids, torch.stack(drawn, dim=1)], dim=1)  # (N, Lp + Lc)
