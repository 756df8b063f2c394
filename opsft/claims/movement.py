"""What the rules-v3 movement guards read (``opsft.claims.registry.V3_RULES``): each compared arm's held-out
in-domain accuracy and its start's, recorded by claims whose own quantities are not accuracies (C01, C13, C17,
C20) or that did not score their start (C07, C14)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from transformers import PreTrainedTokenizerBase

from opsft.claims.measure import accuracies
from opsft.claims.recorder import ClaimRecorder


def record_in_domain(claim: ClaimRecorder, seed: int, models: Mapping[str, torch.nn.Module],
                     tokenizer: PreTrainedTokenizerBase) -> dict[str, float]:
    """Record, for each arm of ``models`` (``"base"`` for the start), its held-out in-domain accuracy with its
    per-problem scores (``opsft.claims.measure.accuracies``); returns arm -> accuracy (%)."""
    return {arm: claim.record(arm, seed, in_domain=accuracies(model, tokenizer, claim.scale)["in_domain"])["in_domain"]
            for arm, model in models.items()}
