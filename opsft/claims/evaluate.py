"""From a claim's recorded rows to its verdict: per-seed statistics, bootstrap estimates, rule verdicts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from opsft.claims.registry import Claim, Rule
from opsft.claims.stats import Estimate, Verdict, bootstrap_mean, combine, decide

Row = Mapping  # {"arm": str, "seed": int, "values": {metric: float}}


@dataclass(frozen=True)
class RuleResult:
    """One rule's verdict and the estimate of its statistic (None when no seed measured it)."""

    rule: Rule
    verdict: Verdict
    estimate: Estimate | None


@dataclass(frozen=True)
class ClaimResult:
    """A claim's verdict, its rules' results, and the estimate of every recorded ``arm.metric``."""

    claim: Claim
    verdict: Verdict
    rules: tuple[RuleResult, ...]
    measured: Mapping[str, Estimate]

    def to_dict(self) -> dict:
        """Plain JSON-able form, as saved in a claims run file."""
        def est(e: Estimate | None) -> dict | None:
            return None if e is None else {"mean": e.mean, "low": e.low, "high": e.high, "n": e.n}

        return {"verdict": self.verdict.value,
                "rules": [{"rule": str(r.rule), "verdict": r.verdict.value, "estimate": est(r.estimate)}
                          for r in self.rules],
                "measured": {k: est(e) for k, e in self.measured.items()}}


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


def statistic(rule: Rule, table: Mapping[int, Mapping[str, float]]) -> list[float]:
    """The rule's per-seed values ``a - b``, in seed order, over the seeds that measured both keys."""
    keys = [rule.a] if rule.b is None else [rule.a, rule.b]
    values = []
    for seed in sorted(table):
        row = table[seed]
        if all(k in row for k in keys):
            values.append(row[rule.a] - (row[rule.b] if rule.b is not None else 0.0))
    return values


def evaluate(claim: Claim, rows: Iterable[Row], seed: int = 0) -> ClaimResult:
    """Decide every rule of ``claim`` over the recorded rows (bootstrap seeded by ``seed``); a rule no seed
    measured is INCONCLUSIVE."""
    table = per_seed(rows)
    results = []
    for rule in claim.rules:
        values = statistic(rule, table)
        if values:
            verdict, estimate = decide(rule, values, seed)
            results.append(RuleResult(rule, verdict, estimate))
        else:
            results.append(RuleResult(rule, Verdict.INCONCLUSIVE, None))
    keys = sorted({k for row in table.values() for k in row})
    measured = {k: bootstrap_mean([table[s][k] for s in sorted(table) if k in table[s]], seed) for k in keys}
    return ClaimResult(claim, combine([r.verdict for r in results]), tuple(results), measured)
