"""Claim-specific grid data: scale profiles of the claims suite and the calibration setting claims train at.

Claims reuse the calibration's run settings (``opsft.calibrate.method_config``) and sizes
(``ablations.calibration.SCALES``), so a claim's SFT / GRPO / OPD runs are the calibration's own cached runs.
"""

from __future__ import annotations

import os
from typing import Any

from ablations.calibration import CANDIDATE_BEST, GRID, LONG_SFT, SCALES

SCALE_NAMES = ("smoke", "ci", "full", "reference", "regime", "paper", "paper-tiny")
# The reference scale (issue 34): the default of `nox -s ablations`, `opsft plan / execute / map`; its pages are
# results/ itself (every other scale writes results/SCALE).
REFERENCE_SCALE = "reference"

# The calibration row claims train at (organism x precision x learning rates): fp32 masters, lr 1e-6 / 1e-5,
# the row whose bf16-visible update shares come closest to GEO Table 1 (results/organism.md: GRPO 20.7%,
# SFT 92.3% against 22.8% / 91.9%). Chosen on the update geometry, before any OPSFT accuracy was measured.
ROW = GRID[0]

# `regime`: the claims at the one calibrated setting that meets all three of the papers' regime conditions
# (results/organism.md, "Regime check": sparse GRPO that learns, dense SFT that learns, SFT forgetting): the
# `small` student, fp32 masters, GRPO and OPD 100 steps at lr 1e-6, SFT 400 steps at lr 1e-4, 4096 problems.
# Sizes are `full`'s, so its GRPO / OPD / SFT arms are the calibration's own long_sft runs. About 8 min a GRPO
# run and 9 min an SFT or constrained-SFT run on one core here (45 s and 10 s at `full` on micro).
# The sweeps over rows (X05, X06) train both long_sft rows: lr 1e-4 and the papers' 1e-5.
# Evidence (rules v2): at least 5 seeds for every accuracy comparison and 1000 held-out problems per family
# (the families with fewer distinct test problems give all they have); neither changes a run's config digest,
# so the calibration's 3-seed runs stay cached and seeds 3 and 4 train beside them.
_REGIME = {**SCALES["full"], "suite": "full", "organisms": ("small",), "row": LONG_SFT[0], "rows": LONG_SFT,
           "seeds": (0, 1, 2, 3, 4), "eval_n": 1000}

# `reference`: the reference scale, the default of `nox -s ablations` (issue 34: the whole job, calibration, every
# claim, the map and every page, in 2 hours on 2 cores from an empty cache). The organism candidate chosen in the
# open on results/organism.md ("Candidates for the reference scale"): micro_b1200, the micro organism with its base
# pretrained 1200 steps, whose base samples about 43% of its training answers right, where GRPO's signal p(1-p)
# peaks; at five seeds it meets all three regime conditions (GRPO 18.7% visible, +2.6 [1.9, 3.3]; SFT 98.8%,
# +8.2 [7.1, 9.3]; SFT takes the held-out mean from 54.2 to 5.7). The row: `regime`'s shape (GRPO and OPD 100
# steps at lr 1e-6, SFT 400 steps, 4096 problems) at SFT lr 3e-4 (at 1e-4 this SFT does not learn in 400 steps,
# nor in 200 at 3e-4, nor at batch 32 at 3e-4 or 1e-3: one-seed probes of issue 34, in its closing note of 2026-12-07). The sweeps
# over rows (X05, X06) train the row alone, the map's main cell, so X05's arms are the map's own runs (the map
# sweeps the learning rate: ablations/regime_map.py, REFERENCE_GRID). Sizes are the `candidates` calibration's:
# 5 seeds, 1000 held-out problems a family.
_REFERENCE = {**SCALES["candidates"], "suite": "full", "organisms": ("micro_b1200",), "row": CANDIDATE_BEST[0],
              "rows": (CANDIDATE_BEST[0],)}

