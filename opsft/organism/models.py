"""Tiny Qwen3-architecture causal LMs in named sizes, built from a config (never downloaded)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from opsft.fused_layers import fuse
from opsft.organism.tokenizer import build_tokenizer


@dataclass(frozen=True)
class ModelSize:
    """Width and depth of one named organism size."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    max_positions: int = 128


SIZES: dict[str, ModelSize] = {
    "nano": ModelSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=192),  # ~0.1M: unit tests
    "micro": ModelSize(hidden=128, layers=2, heads=4, kv_heads=2, intermediate=384),  # ~0.4M: the student
    "mini": ModelSize(hidden=192, layers=3, heads=6, kv_heads=2, intermediate=512),  # ~1.2M: the teacher
    "small": ModelSize(hidden=320, layers=6, heads=8, kv_heads=4, intermediate=960),  # ~7M: scale trend
}


def qwen3_config(size: str, vocab_size: int, pad_id: int, bos_id: int, eos_id: int) -> Qwen3Config:
    """The transformers Qwen3 config of a named organism size (tied embeddings, fp32, eager-free SDPA)."""
    if size not in SIZES:
        raise KeyError(f"unknown organism size {size!r}; known: {', '.join(SIZES)}")
    s = SIZES[size]
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.hidden // s.heads,
        max_position_embeddings=s.max_positions,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        attn_implementation="sdpa",
    )


def build_model(size: str, seed: int = 0, fused: bool = True) -> Qwen3ForCausalLM:
    """A freshly initialised organism model of a named size, seeded, in fp32 on CPU; its MLP gates and RMS norms
    run on the fused CPU kernels (``opsft.fused_layers.fuse``) unless ``fused=False`` (the stock transformers
    model, e.g. for a contender that does not have them)."""
    tok = build_tokenizer()
    cfg = qwen3_config(size, len(tok), tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    return fuse(model) if fused else model


def parameter_count(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied tensors counted once)."""
    return sum(p.numel() for p in model.parameters())
