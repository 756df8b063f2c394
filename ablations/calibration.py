"""Regime calibration grid (issue: the organism must sit in the papers' regime).

Each row: organism x precision x (on-policy lr, SFT lr). ``fp32`` = fp32 master weights whose changes are
judged in bf16 (the papers' FP32 runs); ``bf16`` = pure bf16 parameters. Learning rates follow the
tiny-scale probe's second and third probes, which found these ranges closest to the papers' regime.
"""

GRID = (
    {"organism": "micro", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-5},
    {"organism": "micro", "precision": "fp32", "lr_rl": 3e-6, "lr_sft": 3e-5},
    {"organism": "micro", "precision": "bf16", "lr_rl": 1e-5, "lr_sft": 1e-5},
    {"organism": "micro", "precision": "bf16", "lr_rl": 3e-5, "lr_sft": 3e-5},
    {"organism": "small", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-5},
    {"organism": "small", "precision": "bf16", "lr_rl": 1e-5, "lr_sft": 1e-5},
)

# Rows at the papers' horizon: ten times the scale's steps (1000 at `full`, GEO's "RLVR ... lr 1e-6, 1k steps")
# on eight times the problems (2048 at `full`: 1000 SFT steps over 256 problems are 250 epochs, and a probe saw
# held-out accuracy fall 24 -> 9% while the training set rose 27 -> 77%). SFT at lr 1e-4: a one-seed probe on
# 2048 problems saw it dip, then climb to +25 points by step 700. At 100 steps neither GRPO nor SFT raised
# held-out accuracy; these rows ask whether the horizon is what the organism lacks. Kept apart from GRID, whose
# rows the claims' sweeps train.
HORIZON = (
    {"organism": "micro", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-4, "steps_factor": 10, "problems_factor": 8},
)

# Rows where both methods learn within the standard 100 steps: the learning rates that one-seed probes (seed 0,
# micro, 100 steps) found best for each. SFT on 2048 problems: lr 1e-4 -2.5, 3e-4 -2.5, 1e-3 +8.0, 3e-3 -14.5
# points in-domain (on 256 problems every lr from 1e-4 to 1e-3 memorises and loses 10-14 points); GRPO at lr 1e-5
# +1.5. The price is GRPO's sparsity: at these rates every method's update is dense. Kept apart from GRID too.
GAIN = (
    {"organism": "micro", "precision": "fp32", "lr_rl": 1e-5, "lr_sft": 1e-3, "problems_factor": 8},
)

# On `small`, SFT did not gain within 100 steps at any learning rate (one-seed probes on 2048 problems, lr 1e-4 to
# 1e-3: -4 to -18.5 points). At four times the steps (400, lr 1e-4, seed 0) it did: 2048 problems +1.0 (training
# set 92%: memorised), 4096 +13.0 (held-out abilities 75 -> 50%), 8192 +11.0 (75 -> 66%). OPSFT's own SFT stage
# likewise runs for epochs after a short on-policy run, so this row keeps GRPO and OPD at the papers' 100 steps at
# lr 1e-6 and gives SFT 400 steps, all on 4096 problems.
# The second row is the same at the papers' SFT learning rate, 1e-5 (ten times GRPO's, CLAIMS.md's SFT anchor),
# for the claims that sweep learning rates at `regime` (X05: the ratchet drifts at about lr per step; X06: SFT's
# frontier). A one-seed probe: SFT there ends below the base (51.0% in-domain at step 400 against 59.0%).
LONG_SFT = (
    {"organism": "small", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-4, "sft_steps_factor": 4,
     "problems_factor": 16},
    {"organism": "small", "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 1e-5, "sft_steps_factor": 4,
     "problems_factor": 16},
)

# Candidates for the reference scale (issue 34): the LONG_SFT shape (GRPO and OPD 100 steps at lr 1e-6, SFT 400
# steps at lr 1e-4, all on 4096 problems: the setting in which `small` meets all three regime conditions) on
# organisms whose base samples its arith answers right nearer 50% of the time (opsft.organism.specs). Calibrated
# at the `screen` (one seed) and `candidates` (five seeds) scales only: no other scale lists these organisms.
CANDIDATE_ORGANISMS = ("micro_b900", "micro_b1200", "mini_b600")
# A base that already solves more learns less from the teacher's style at lr 1e-4 (micro_b1200, one seed: SFT +0.7
# in-domain, GRPO +2.7): the same rows at SFT lr 3e-4 and 1e-3 too (the GRPO and OPD runs are the same cached runs),
# and, for micro_b1200, 2e-4 (does SFT still learn with less than 3e-4's near-total forgetting?).
CANDIDATES = tuple({"organism": o, "precision": "fp32", "lr_rl": 1e-6, "lr_sft": lr_sft, "sft_steps_factor": 4,
                    "problems_factor": 16} for o in CANDIDATE_ORGANISMS
                   for lr_sft in (1e-4, 2e-4, 3e-4, 1e-3) if lr_sft != 2e-4 or o == "micro_b1200")

# The candidate settings that met all three conditions on one seed at the lower SFT lr (3e-4), for the `candidates`
# scale's five seeds. `candidates` holds these rows too: name one group (`--group`), or they are measured twice.
CANDIDATE_BEST = tuple({"organism": o, "precision": "fp32", "lr_rl": 1e-6, "lr_sft": 3e-4, "sft_steps_factor": 4,
                        "problems_factor": 16} for o in ("micro_b1200", "micro_b900"))

# The groups `opsft calibrate --group` selects; a run of some groups keeps the other groups' rows of the table.
GROUPS = {"grid": GRID, "horizon": HORIZON, "gain": GAIN, "long_sft": LONG_SFT, "candidates": CANDIDATES,
          "candidate_best": CANDIDATE_BEST}

# Sizes of a calibration run at each scale: steps, seeds, SFT set size, held-out problems per family.
SCALES = {
    "smoke": {"steps": 4, "seeds": (0,), "n_problems": 32, "eval_n": 16, "organisms": ("nano",),
              "trajectories": "reference"},
    "ci": {"steps": 40, "seeds": (0,), "n_problems": 128, "eval_n": 64, "organisms": ("micro",)},
    "full": {"steps": 100, "seeds": (0, 1, 2), "n_problems": 256, "eval_n": 200, "organisms": ("micro", "small")},
    # Issue 34's screening of reference-scale candidates: `full`'s run sizes, scored on 1000 problems a family
    # (the reference's evaluation size), one seed (`screen`) or the reference's five (`candidates`; the same
    # seed-0 runs).
    "screen": {"steps": 100, "seeds": (0,), "n_problems": 256, "eval_n": 1000, "organisms": CANDIDATE_ORGANISMS},
    "candidates": {"steps": 100, "seeds": (0, 1, 2, 3, 4), "n_problems": 256, "eval_n": 1000,
                   "organisms": CANDIDATE_ORGANISMS},
}
