"""Verdicts over per-seed (and per-problem) values of a rule's statistic, in two registered versions.

**Version 2 (the method every verdict is judged by).** A rule's statistic is a paired difference ``a - b``
between two arms (or one quantity ``a``), measured for ``n`` seeds. Where both keys are accuracies scored on the
same ``m`` test problems (every arm of a claim is scored on one recorded test draw), each seed also gives the
per-problem values ``D[s, p]`` (``a``'s score on problem ``p`` minus ``b``'s, in %), and the target is the
mean over the seed *and* problem populations. Under the two-way model ``D[s, p] = mu + A_s + B_p + E_sp`` the
grand mean's variance is ``var(A)/n + var(B)/m + var(E)/(n m)``; we estimate it by

    V = s2(seed means) / n + s2(problem means over seeds) / m,

``s2`` the sample variance (ddof 1). The first term's expectation is ``var(A)/n + var(E)/(n m)``, the second's
``var(B)/m + var(E)/(n m)``: V counts the interaction twice, so it is conservative, never biased low. The
interval is ``mean +- q sqrt(V)`` with Cochran and Cox's critical value, the two terms' t quantiles weighted by
their variance, ``q = (v_seed t(0.975, n-1) + v_problem t(0.975, m-1)) / V``: with 3 seeds the seed term has
2 degrees of freedom, and Welch-Satterthwaite's pooled df covered only 92-93% in the simulation where the seed
term dominates, Cochran-Cox at least 95%. Quantities without per-problem scores (update
geometry, wall time, held-out means over several families) get the Student-t interval over seeds alone,
``df = n - 1``. Fewer than 2 seeds give no interval (INCONCLUSIVE). ``tests/test_claims_stats.py`` simulates
the two-way model at n = 3 and 5 seeds with the measured variances and checks a coverage of at least 93%.

**Version 1 (kept so that the verdicts published before this audit can be reproduced).** A seeded percentile
bootstrap of the mean of the per-seed values. Over 3 seeds it is the min-max range (about 75% coverage, not
95%) and it leaves the test draw's sampling error out.

**Version 3 (registered after an audit of version 2's edges).** The version-2 interval, with two changes that
keep a zero observed variance from giving certainty:

- *Identical seeds count once.* A seed-dependent arm whose recorded values (and per-problem scores) are
  bit-identical across seeds was, in effect, trained once (a seed that does not reach the weights). A rule's
  effective seed count ``n_eff`` is the fewest distinct recordings of any of its seed-dependent keys; the seed
  term becomes ``s2(seed means) / n_eff`` with ``n_eff - 1`` degrees of freedom, and ``n_eff < 2`` gives no
  interval (INCONCLUSIVE).
- *A binomial floor on the problem term.* ``v_problem`` is at least the variance of a mean of the ``N = n_eff
  m`` scored cells under a Bernoulli model with pseudo-counts: plus-four, ``p~ = (x + 2) / (N + 4)``, for one
  accuracy in [0, 100] (``x`` the passes); Agresti-Min's half a discordant pair each way for a paired
  difference, ``var = (b + c + 1) / (N + 2) - ((b - c) / (N + 2))^2`` with ``b`` / ``c`` the summed positive /
  negative parts of ``D / 100`` (scaled by ``max |D| / 100`` where a combination of accuracies exceeds
  [-100, 100]). Every arm scoring 0 of 16 problems on 2 seeds thus gives about +-8.6 points, not [0, 0].

A rule that reads an accuracy (``registry.ACCURACY_METRICS``) but whose rows carry no per-problem scores is
INCONCLUSIVE under version 3: the seeds-only interval leaves the test draw out and covered 73-91% in the audit's
simulation.

A NaN anywhere in a statistic makes the rule UNDEFINED (its quantity does not exist for that run, e.g. an
overlap of an empty mask), never INCONCLUSIVE, and never hides a failure: a claim with a NOT REPRODUCED rule is
NOT REPRODUCED whatever its other rules are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from scipy import stats as scipy_stats

from opsft.claims.registry import Rule

BOOTSTRAP_RESAMPLES = 10_000
LEVEL = 0.95
# X01 (version 1): "every accuracy claim over at least 3 seeds". Fewer seeds give a (near-)degenerate bootstrap
# interval, which would decide a claim on one draw, so they are INCONCLUSIVE whatever the point estimate says.
MIN_SEEDS = 3

T_LABEL = "95% two-level t interval (seeds x test problems)"
SEED_T_LABEL = "95% t interval over seeds"
BOOTSTRAP_LABEL = "95% percentile bootstrap over seeds (v1)"
FLOORED_LABEL = "95% two-level t interval (seeds x test problems), binomial floor, identical seeds once (v3)"
DISTINCT_SEED_LABEL = "95% t interval over distinct seeds (v3)"


class Verdict(StrEnum):
    """The outcomes a claim (or one of its rules) can have. UNDEFINED: the statistic is NaN for some seed.
    ERROR: the claim's test failed before recording what its rules need."""

    REPRODUCED = "REPRODUCED"
    NOT_REPRODUCED = "NOT REPRODUCED"
    INCONCLUSIVE = "INCONCLUSIVE"
    UNDEFINED = "UNDEFINED"
    ERROR = "ERROR"


