"""Measurements that claim tests share, built on the diagnostics and the calibration's scoring."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from opsft.calibrate import score
from opsft.checkpoints import iter_tensors
from opsft.diagnostics import endpoint_summary, trajectory_summary, update_cosines
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


def stage_steps(result: RunResult) -> list[int]:
    """The training stages the trajectory claims (C01, C17, C18) read: ``[0, *snapshot_steps, steps]``, as in
    ``opsft.calibrate.mean_consecutive_interval_cosine``."""
    return [0, *result.config.snapshot_steps, result.config.steps]


def stage_snapshots(result: RunResult, minimum: int = 3) -> list[Path]:
    """Snapshot folders of ``stage_steps``; a ValueError when there are fewer than ``minimum`` (step 0 and
    at least two later stages by default: with one later stage every trajectory statistic is trivial)."""
    steps = stage_steps(result)
    if len(steps) < minimum:
        raise ValueError(f"run {result.config.digest()}: stages {steps} give fewer than {minimum} snapshots; "
                         "the scale has too few steps for snapshot_steps")
    return [result.snapshot(s) for s in steps]


def direction_consistency(result: RunResult) -> dict[str, float]:
    """OPSFT Fig 2 statistics of a run (claim C01), from ``update_cosines`` over ``stage_snapshots``:
    ``interval_cos``, the mean of cos(d_i, d_{i+1}) over consecutive interval updates (global, all
    parameters: the calibration's ``interval_cosine`` column), and ``cumulative_cos``, the cosine of the first
    cumulative update theta_{t_1} - theta_0 with the final one theta_T - theta_0 (global). ``*_matrix``:
    the same from the per-layer-matrix cosine matrices averaged over matrices (NaN if any matrix is)."""
    cos = update_cosines(stage_snapshots(result))
    out = {}
    for level, suffix in (("global", ""), ("matrix", "_matrix")):
        interval, final = cos["interval"][level], cos["final_cumulative"][level]  # matrix: None/[] without matrices
        consecutive = [interval[i][i + 1] for i in range(len(interval) - 1)] if interval else []
        out[f"interval_cos{suffix}"] = statistics.fmean(consecutive) if consecutive else math.nan
        out[f"cumulative_cos{suffix}"] = final[0] if final else math.nan
    return out


def _log_ratio(last: float, first: float) -> float:
    """log(last / first); NaN unless both are positive (inf stays inf, inf / inf is NaN)."""
    if not (first > 0 and last > 0):
        return math.nan
    ratio = last / first
    return math.log(ratio) if ratio == ratio else math.nan


def low_dim_band(result: RunResult) -> dict[str, float]:
    """GEO section 4.1 / Fig 4 statistics of a run's cumulative update dW_t = W_t - W_0 (claim C17), from
    ``trajectory_summary`` over ``stage_snapshots`` (means over layer matrices at t = first stage after 0 ..
    final): ``stable_rank_log_change`` and ``hill_log_change``, log(last / first) of the mean stable rank and
    of the mean Hill tail index (top half of the singular values, ``default_hill_k``); ``frobenius``, the
    mean ||dW_T||_F at the end; and the first / last values themselves."""
    mean = trajectory_summary(stage_snapshots(result))["mean"]
    rank, hill, fro = mean["stable_rank"], mean["hill_index"], mean["frobenius_norm"]
    return {
        "stable_rank_log_change": _log_ratio(rank[-1], rank[0]),
        "hill_log_change": _log_ratio(hill[-1], hill[0]),
        "frobenius": fro[-1],
        "stable_rank_first": rank[0], "stable_rank_last": rank[-1],
        "hill_first": hill[0], "hill_last": hill[-1],
    }


def early_subspace(result: RunResult) -> dict[str, float]:
    """GEO section 4.2 / Fig 5 statistic of a run (claim C18): ``first_similarity``, the subspace similarity
    ||V_K(t_1)^T V_K(end)||_F^2 / K of the top-K (K = 16, capped at the matrix size) right singular subspaces of
    the first cumulative update after step 0 and the final one, mean over layer matrices
    (``trajectory_summary`` over ``stage_snapshots``). ``first_similarity_random``: the same mean for a random
    K-dim subspace, K / n for an m x n matrix (at the organism's width far above GEO's 16 / 4096);
    ``mid_similarity``: the similarity at the middle stage."""
    summary = trajectory_summary(stage_snapshots(result))
    sim, k = summary["mean"]["subspace_similarity"], summary["settings"]["subspace_k"]
    names = sorted(summary["per_matrix"])
    chance = [min(k, *w.shape) / w.shape[1] for _, w in iter_tensors(result.snapshot(), names)]
    return {
        "first_similarity": sim[0],
        "mid_similarity": sim[(len(sim) - 1) // 2],
        "first_similarity_random": statistics.fmean(chance) if chance else math.nan,
    }
