"""Measurements that claim tests share, built on the diagnostics and the calibration's scoring."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from opsft.calibrate import score
from opsft.diagnostics import endpoint_summary
from opsft.runs import RunResult

ACCURACIES = ("in_domain", "train_set", "held_out_mean")


def principal_k(result: RunResult) -> int:
    """k for principal angles at the same k/d ratio as GEO's k = 512 on Qwen3-8B's d = 4096 (1/8): at the
    organism's width, k = 512 would span the whole space and every angle would be 0 by construction."""
    return max(1, result.load_model().config.hidden_size // 8)


def endpoint_metrics(result: RunResult) -> dict[str, float]:
    """GEO Table 1 quantities of a run's update (step 0 -> final), from ``endpoint_summary``:
    ``updated_pct`` (bf16-visible updated share, %), ``angle`` (principal angle between top-k singular
    subspaces, radians, mean of the left and right sides, averaged over layer matrices), ``nss``, and
    ``principal_excess`` / ``low_excess``: overlap of the visible updates with the principal / low-magnitude
    mask minus the random baseline alpha (< 0: below random)."""
    summary = endpoint_summary(result.snapshot(0), result.snapshot(), k=principal_k(result))
    mats, alpha = summary["matrices"], summary["settings"]["alpha"]
    return {
        "updated_pct": 100 * summary["bf16_sparsity"]["overall"]["updated"],
        "angle": (mats["angle_left_mean"]["mean"] + mats["angle_right_mean"]["mean"]) / 2,
        "nss": mats["nss"]["mean"],
        "principal_excess": mats["principal"]["mean"] - alpha,
        "low_excess": mats["low_magnitude"]["mean"] - alpha,
    }


def accuracies(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, scale: Mapping[str, Any]) -> dict[str, float]:
    """Greedy accuracy (%) on held-out in-domain problems, on the training set (X06: matched fit) and the
    mean over held-out abilities, as the calibration scores them (``opsft.calibrate.score``)."""
    scores = score(model, tokenizer, scale)
    return {k: scores[k] for k in ACCURACIES}