@dataclass(frozen=True)
class Estimate:
    """Mean of a statistic with its interval: ``n`` seeds, ``problems`` test problems per seed (0 when the
    interval is over seeds alone), ``method`` what the interval is (one of the ``*_LABEL`` texts)."""

    mean: float
    low: float
    high: float
    n: int
    problems: int = 0
    method: str = BOOTSTRAP_LABEL

    @property
    def half_width(self) -> float:
        """Half the interval's width (NaN without an interval)."""
        return (self.high - self.low) / 2

    def to_dict(self) -> dict:
        """Plain JSON-able form, as saved in a claims run file."""
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "problems": self.problems,
                "method": self.method}


def _nan_estimate(n: int, problems: int, method: str) -> Estimate:
    return Estimate(math.nan, math.nan, math.nan, n, problems, method)


def bootstrap_mean(values: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
                   level: float = LEVEL) -> Estimate:
    """Version 1: mean and ``level`` percentile-bootstrap interval of the mean of ``values`` (resampled with a
    ``numpy`` generator seeded by ``seed``, so the interval is reproducible). One value gives a zero-width
    interval; a non-finite value (a diverged run) makes every field NaN; an empty input raises ValueError."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap_mean needs at least one value, got none")
    if not np.all(np.isfinite(x)):
        return _nan_estimate(int(x.size), 0, BOOTSTRAP_LABEL)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return Estimate(float(x.mean()), float(low), float(high), int(x.size))


def t_interval(values: Sequence[float], level: float = LEVEL) -> Estimate:
    """Version 2 over seeds alone: ``mean +- t(level, n-1) * s / sqrt(n)``. One value has no interval (low and
    high NaN); a non-finite value makes every field NaN; an empty input raises ValueError."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("t_interval needs at least one value, got none")
    if not np.all(np.isfinite(x)):
        return _nan_estimate(int(x.size), 0, SEED_T_LABEL)
    mean = float(x.mean())
    if x.size < 2:
        return Estimate(mean, math.nan, math.nan, 1, 0, SEED_T_LABEL)
    half = float(scipy_stats.t.ppf((1 + level) / 2, x.size - 1)) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return Estimate(mean, mean - half, mean + half, int(x.size), 0, SEED_T_LABEL)


def seeds_by_problems(per_problem: np.ndarray, caller: str) -> np.ndarray:
    """``per_problem`` as a float64 (seeds, problems) array; a ValueError from ``caller`` for any other shape."""
    d = np.asarray(per_problem, dtype=np.float64)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"{caller} needs an (seeds, problems) array, got shape {d.shape}")
    return d


def cochran_cox(mean: float, v_seed: float, seeds: int, v_problem: float, problems: int, level: float,
                method: str) -> Estimate:
    """``mean +- q sqrt(V)``, ``V = v_seed + v_problem`` (> 0) and Cochran and Cox's critical value
    ``q = (v_seed t(level, seeds-1) + v_problem t(level, problems-1)) / V`` (module docstring)."""
    variance = v_seed + v_problem
    tail = (1 + level) / 2
    q = (v_seed * scipy_stats.t.ppf(tail, seeds - 1) + v_problem * scipy_stats.t.ppf(tail, problems - 1)) / variance
    half = float(q) * math.sqrt(variance)
    return Estimate(mean, mean - half, mean + half, seeds, problems, method)


