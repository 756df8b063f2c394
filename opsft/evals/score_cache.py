"""Scores of record cached by what determines them, so that a model scored by several claims, map cells and the
calibration (the base, each GRPO run, SFT's snapshots) is scored once per cache (issue 34: arms shared across
claims share their scores too).

A score is a function of the weights (after the cast to float32 that scoring makes), the architecture, the
tokenizer, the problems drawn (``opsft.calibrate.scoring_draw``: family, split, seed, size; the task generators'
version) and the scorer (``SCORER_VERSION``; raise it whenever lm-eval's task templates, the verifier or the
generation budget change). Each is hashed into the entry's key; entries live under ``<cache>/scores/`` and are
written atomically, so a killed job leaves whole entries or none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from opsft.io import atomic_write_json
from opsft.organism.tasks import TASKS_VERSION

# The version of the scoring of record (opsft.evals.organism_scores: templates v2.0, answer_is_correct, <eos> or
# 64 new tokens); part of every key.
SCORER_VERSION = 1
FOLDER = "scores"


def model_digest(model: torch.nn.Module, tokenizer) -> str:
    """SHA-256 over the model's config, every tensor of its state (name, dtype, shape, bytes, in order) and the
    tokenizer's vocabulary: equal exactly when the same weights of the same model would be scored."""
    h = hashlib.sha256()
    config = getattr(model, "config", None)
    h.update((config.to_json_string(use_diff=False) if config is not None else type(model).__name__).encode())
    for name, tensor in model.state_dict().items():
        t = tensor.detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    vocab = getattr(tokenizer, "get_vocab", None)  # a stand-in without a vocabulary hashes by its type
    h.update(json.dumps(sorted(vocab().items()) if vocab else type(tokenizer).__name__).encode())
    return h.hexdigest()


def score_key(model: torch.nn.Module, tokenizer, draw: Mapping) -> str:
    """The cache key of scoring ``model`` on ``draw``: the model's digest, the draw, the task generators' and
    the scorer's versions."""
    spec = json.dumps({"model": model_digest(model, tokenizer), "draw": draw, "tasks": TASKS_VERSION,
                       "scorer": SCORER_VERSION}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:32]


def cached_scores(model: torch.nn.Module, tokenizer, draw: Mapping, cache: Path,
                  compute: Callable[[], Mapping[str, list[int]]], refresh: bool = False) -> dict[str, list[int]]:
    """Per set of ``draw``, the 0/1 verdicts per problem: read from ``cache`` when an entry for this key holds
    every set, else ``compute()``d and written (``refresh``: computed and written even when an entry exists,
    e.g. when a cross-check must see the scorer run). A corrupt entry is computed again and replaced."""
    path = cache / FOLDER / f"{score_key(model, tokenizer, draw)}.json"
    if not refresh and path.is_file():
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            if entry.get("draw") == json.loads(json.dumps(draw)) and set(entry["correct"]) == set(draw):
                return {k: [int(x) for x in v] for k, v in entry["correct"].items()}
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            pass
    correct = {k: [int(x) for x in v] for k, v in compute().items()}
    atomic_write_json(path, {"draw": draw, "correct": correct})
    return correct
