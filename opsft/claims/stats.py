"""Verdicts over per-seed values: a seeded percentile bootstrap of the mean against a pre-registered boundary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from opsft.claims.registry import Rule

BOOTSTRAP_RESAMPLES = 10_000
LEVEL = 0.95
# X01: "every accuracy claim over at least 3 seeds". Fewer seeds give a (near-)degenerate bootstrap interval,
# which would decide a claim on one draw, so they are INCONCLUSIVE whatever the point estimate says.
MIN_SEEDS = 3


class Verdict(StrEnum):
    """The three outcomes a claim (or one of its rules) can have."""

    REPRODUCED = "REPRODUCED"
    NOT_REPRODUCED = "NOT REPRODUCED"
    INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True)
class Estimate:
    """Mean of per-seed values with its percentile-bootstrap interval."""

    mean: float
    low: float
    high: float
    n: int


def bootstrap_mean(values: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
                   level: float = LEVEL) -> Estimate:
    """Mean and ``level`` percentile-bootstrap interval of the mean of ``values`` (resampled with a
    ``numpy`` generator seeded by ``seed``, so the interval is reproducible). One value gives a zero-width
    interval; a non-finite value (a diverged run) makes every field NaN; an empty input raises ValueError."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap_mean needs at least one value, got none")
    if not np.all(np.isfinite(x)):
        return Estimate(math.nan, math.nan, math.nan, int(x.size))
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return Estimate(float(x.mean()), float(low), float(high), int(x.size))


def _side(rule: Rule, low: float, high: float) -> bool | None:
    """True when the whole interval satisfies the rule, False when none of it does, None when it straddles."""
    if rule.op == ">":
        return True if low > rule.boundary else False if high <= rule.boundary else None
    if rule.op == "<":
        return True if high < rule.boundary else False if low >= rule.boundary else None
    inside = -rule.boundary <= low and high <= rule.boundary
    outside = high < -rule.boundary or low > rule.boundary
    return True if inside else False if outside else None


def decide(rule: Rule, values: Sequence[float], seed: int = 0) -> tuple[Verdict, Estimate]:
    """The verdict of ``rule`` over per-seed ``values`` of its statistic: REPRODUCED when the bootstrap
    interval lies wholly on the claimed side of the boundary, NOT REPRODUCED when wholly on the other side,
    INCONCLUSIVE when it overlaps the boundary, when fewer than MIN_SEEDS seeds were measured, or when a value
    is NaN (the quantity is undefined, e.g. an overlap of an empty update mask, or a run diverged)."""
    estimate = bootstrap_mean(values, seed)
    side = None if math.isnan(estimate.mean) else _side(rule, estimate.low, estimate.high)
    if len(values) < MIN_SEEDS or side is None:
        return Verdict.INCONCLUSIVE, estimate
    return (Verdict.REPRODUCED if side else Verdict.NOT_REPRODUCED), estimate


def combine(verdicts: Sequence[Verdict]) -> Verdict:
    """A claim's verdict from its rules': NOT REPRODUCED if any rule is, REPRODUCED if all are, else INCONCLUSIVE."""
    if not verdicts:
        raise ValueError("combine needs at least one rule verdict")
    if Verdict.NOT_REPRODUCED in verdicts:
        return Verdict.NOT_REPRODUCED
    return Verdict.REPRODUCED if all(v is Verdict.REPRODUCED for v in verdicts) else Verdict.INCONCLUSIVE
