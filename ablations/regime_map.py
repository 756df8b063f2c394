"""The regime map's grids (issue "Where each claim holds"): where in (SFT learning rate x constrained steps) does
OPSFT beat SFT, match GRPO and beat its controls? Pure data; ``opsft.claims.regime_map`` trains and scores it.

Every cell trains the OPSFT family at one SFT learning rate for SFT's full length at the scale (400 steps at
`regime` and `reference`) and reads the shorter horizons off the same runs' snapshots: with a constant learning
rate a 100-step run is the 400-step run's prefix (the map checks this on one run per cell, it does not assume it).
The recipe's schedule (cosine with warmup) is not: its cell is read at its full length only.

A scale's grid (``grid_of``) names its constant learning rates, its main rate (the claims' row: the map's main
cell and the claims pages then share their runs, and the drift law is fitted there), the cosine cell and the v
rules the main cell is also trained under.
"""

from collections.abc import Mapping
from typing import Any

# `regime` (the `small` student) and every scale without a grid of its own: GEO's SFT anchor 1e-5, 3e-5, and
# 1e-4, the regime's calibrated row; the OPSFT recipe's schedule, "lr 1e-5 cosine to 1e-6, 10% warmup"; the main
# cell under both v rules (bf16-visible, the papers' BF16 runs; fp32, the OPSFT recipe's FP32 masters).
REGIME_GRID = {"lrs": (1e-5, 3e-5, 1e-4), "main_lr": 1e-4, "cosine_lr": 1e-5, "rules": ("bf16", "fp32")}
# `reference` (micro_b1200, whose row trains SFT at 3e-4: at 1e-4 its SFT does not learn in 400 steps,
# results/organism.md): the same three rates in the same places relative to the row, the 1e-4 among them,
# so the row is again the top rate and the main cell; the recipe's cosine shape (10% warmup, decay to a tenth)
# from the row's rate; the reference v rule alone (the fp32 rule's cell is `regime`'s, not the reference's).
# Its cells that no claim shares (all but the main cell, whose runs are X05's at the claims' five seeds) train
# three seeds, a lever of the 2-hour budget: their verdicts are at three seeds and say so on the map's page.
REFERENCE_GRID = {"lrs": (3e-5, 1e-4, 3e-4), "main_lr": 3e-4, "cosine_lr": 3e-4, "rules": ("bf16",),
                  "side_seeds": (0, 1, 2)}
GRIDS = {"reference": REFERENCE_GRID}
# The cosine cell's schedule past its peak rate (the recipe's): 10% linear warmup, then cosine to a tenth.
COSINE = {"schedule": "cosine", "warmup_frac": 0.1, "min_lr_ratio": 0.1}


def grid_of(scale_name: str) -> Mapping[str, Any]:
    """The map grid of scale ``scale_name``: its own, else ``REGIME_GRID``."""
    return GRIDS.get(scale_name, REGIME_GRID)


# Horizons as fractions of SFT's length: 50 / 100 / 200 / 400 constrained steps at `regime` and `reference`.
HORIZON_FRACTIONS = (1 / 8, 1 / 4, 1 / 2, 1)
# The reference v rule is bf16-visible: the rule the claims use, so the map's main cell and the claims pages
# share their v.
REFERENCE_RULE = "bf16"
# Arms of every cell (claims' names): SFT, OPSFT's sign rule, the ratchet-free sign-update, random signs on v's
# support, v's locations, random locations of v's count; and, untrained, the base drifted along v by the sign
# arm's measured distance (``drift_sign``).
TRAINED_ARMS = ("sft", "opsft", "sign_update", "random_sign", "location", "random_location")
MODES = {"opsft": "sign", "sign_update": "sign-update", "random_sign": "random-sign", "location": "location",
         "random_location": "random-location"}
# The modes whose mask draws from the constraint's seed (the others ignore it and keep the default seed, so that
# claims building the same arm, X05's, train the same run).
SEEDED_MODES = ("random-sign", "random-location")
# The claims the map decides in every cell, under their current rules.
MAP_CLAIMS = ("C02", "C03", "C04", "X05", "X06")