# `paper` / `paper-tiny`: the claims train a recipe's runs (recipes/*.toml, opsft.recipes) from Hugging Face model
# folders and score them with the real benchmarks (opsft.evals.paper). `paper` takes the recipe named by
# $OPSFT_RECIPE and the folders under $OPSFT_MODELS / $OPSFT_DATA; `paper-tiny` runs recipes/paper-tiny.toml on
# the CPU stand-ins opsft.paper_tiny writes into the run cache. The claims whose arms are recipe runs (an SFT, a
# GRPO and an OPD run from the same model, OPSFT from that GRPO's v) run there; the others need the organism's
# task families and grids and skip, saying so.
RECIPE_CLAIMS = ("C02", "C16", "X04")
DEFAULT_PAPER_RECIPE = "opsft-qwen3-8b"
_PAPER = {"seeds": (0, 1, 2), "claims": RECIPE_CLAIMS}
_PAPER_TINY = {"seeds": (0, 1), "recipe": "paper-tiny", "stand_ins": True, "claims": RECIPE_CLAIMS}


# What `opsft calibrate` computes before the claims of a scale (the main job, `opsft plan`): the scale's own
# calibration, except at `regime`, whose claims train at the `small` long_sft rows of the `full` calibration.
CALIBRATION: dict[str, dict[str, Any]] = {
    "regime": {"scale": "full", "organisms": ("small",), "groups": ("long_sft",)},
    "reference": {"scale": "candidates", "organisms": ("micro_b1200",), "groups": ("candidate_best",)},
}


def calibration_of(name: str) -> dict[str, Any]:
    """The calibration the claims of scale ``name`` build on: its scale, organisms and groups (None: all)."""
    return CALIBRATION.get(name, {"scale": name, "organisms": None, "groups": None})


def scale_profile(name: str) -> dict[str, Any]:
    """The size profile of scale ``name`` (``smoke|ci|full`` from the calibration; ``regime``: ``full``'s sizes on
    the regime's organism and row; ``paper``: the recipe $OPSFT_RECIPE, default ``DEFAULT_PAPER_RECIPE``;
    ``paper-tiny``: recipes/paper-tiny.toml on the stand-ins). ``suite`` names the evaluation suite whose sampling
    the scale's sampled evaluations use (``opsft.evals.suite.SUITES``): the scale's own, ``full``'s at ``regime``."""
    if name == "paper":
        return {**_PAPER, "recipe": os.environ.get("OPSFT_RECIPE", DEFAULT_PAPER_RECIPE)}
    if name == "paper-tiny":
        return dict(_PAPER_TINY)
    if name == "regime":
        return dict(_REGIME)
    if name == "reference":
        return dict(_REFERENCE)
    try:
        return {**SCALES[name], "suite": name}
    except KeyError:
        raise KeyError(f"unknown scale {name!r}; choose one of {', '.join(SCALE_NAMES)}") from None


def is_recipe_scale(scale: dict[str, Any]) -> bool:
    """Whether a scale's claims train a recipe's runs (``paper``, ``paper-tiny``) rather than the organism's."""
    return "recipe" in scale


def skip_reason(claim_id: str, scale_name: str, scale: dict[str, Any]) -> str | None:
    """Why claim ``claim_id`` does not run at this scale (None: it runs)."""
    if "claims" in scale and claim_id not in scale["claims"]:
        return (f"at scale {scale_name!r} only {', '.join(scale['claims'])} run: {claim_id}'s arms need the "
                "organism's task families or grids, which a recipe does not have")
    return None


def organism(scale: dict[str, Any]) -> str:
    """The organism a claim trains at this scale: the scale's first (smallest) organism."""
    return scale["organisms"][0]


def claims_row(scale: dict[str, Any]) -> dict[str, Any]:
    """The calibration row (precision x learning rates x run lengths) claims train at this scale: the scale's own
    ``row`` where it names one (``regime``), else ``ROW``."""
    return scale.get("row", ROW)
