"""From a claim's recorded rows to its verdicts: per-seed (and per-problem) statistics, interval estimates, rule
verdicts, under every registered rule version (``opsft.claims.registry``, ``opsft.claims.stats``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from opsft.claims.registry import RULE_VERSIONS, Claim, Rule
from opsft.claims.scored import decode
from opsft.claims.stats import Estimate, Verdict, combine, decide, t_interval, two_level_interval, verdict_of

Row = Mapping  # {"arm": str, "seed": int, "values": {metric: float}, "problems": {metric: encoded scores}}
CURRENT_VERSION = RULE_VERSIONS[-1]


@dataclass(frozen=True)
class RuleResult:
    """One rule's verdict and the estimate of its statistic (None when no seed measured it)."""

    rule: Rule
    verdict: Verdict
    estimate: Estimate | None

    def to_dict(self) -> dict:
        """Plain JSON-able form, as saved in a claims run file."""
        return {"rule": str(self.rule), "verdict": self.verdict.value,
                "estimate": None if self.estimate is None else self.estimate.to_dict()}


@dataclass(frozen=True)
class ClaimResult:
    """A claim's verdict under each rule version (``versions``: version -> (verdict, rule results)), and the
    version-2 estimate of every recorded ``arm.metric``. ``verdict`` and ``rules`` are the current version's."""

    claim: Claim
    versions: Mapping[int, tuple[Verdict, tuple[RuleResult, ...]]]
    measured: Mapping[str, Estimate]

    @property
    def verdict(self) -> Verdict:
        """The verdict under the current rule version."""
        return self.versions[CURRENT_VERSION][0]

    @property
    def rules(self) -> tuple[RuleResult, ...]:
        """The current rule version's results."""
        return self.versions[CURRENT_VERSION][1]

    def errored(self) -> ClaimResult:
        """The same result with every version's verdict ERROR (its test failed), rule results kept."""
        return ClaimResult(self.claim, {v: (Verdict.ERROR, rules) for v, (_, rules) in self.versions.items()},
                           self.measured)

    def to_dict(self) -> dict:
        """Plain JSON-able form, as saved in a claims run file (``verdict`` / ``rules``: the current version)."""
        return {"verdict": self.verdict.value, "rules": [r.to_dict() for r in self.rules],
                "versions": {str(v): {"verdict": verdict.value, "rules": [r.to_dict() for r in rules]}
                             for v, (verdict, rules) in self.versions.items()},
                "measured": {k: e.to_dict() for k, e in self.measured.items()}}


def per_seed(rows: Iterable[Row]) -> dict[int, dict[str, float]]:
    """``{seed: {"arm.metric": value}}`` from recorded rows; a value recorded twice raises ValueError."""
    table: dict[int, dict[str, float]] = {}
    for row in rows:
        seed_values = table.setdefault(int(row["seed"]), {})
        for metric, value in row["values"].items():
            key = f"{row['arm']}.{metric}"
            if key in seed_values:
                raise ValueError(f"{key} recorded twice for seed {row['seed']}")
            seed_values[key] = float(value)
    return table


def per_problem(rows: Iterable[Row]) -> dict[int, dict[str, np.ndarray]]:
    """``{seed: {"arm.metric": per-problem scores}}`` for the values recorded with their problems."""
    table: dict[int, dict[str, np.ndarray]] = {}
    for row in rows:
        for metric, stored in row.get("problems", {}).items():
            table.setdefault(int(row["seed"]), {})[f"{row['arm']}.{metric}"] = decode(stored)
    return table


def statistic(rule: Rule, table: Mapping[int, Mapping[str, float]]) -> list[float]:
    """The rule's per-seed values (``Rule.value``: ``a - b``, ``a``, or ``(a - b) / |b|``), in seed order, over
    the seeds that measured every key."""
    return [rule.value(table[s][rule.a], table[s].get(rule.b) if rule.b else None)
            for s in sorted(table) if all(k in table[s] for k in rule.keys)]


def problem_statistic(rule: Rule, table: Mapping[int, Mapping[str, float]],
                      problems: Mapping[int, Mapping[str, np.ndarray]]) -> np.ndarray | None:
    """The (seeds, problems) array of the rule's statistic per test problem, when every seed that measured the
    rule's keys also recorded their per-problem scores on equally many problems (arms paired problem by
    problem); None otherwise, and for relative rules (a ratio is not a mean over problems)."""
    if rule.relative:
        return None
    seeds = [s for s in sorted(table) if all(k in table[s] for k in rule.keys)]
    if not seeds or not all(all(k in problems.get(s, {}) for k in rule.keys) for s in seeds):
        return None
    arrays = [[problems[s][k] for k in rule.keys] for s in seeds]
    if len({a.shape for seed in arrays for a in seed}) != 1:
        return None
    return np.stack([seed[0] - seed[1] if len(seed) == 2 else seed[0] for seed in arrays])


def estimate_v2(values: list[float], per_problem_values: np.ndarray | None) -> Estimate:
    """Version 2's estimate: the two-level interval where per-problem scores pair the arms, else the t interval
    over seeds; centred on the mean of the per-seed ``values`` either way."""
    if per_problem_values is not None:
        return two_level_interval(per_problem_values, center=float(np.mean(values)))
    return t_interval(values)


def decide_rules(rules: Iterable[Rule], version: int, table: Mapping[int, Mapping[str, float]],
                 problems: Mapping[int, Mapping[str, np.ndarray]], seed: int) -> tuple[RuleResult, ...]:
    """Every rule's verdict under ``version``'s statistics; a rule no seed measured is INCONCLUSIVE."""
    results = []
    for rule in rules:
        values = statistic(rule, table)
        if not values:
            results.append(RuleResult(rule, Verdict.INCONCLUSIVE, None))
        elif version == 1:
            results.append(RuleResult(rule, *decide(rule, values, seed)))
        else:
            estimate = estimate_v2(values, problem_statistic(rule, table, problems))
            results.append(RuleResult(rule, verdict_of(rule, estimate), estimate))
    return tuple(results)


def evaluate(claim: Claim, rows: Iterable[Row], seed: int = 0) -> ClaimResult:
    """Decide ``claim`` over the recorded rows under every rule version (version 1's bootstrap seeded by
    ``seed``), with the version-2 estimate of every recorded key."""
    rows = list(rows)
    table, problems = per_seed(rows), per_problem(rows)
    versions = {}
    for version in RULE_VERSIONS:
        results = decide_rules(claim.rules_for(version), version, table, problems, seed)
        versions[version] = (combine([r.verdict for r in results]), results)
    keys = sorted({k for row in table.values() for k in row})
    measured = {k: estimate_v2(statistic(Rule(k, ">"), table), problem_statistic(Rule(k, ">"), table, problems))
                for k in keys}
    return ClaimResult(claim, versions, measured)
