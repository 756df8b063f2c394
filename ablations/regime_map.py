"""The regime map's grid (issue "Where each claim holds"): where in (SFT learning rate x constrained steps) does
OPSFT beat SFT, match GRPO and beat its controls? Pure data; ``opsft.claims.regime_map`` trains and scores it.

Every cell trains the OPSFT family at one SFT learning rate for SFT's full length at the scale (400 steps at
`regime`) and reads the shorter horizons off the same runs' snapshots: with a constant learning rate a 100-step
run is the 400-step run's prefix (the map checks this on one run per cell, it does not assume it). The
recipe's schedule (cosine with warmup) is not: its cell is read at its full length only.
"""

LEARNING_RATES = (1e-5, 3e-5, 1e-4)  # constant; 1e-5 is GEO's SFT anchor, 1e-4 the regime's calibrated row
# The OPSFT recipe's schedule: "lr 1e-5 cosine to 1e-6, 10% warmup".
COSINE = {"lr": 1e-5, "schedule": "cosine", "warmup_frac": 0.1, "min_lr_ratio": 0.1}
# Horizons as fractions of SFT's length: 50 / 100 / 200 / 400 constrained steps at `regime`.
HORIZON_FRACTIONS = (1 / 8, 1 / 4, 1 / 2, 1)
# The main cell, where the v rule (bf16-visible, the papers' BF16 runs; fp32, the OPSFT recipe's FP32 masters)
# is an axis too: the regime's claims row. The reference v rule is bf16-visible: the rule the regime's claims
# use, so the map's main cell and the claims pages share their v.
MAIN_LR = 1e-4
V_RULES = ("bf16", "fp32")
REFERENCE_RULE = "bf16"
# Arms of every cell (claims' names): SFT, OPSFT's sign rule, the ratchet-free sign-update, random signs on v's
# support, v's locations, random locations of v's count; and, untrained, the base drifted along v by the sign
# arm's measured distance (``drift_sign``).
TRAINED_ARMS = ("sft", "opsft", "sign_update", "random_sign", "location", "random_location")
MODES = {"opsft": "sign", "sign_update": "sign-update", "random_sign": "random-sign", "location": "location",
         "random_location": "random-location"}
# The claims the map decides in every cell, under their version-2 rules.
MAP_CLAIMS = ("C02", "C03", "C04", "X05", "X06")