def two_level_interval(per_problem: np.ndarray, level: float = LEVEL, center: float | None = None) -> Estimate:
    """Version 2 with test-problem sampling error: ``per_problem`` is the (n seeds, m problems) array of the
    statistic on each problem (``D[s, p]``); the interval is ``mean +- q sqrt(V)`` with the conservative two-way
    variance ``V = v_seed + v_problem = s2(row means)/n + s2(column means)/m`` and Cochran-Cox's
    ``q = (v_seed t(level, n-1) + v_problem t(level, m-1)) / V`` (module docstring). ``center``: the mean as the per-seed values give it (the same number, rounded as they
    were), default the array's mean. One seed has no interval; a non-finite entry makes every field NaN."""
    d = seeds_by_problems(per_problem, "two_level_interval")
    n, m = d.shape
    if not np.all(np.isfinite(d)):
        return _nan_estimate(n, m, T_LABEL)
    mean = float(d.mean()) if center is None else float(center)
    if n < 2 or m < 2:
        return Estimate(mean, math.nan, math.nan, n, m, T_LABEL)
    v_seed = float(d.mean(axis=1).var(ddof=1)) / n
    v_problem = float(d.mean(axis=0).var(ddof=1)) / m
    if v_seed + v_problem == 0:
        return Estimate(mean, mean, mean, n, m, T_LABEL)
    return cochran_cox(mean, v_seed, n, v_problem, m, level, T_LABEL)


def problem_floor(per_problem: np.ndarray, seeds: int | None = None, paired: bool = False) -> float:
    """Version 3's least variance (points^2) of the grand mean of an (n, m) array of per-problem scores in points
    (module docstring), over ``N = seeds m`` cells (``seeds`` the effective seed count, default n; the shares
    are the array's means): plus-four for one accuracy (every entry in [0, 100], not ``paired``), Agresti-Min for
    a paired difference or any other signed statistic."""
    d = np.asarray(per_problem, dtype=np.float64) / 100
    cells = (d.shape[0] if seeds is None else seeds) * d.shape[1]
    if not paired and d.min() >= 0 and d.max() <= 1:
        p = (float(d.mean()) * cells + 2) / (cells + 4)
        single = p * (1 - p)
    else:
        b, c = float(np.clip(d, 0, None).mean()) * cells, float(np.clip(-d, 0, None).mean()) * cells
        spread = max(1.0, float(np.abs(d).max()))
        single = spread * (b + c + 1) / (cells + 2) - ((b - c) / (cells + 2)) ** 2
    return 1e4 * single / cells


def floored_interval(per_problem: np.ndarray, seeds: int | None = None, paired: bool = False, level: float = LEVEL,
                     center: float | None = None) -> Estimate:
    """Version 3 with test-problem sampling error: the version-2 interval (``two_level_interval``) on the (n, m)
    array ``per_problem`` with the seed term over ``seeds`` effective seeds (default n: ``s2(row means) /
    seeds``, ``seeds - 1`` degrees of freedom) and the problem term at least ``problem_floor`` (``paired``: the array is a
    difference of two arms) over
    ``seeds`` distinct rows. Fewer than 2 effective seeds (or problems) give no interval; a non-finite entry makes every
    field NaN."""
    d = seeds_by_problems(per_problem, "floored_interval")
    n, m = d.shape
    seeds = n if seeds is None else seeds
    if not 1 <= seeds <= n:
        raise ValueError(f"floored_interval: {seeds} effective seeds for {n} rows")
    if not np.all(np.isfinite(d)):
        return _nan_estimate(seeds, m, FLOORED_LABEL)
    mean = float(d.mean()) if center is None else float(center)
    if seeds < 2 or m < 2:
        return Estimate(mean, math.nan, math.nan, seeds, m, FLOORED_LABEL)
    v_seed = float(d.mean(axis=1).var(ddof=1)) / seeds
    v_problem = max(float(d.mean(axis=0).var(ddof=1)) / m, problem_floor(d, seeds, paired))
    return cochran_cox(mean, v_seed, seeds, v_problem, m, level, FLOORED_LABEL)


