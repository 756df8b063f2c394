"""A lean decode loop over a causal LM's forward and a preallocated KV cache: the distribution ``model.generate``
samples from (the same inputs, warpers and draw), at less cost:

- one prefill per prompt: the ``P`` prompts are run once and their cache and last logits repeated for the ``n``
  samples of each (``generate`` prefills all ``N = P * n`` rows);
- finished rows leave the batch: a row that has produced <eos> is dropped from the next step's forward and from
  the cache (``generate`` keeps all ``N`` rows to the end);
- the cache writes into preallocated buffers and hands attention views of the filled length (no per-step
  concatenation).

What stays as ``generate`` has it (transformers 5, ``GenerationMixin._sample``): positions ``cumsum(mask) - 1``
(0 on left padding), the 2-D mask (dropped when it is all ones), ``logits_to_keep=1``, float32 last-position
logits, the temperature then top-p warpers, ``softmax`` and ``multinomial`` (or ``argmax`` when greedy), <eos>
then ``pad`` after it, and the stop once every row has produced <eos> or after ``max_new_tokens`` tokens.

What differs: on CPU a row's logits depend on the rows it is batched with (last bits, up to ~1e-6 on the
organism's models), so the logits differ from ``generate``'s in their last bits, and a sampled draw consumes
the RNG for the live rows only: the samples are draws of the same distribution, not ``generate``'s draws.
``tests/test_lean_sampler.py`` checks every step's logits against a full forward of the decoded sequence
(float64 tolerance 1e-5) and greedy tokens against ``generate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache, GenerationMixin
from transformers.cache_utils import DynamicLayer
from transformers.generation.logits_process import LogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper

# generation-config fields that change nothing of the distribution ``lean_tokens`` draws from (ids it is given, defaults it assumes)
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


def lean_decodes(model: torch.nn.Module) -> bool:
    """Whether ``lean_tokens`` samples ``model.generate``'s distribution for ``model``: a decoder-only LM on
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
    plain = all(type(layer) is DynamicLayer
                for layer in DynamicCache(config=model.config.get_text_config(decoder=True)).layers)
    return (stock and neutral and plain and model._supports_default_dynamic_cache()
            and model._supports_logits_to_keep())


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

    def take_rows(self, rows: torch.Tensor) -> None:
        """Keep the cache rows ``rows`` (B',) (indices into the batch, repeats allowed), in that order."""
        self.key_buffer = self.key_buffer.index_select(0, rows)  # (B', H, capacity, D)
        self.value_buffer = self.value_buffer.index_select(0, rows)  # (B', H, capacity, D)
        self.keys = self.key_buffer[..., :self.filled, :]
        self.values = self.value_buffer[..., :self.filled, :]


def kv_cache(model: torch.nn.Module, capacity: int) -> DynamicCache:
    """``generate``'s ``DynamicCache`` for ``model``, every layer preallocated for ``capacity`` positions
    (``lean_decodes`` has checked that every layer is a plain ``DynamicLayer``)."""
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    cache.layers = [PreallocatedLayer(capacity) for _ in cache.layers]
    return cache


def take_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keep the batch rows ``rows`` (B',) of every layer of ``cache``."""
    for layer in cache.layers:
        layer.take_rows(rows)


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
    """(P*n, Lp + Lc) prompt + completion ids of left-padded (P, Lp) prompts, laid out as ``model.generate``
    returns them: the ``n`` samples of a prompt adjacent, ``pad`` after a row's <eos>, and Lc <=
    ``max_new_tokens`` the steps until every row has emitted <eos>."""
    n_rows = input_ids.shape[0] * d.n
    mask = attention_mask  # (P, Lp), then (A, Lp + step) for the A rows still decoding
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)  # (P, Lp)
    all_ones = bool(mask.eq(1).all())
    cache, chain = kv_cache(model, input_ids.shape[1] + d.max_new_tokens), warpers(d)
    logits = last_logits(model, input_ids, None if all_ones else mask, positions, cache)  # (P, V): one prefill
    copies = torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(d.n)  # (N,)
    take_rows(cache, copies)
    logits, mask, positions = logits[copies], mask[copies], positions[copies, -1:]  # (N, V), (N, Lp), (N, 1)
    live = torch.arange(n_rows, device=input_ids.device)  # (A,) the batch row of each decoding row
    drawn = torch.full((n_rows, d.max_new_tokens), d.pad_id, dtype=input_ids.dtype, device=input_ids.device)
    steps = 0
    while True:
        token = next_tokens(logits, chain, d)  # (A,)
        drawn[live, steps] = token
        steps += 1
        going = token.ne(d.eos_id)  # (A,)
        if steps == d.max_new_tokens or not bool(going.any()):
            break
        if not bool(going.all()):
            kept = going.nonzero().squeeze(1)  # (A',)
            take_rows(cache, kept)
            live, token, mask, positions = live[kept], token[kept], mask[kept], positions[kept]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # (A, Lp + steps)
        positions = positions + 1  # (A, 1)
        logits = last_logits(model, token[:, None], None if all_ones else mask, positions, cache)  # (A, V)
    return torch.cat([input_ids[copies], drawn[:, :steps]], dim=1)  # (N, Lp + Lc)
