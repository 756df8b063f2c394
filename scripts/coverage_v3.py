"""Coverage of version 3's interval (``opsft.claims.stats.floored_interval``) where claim X01 simulates it.

Two tables on stdout: (1) at a few variance components, the coverage on Gaussian cells against pass/fail cells
(``opsft.claims.coverage.pass_fail_cells``), version 2's interval beside it: why X01 simulates pass/fail cells;
(2) the audit of the claims saved at a scale (``opsft.claims.coverage.audit``): each audited rule's design,
components and simulated coverage.

Usage: python scripts/coverage_v3.py [--storage .claims/ci] [--scale ci] [--trials 2000]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from opsft.claims.coverage import Components, audit, clipped_normal_mean, pass_fail_cells
from opsft.claims.stats import floored_interval, two_level_interval

# (seed, problem, interaction) sd in points, mean, seeds, problems: `regime`'s measured scales (tests/test_claims_stats.py)
# and a design without a problem effect.
DESIGNS = [((3.7, 30.0, 40.0), 2.0, 3, 200), ((3.7, 30.0, 40.0), 2.0, 5, 1000), ((1.0, 0.0, 30.0), 2.0, 5, 1000),
           ((3.0, 20.0, 50.0), 10.0, 3, 200)]


def gaussian_cells(components: Components, mean: float, shape: tuple[int, int, int],
                   rng: np.random.Generator) -> np.ndarray:
    """``shape = (trials, seeds, problems)`` cells of the Gaussian two-way model ``mean + A_s + B_p + E_sp``."""
    trials, seeds, problems = shape
    return (mean + rng.normal(0, math.sqrt(components.seed), (trials, seeds, 1))
            + rng.normal(0, math.sqrt(components.problem), (trials, 1, problems))
            + rng.normal(0, math.sqrt(components.interaction), shape))


def coverage(method, cells: np.ndarray, truth: float) -> float:
    """The share of experiments (``cells``' first axis) whose interval from ``method`` holds ``truth``."""
    return float(np.mean([e.low <= truth <= e.high for e in map(method, cells)]))


def compare_cells(trials: int) -> None:
    """Print table (1): coverage on Gaussian and on pass/fail cells at ``DESIGNS``."""
    print("seed, problem, interaction sd | mean | seeds x problems | Gaussian: v3, v2 | pass/fail: v3, v2")
    for sds, mean, seeds, problems in DESIGNS:
        components = Components(*(sd**2 for sd in sds))
        shape, row = (trials, seeds, problems), []
        clipped = clipped_normal_mean(mean, math.sqrt(components.seed + components.problem), -100.0, 100.0)
        for cells, truth in ((gaussian_cells(components, mean, shape, np.random.default_rng(0)), mean),
                             (pass_fail_cells(components, mean, shape, np.random.default_rng(0), False), clipped)):
            row += [coverage(floored_interval, cells, truth), coverage(two_level_interval, cells, truth)]
        print(f"{sds} | {mean:g} | {seeds} x {problems} | " + ", ".join(f"{c:.1%}" for c in row))


def audit_table(storage: Path, scale: str, trials: int) -> None:
    """Print table (2): every audited rule of the claims saved at ``scale`` in ``storage``."""
    rng = np.random.default_rng(0)
    for claim in audit(storage, scale):
        for rule in claim.rules:
            if rule.components is None:
                print(f"{claim.claim_id} `{rule.rule}`: no valid interval ({rule.reason})")
                continue
            sds = ", ".join(f"{math.sqrt(v):.2f}" for v in rule.components)
            print(f"{claim.claim_id} `{rule.rule}`: {rule.seeds} x {rule.problems}, mean {rule.mean:.2f}, "
                  f"sd (seed, problem, interaction) {sds}: coverage {rule.hits(trials, rng).mean():.1%}")


def main() -> None:
    """Parse the command line and print both tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", type=Path, default=Path(".claims/ci"))
    parser.add_argument("--scale", default="ci")
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args()
    compare_cells(args.trials)
    audit_table(args.storage, args.scale, args.trials)


if __name__ == "__main__":
    main()