def distinct_seed_interval(values: Sequence[float], seeds: int | None = None, level: float = LEVEL) -> Estimate:
    """Version 3 over seeds alone: ``mean +- t(level, seeds-1) * s / sqrt(seeds)``, ``s`` the sample sd of the
    per-seed ``values`` and ``seeds`` the effective seed count (default ``len(values)``); fewer than 2 effective
    seeds give no interval, a non-finite value makes every field NaN."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("distinct_seed_interval needs at least one value, got none")
    seeds = int(x.size) if seeds is None else seeds
    if not 1 <= seeds <= x.size:
        raise ValueError(f"distinct_seed_interval: {seeds} effective seeds for {x.size} values")
    if not np.all(np.isfinite(x)):
        return _nan_estimate(seeds, 0, DISTINCT_SEED_LABEL)
    mean = float(x.mean())
    if seeds < 2:
        return Estimate(mean, math.nan, math.nan, seeds, 0, DISTINCT_SEED_LABEL)
    half = float(scipy_stats.t.ppf((1 + level) / 2, seeds - 1)) * float(x.std(ddof=1)) / math.sqrt(seeds)
    return Estimate(mean, mean - half, mean + half, seeds, 0, DISTINCT_SEED_LABEL)


def _side(rule: Rule, low: float, high: float) -> bool | None:
    """True when the whole interval satisfies the rule, False when none of it does, None when it straddles."""
    if rule.op == ">":
        return True if low > rule.boundary else False if high <= rule.boundary else None
    if rule.op == "<":
        return True if high < rule.boundary else False if low >= rule.boundary else None
    inside = -rule.boundary <= low and high <= rule.boundary
    outside = high < -rule.boundary or low > rule.boundary
    if rule.op == "beyond":
        return True if outside else False if inside else None
    return True if inside else False if outside else None


def verdict_of(rule: Rule, estimate: Estimate) -> Verdict:
    """The verdict of ``rule`` on an interval: UNDEFINED for a NaN mean, INCONCLUSIVE without an interval or
    when it overlaps the boundary, else REPRODUCED / NOT REPRODUCED by the side the whole interval lies on."""
    if math.isnan(estimate.mean):
        return Verdict.UNDEFINED
    if math.isnan(estimate.low) or math.isnan(estimate.high):
        return Verdict.INCONCLUSIVE
    side = _side(rule, estimate.low, estimate.high)
    return Verdict.INCONCLUSIVE if side is None else Verdict.REPRODUCED if side else Verdict.NOT_REPRODUCED


def decide(rule: Rule, values: Sequence[float], seed: int = 0) -> tuple[Verdict, Estimate]:
    """Version 1, as published before the audit: the verdict of ``rule`` over per-seed ``values`` by the
    percentile bootstrap; INCONCLUSIVE below MIN_SEEDS seeds and, as version 1 had it, for a NaN value."""
    estimate = bootstrap_mean(values, seed)
    verdict = verdict_of(rule, estimate)
    if verdict is Verdict.UNDEFINED or len(values) < MIN_SEEDS:
        verdict = Verdict.INCONCLUSIVE
    return verdict, estimate


def combine(verdicts: Sequence[Verdict]) -> Verdict:
    """A claim's verdict from its rules': ERROR if any rule errored, else NOT REPRODUCED if any rule is, else
    UNDEFINED if any rule is, REPRODUCED if all are, else INCONCLUSIVE."""
    if not verdicts:
        raise ValueError("combine needs at least one rule verdict")
    for outcome in (Verdict.ERROR, Verdict.NOT_REPRODUCED, Verdict.UNDEFINED):
        if outcome in verdicts:
            return outcome
    return Verdict.REPRODUCED if all(v is Verdict.REPRODUCED for v in verdicts) else Verdict.INCONCLUSIVE
