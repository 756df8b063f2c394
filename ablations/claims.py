"""Claim-specific grid data: scale profiles of the claims suite and the calibration setting claims train at.

Claims reuse the calibration's run settings (``opsft.calibrate.method_config``) and sizes
(``ablations.calibration.SCALES``), so a claim's SFT / GRPO / OPD runs are the calibration's own cached runs.
"""

from __future__ import annotations

from typing import Any

from ablations.calibration import GRID, SCALES

SCALE_NAMES = ("smoke", "ci", "full", "paper")

# The calibration row claims train at (organism x precision x learning rates): fp32 masters, lr 1e-6 / 1e-5,
# the row whose bf16-visible update shares come closest to GEO Table 1 (results/organism.md: GRPO 20.7%,
# SFT 92.3% against 22.8% / 91.9%). Chosen on the update geometry, before any OPSFT accuracy was measured.
ROW = GRID[0]

_PAPER = {"seeds": (0, 1, 2), "skip": "the real-model recipe (GPU, HF checkpoints) is not wired into the claims yet"}


def scale_profile(name: str) -> dict[str, Any]:
    """The size profile of scale ``name`` (``smoke|ci|full`` from the calibration; ``paper`` is a skip)."""
    if name == "paper":
        return dict(_PAPER)
    try:
        return dict(SCALES[name])
    except KeyError:
        raise KeyError(f"unknown scale {name!r}; choose one of {', '.join(SCALE_NAMES)}") from None


def organism(scale: dict[str, Any]) -> str:
    """The organism a claim trains at this scale: the scale's first (smallest) organism."""
    return scale["organisms"][0]
