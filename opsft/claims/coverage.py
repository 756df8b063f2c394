"""Claim X01's audit: do the verdicts' intervals cover at the variance components the saved runs measured?

For every accuracy claim, its newest record saved at a scale, and each of its current rules (``CURRENT_VERSION``)
that reads an accuracy (``registry.ACCURACY_METRICS``; a rule's guards count, they are decided by intervals too):
the (n seeds, m problems) array ``D[s, p]`` of the rule's statistic per test problem
(``evaluate.problem_statistic``) gives the two-way model's variance components (``variance_components``), and
``simulated_coverage`` draws experiments at those components, the rule's mean and its own effective seed count
(identical seeds once, ``evaluate.distinct_seeds``) and problem count, and counts how often version 3's
``floored_interval`` holds the simulated population's mean. A rule without per-problem scores, or with fewer than
2 distinct seeds, cannot have a valid interval: its coverage is 0.

The simulated cells are pass/fail scores, not Gaussian ones. Version 3's binomial floor reads the cells as
passes and discordant pairs (``stats.problem_floor``): on Gaussian cells of sd 50 points it takes ``E|D| / 100
~ 0.4``, times ``max |D| / 100 ~ 1.6``, for a per-cell variance of 0.25, so it binds where on pass/fail cells it
does not and overstates the coverage (``scripts/coverage_v3.py``, 2000 experiments: at seed, problem,
interaction sd 1, 0, 30 points and 5 seeds x 1000 problems, 99.8% on Gaussian cells against 99.1% on pass/fail
cells, where version 2's interval also gives 99.1%; at 3, 20, 50 points and 3 x 200, 99.7% against 98.6%). A
combination of accuracies whose cells leave [-100, 100] is simulated as pass/fail cells too; its own floor is
scaled up by ``max |D| / 100``, which only widens its interval.

This is a plug-in simulation: it takes the measured components as the truth. Components measured as 0 (every
arm scoring 0 on every problem) simulate constant cells, which any interval covers; where the observed variance
is 0 the floor is what keeps an interval honest, and ``tests/test_claims_stats.py`` checks it on tiny pass rates.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy import stats as scipy_stats

from opsft.claims.evaluate import (
    CURRENT_VERSION,
    distinct_seeds,
    per_problem,
    per_seed,
    per_weights,
    problem_statistic,
    reads_accuracy,
    statistic,
)
from opsft.claims.registry import CLAIMS, Claim, Rule
from opsft.claims.stats import floored_interval
from opsft.claims.storage import read_run, saved_runs


class Components(NamedTuple):
    """Variance components (points^2) of the two-way model ``D[s, p] = mu + A_s + B_p + E_sp``: ``var(A)`` over
    seeds, ``var(B)`` over test problems, ``var(E)`` their interaction (with the cell's own pass/fail noise)."""

    seed: float
    problem: float
    interaction: float


def variance_components(d: np.ndarray) -> Components:
    """Method-of-moments estimates (two-way random-effects ANOVA, one observation per cell) from an (n, m) array:
    with ``MS_seed = m s2(row means)``, ``MS_problem = n s2(column means)`` and ``MS_residual = sum_sp (D_sp -
    row mean_s - column mean_p + grand mean)^2 / ((n - 1)(m - 1))``, whose expectations are ``var(E) + m var(A)``,
    ``var(E) + n var(B)`` and ``var(E)``: ``seed = (MS_seed - MS_residual) / m``, ``problem = (MS_problem -
    MS_residual) / n``, ``interaction = MS_residual``, each truncated at 0. A ValueError for fewer than 2 rows or
    columns."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or min(d.shape) < 2:
        raise ValueError(f"variance_components needs an (seeds, problems) array of at least 2 x 2, got {d.shape}")
    n, m = d.shape
    rows, columns = d.mean(axis=1), d.mean(axis=0)
    residual = float(((d - rows[:, None] - columns[None, :] + d.mean()) ** 2).sum()) / ((n - 1) * (m - 1))
    seed = (m * float(rows.var(ddof=1)) - residual) / m
    problem = (n * float(columns.var(ddof=1)) - residual) / n
    return Components(*(max(0.0, v) for v in (seed, problem, residual)))


def clipped_normal_mean(mean: float, sd: float, low: float, high: float) -> float:
    """``E[clip(X, low, high)]`` for ``X ~ N(mean, sd^2)``: ``low Phi(a) + high (1 - Phi(b)) + mean (Phi(b) -
    Phi(a)) + sd (phi(a) - phi(b))`` with ``a = (low - mean) / sd``, ``b = (high - mean) / sd``; ``clip(mean)``
    for ``sd = 0``."""
    if sd == 0:
        return min(max(mean, low), high)
    a, b = (low - mean) / sd, (high - mean) / sd
    norm = scipy_stats.norm
    return float(low * norm.cdf(a) + high * norm.sf(b) + mean * (norm.cdf(b) - norm.cdf(a))
                 + sd * (norm.pdf(a) - norm.pdf(b)))


def pass_fail_cells(components: Components, mean: float, shape: tuple[int, int, int], rng: np.random.Generator,
                    accuracy: bool) -> np.ndarray:
    """``shape = (trials, seeds, problems)`` pass/fail cells around the cell means ``c = clip(mean + A_s + B_p,
    low, 100) / 100`` (``A ~ N(0, seed)``, ``B ~ N(0, problem)``; ``low`` 0 for one accuracy, -100 for a paired
    difference): ``100 Bernoulli(c)`` for an accuracy (its interaction is ``1e4 c (1 - c)``, whatever was
    measured); for a difference +100 / -100 with probabilities ``(q +- c) / 2``, else 0, where ``q =
    clip(c^2 + interaction / 1e4, |c|, 1)`` (the cell's variance is the interaction where pass/fail cells allow
    it, and at least ``1e4 (|c| - c^2)``)."""
    trials, seeds, problems = shape
    low = 0.0 if accuracy else -100.0
    centre = np.clip(mean + rng.normal(0, math.sqrt(components.seed), (trials, seeds, 1))
                     + rng.normal(0, math.sqrt(components.problem), (trials, 1, problems)), low, 100.0) / 100
    u = rng.random(shape)
    if accuracy:
        return 100.0 * (u < centre)
    discordant = np.clip(centre**2 + components.interaction / 1e4, np.abs(centre), 1.0)
    return 100.0 * ((u < (discordant + centre) / 2).astype(np.float64) - (u >= 1 - (discordant - centre) / 2))


def simulated_coverage(components: Components, mean: float, seeds: int, problems: int, trials: int,
                       rng: np.random.Generator, accuracy: bool = False) -> np.ndarray:
    """0/1 hits of version 3's ``floored_interval`` in ``trials`` experiments of ``seeds`` seeds x ``problems``
    problems drawn by ``pass_fail_cells`` (module docstring: why not Gaussian cells): 1 where the interval holds
    the simulated population's mean ``E clip(mean + A + B, low, 100)`` (``clipped_normal_mean`` with sd
    ``sqrt(seed + problem)``)."""
    low = 0.0 if accuracy else -100.0
    truth = clipped_normal_mean(mean, math.sqrt(components.seed + components.problem), low, 100.0)
    cells = pass_fail_cells(components, mean, (trials, seeds, problems), rng, accuracy)
    estimates = (floored_interval(d) for d in cells)
    return np.fromiter((e.low <= truth <= e.high for e in estimates), dtype=np.int8, count=trials)


def latest_records(storage: Path, scale: str) -> dict[str, dict]:
    """For each claim id, its record (verdict, rows, seeds) in the newest run saved at ``scale`` that holds it."""
    latest: dict[str, dict] = {}
    for path in saved_runs(storage):
        run = read_run(path)
        if run.get("scale") == scale:
            latest.update(run["claims"])
    return latest


def _with_guards(rule: Rule) -> Iterator[Rule]:
    """``rule`` and its guards (and theirs)."""
    yield rule
    for guard in rule.guards:
        yield from _with_guards(guard)


def audited_rules(claim: Claim) -> tuple[Rule, ...]:
    """The current rules of ``claim`` and their guards, each once, that read an accuracy
    (``evaluate.reads_accuracy``)."""
    rules = dict.fromkeys(r for rule in claim.rules_for(CURRENT_VERSION) for r in _with_guards(rule))
    return tuple(r for r in rules if reads_accuracy(r))


def is_accuracy_claim(claim: Claim) -> bool:
    """Whether a current rule of ``claim`` (or a guard of one) reads an accuracy metric."""
    return bool(audited_rules(claim))


@dataclass(frozen=True)
class RuleAudit:
    """One audited rule as its saved record measured it: the effective seeds and problems of its version-3
    interval, the mean of ``D``, whether ``D`` holds one accuracy's scores (every cell in [0, 100], as
    ``stats.problem_floor`` reads it) or a signed difference, and its variance components; ``components`` None
    (and ``reason`` why) when it cannot have a valid interval."""

    rule: str
    seeds: int
    problems: int
    mean: float = math.nan
    accuracy: bool = False
    components: Components | None = None
    reason: str = ""

    def hits(self, trials: int, rng: np.random.Generator) -> np.ndarray:
        """``simulated_coverage`` at the rule's measured design; ``trials`` zeros without a valid interval."""
        if self.components is None:
            return np.zeros(trials, dtype=np.int8)
        return simulated_coverage(self.components, self.mean, self.seeds, self.problems, trials, rng, self.accuracy)


def audit_rule(rule: Rule, table: Mapping[int, Mapping[str, float]],
               problems: Mapping[int, Mapping[str, np.ndarray]], weights: Mapping[int, Mapping[str, str]]) -> RuleAudit:
    """A rule's ``RuleAudit`` from a record's per-seed values and per-problem scores; the components come from
    every recorded seed's row of ``D``."""
    measured = len(statistic(rule, table))
    d = problem_statistic(rule, table, problems)
    if d is None:
        return RuleAudit(str(rule), measured, 0, reason="no per-problem scores" if measured else "no seed measured it")
    seeds, _ = distinct_seeds(rule, table, problems, weights)
    if seeds < 2 or d.shape[1] < 2:
        return RuleAudit(str(rule), seeds, d.shape[1], reason=f"{seeds} distinct seed(s) x {d.shape[1]} problem(s)")
    return RuleAudit(str(rule), seeds, d.shape[1], float(d.mean()), bool(d.min() >= 0 and d.max() <= 100),
                     variance_components(d))


@dataclass(frozen=True)
class ClaimAudit:
    """An accuracy claim's saved record: how many seeds it ran and its audited rules."""

    claim_id: str
    seeds: int
    rules: tuple[RuleAudit, ...]


def audit(storage: Path, scale: str) -> list[ClaimAudit]:
    """Every accuracy claim saved at ``scale`` in ``storage``, in claim order, with its audited rules
    (``audited_rules``) measured from the newest saved record's rows."""
    out = []
    for claim_id, record in sorted(latest_records(storage, scale).items()):
        claim = CLAIMS.get(claim_id)
        if claim is None or not is_accuracy_claim(claim):
            continue
        rows = record["rows"]
        table, problems, weights = per_seed(rows), per_problem(rows), per_weights(rows)
        rules = tuple(audit_rule(rule, table, problems, weights) for rule in audited_rules(claim))
        out.append(ClaimAudit(claim_id, len(record["seeds"]), rules))
    return out


def least_covered(hits: np.ndarray) -> float:
    """Coverage (%) of the least-covered rule of one replicate batch, ``hits`` the (rules, trials) 0/1 array,
    without the minimum's bias (the least of several noisy estimates is low even when every rule covers): the
    first half of the trials picks the rule with the fewest hits (the first such), the second half, independent
    of the pick, measures it: ``100 mean(hits[argmin first half, second half])``."""
    half = hits.shape[1] // 2
    worst = int(np.argmin(hits[:, :half].sum(axis=1)))
    return 100.0 * float(hits[worst, half:].mean())
