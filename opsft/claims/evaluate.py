"""From a claim's recorded rows to its verdicts: per-seed (and per-problem) statistics, interval estimates, rule
verdicts, under every registered rule version (``opsft.claims.registry``, ``opsft.claims.stats``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from opsft.claims.registry import ACCURACY_METRICS, RULE_VERSIONS, SEED_FREE_ARMS, Claim, Rule
from opsft.claims.scored import decode
from opsft.claims.stats import (
    Estimate,
    Verdict,
    combine,
    decide,
    distinct_seed_interval,
    floored_interval,
    t_interval,
    two_level_interval,
    verdict_of,
)

# {"arm": str, "seed": int, "values": {metric: float}, "problems": {metric: encoded scores}}; a divergence row
# (``ClaimRecorder.diverged``) has no values and ``"diverged": {"step": int, "digest": str, "error": str}``
Row = Mapping
CURRENT_VERSION = RULE_VERSIONS[-1]


@dataclass(frozen=True)
class RuleResult:
    """One rule's verdict and the estimate of its statistic (None when no seed measured it); ``note`` says why
    a version-3 verdict is not the interval's own (a guard, merged seeds, missing per-problem scores), and
    ``guards`` holds the guards' own results."""

    rule: Rule
    verdict: Verdict
    estimate: Estimate | None
    note: str = ""
    guards: tuple[RuleResult, ...] = ()

    def to_dict(self) -> dict:
        """Plain JSON-able form, as saved in a claims run file (``note`` and ``guards`` only where present)."""
        out = {"rule": str(self.rule), "verdict": self.verdict.value,
               "estimate": None if self.estimate is None else self.estimate.to_dict()}
        if self.note:
            out["note"] = self.note
        if self.guards:
            out["guards"] = [g.to_dict() for g in self.guards]
        return out


@dataclass(frozen=True)
class ClaimResult:
    """A claim's verdict under each rule version (``versions``: version -> (verdict, rule results)), and the
    current version's estimate of every recorded ``arm.metric``. ``verdict`` and ``rules`` are the current
    version's."""

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
    problem); None otherwise, and for ratio rules (a ratio is not a mean over problems)."""
    if not rule.linear:
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


def per_weights(rows: Iterable[Row]) -> dict[int, dict[str, str]]:
    """``{seed: {"arm.metric": SHA-256 of the weights measured}}`` for rows that carry one (``weights``: runs saved
    before rules v3 carry none; "" for a quantity of no run, which stands for its seed alone)."""
    table: dict[int, dict[str, str]] = {}
    for row in rows:
        if "weights" in row:
            fingerprint = row["weights"] or f"no run, seed {row['seed']}"
            table.setdefault(int(row["seed"]), {}).update({f"{row['arm']}.{m}": fingerprint for m in row["values"]})
    return table


def distinct_seeds(rule: Rule, table: Mapping[int, Mapping[str, float]],
                   problems: Mapping[int, Mapping[str, np.ndarray]],
                   weights: Mapping[int, Mapping[str, str]]) -> tuple[int, str]:
    """Version 3's effective seed count of a rule: over the seeds that measured its keys, the fewest distinct
    weights measured by any key whose arm depends on the seed (``SEED_FREE_ARMS`` excepted); where a seed's row
    carries no weights' SHA-256 (a run saved before rules v3, or a quantity of no run), the fewest distinct
    recordings (value and per-problem scores) instead. A note names the key when that is below the seed count."""
    seeds = [s for s in sorted(table) if all(k in table[s] for k in rule.keys)]
    fewest, note = len(seeds), ""
    for key in rule.keys:
        if key.split(".", 1)[0] in SEED_FREE_ARMS:
            continue
        if all(key in weights.get(s, {}) for s in seeds):
            distinct, what = len({weights[s][key] for s in seeds}), "distinct weights"
        else:
            distinct = len({(table[s][key], problems.get(s, {}).get(key, np.empty(0)).tobytes()) for s in seeds})
            what = "distinct recordings"
        if distinct < fewest:
            fewest, note = distinct, f"{len(seeds)} seeds give {distinct} {what} of {key}: identical seeds count once"
    return fewest, note


def divergences(rows: Iterable[Row]) -> list[Row]:
    """The rows that say a claim test stopped at its seed because a run it loaded diverged, by seed and arm."""
    return sorted((row for row in rows if "diverged" in row), key=lambda row: (int(row["seed"]), row["arm"]))


def divergence_reason(row: Row) -> str:
    """A divergence row in words: ``sft seed 2 diverged at step 37``."""
    return f"{row['arm']} seed {row['seed']} diverged at step {row['diverged']['step']}"


def diverged_note(rule: Rule, table: Mapping[int, Mapping[str, float]], diverged: Sequence[Row]) -> str:
    """Why a diverged run leaves ``rule`` UNDEFINED: the first divergence (``divergences``) at a seed that did not
    measure every key of the rule (its test stopped before it could), in words (``divergence_reason``); "" when
    every diverged seed measured the rule's keys before its test stopped."""
    return next((divergence_reason(row) for row in diverged
                 if not all(k in table.get(int(row["seed"]), {}) for k in rule.keys)), "")


def reads_accuracy(rule: Rule) -> bool:
    """Whether the rule's statistic reads an accuracy metric (``registry.ACCURACY_METRICS``)."""
    return any(key.split(".", 1)[1] in ACCURACY_METRICS for key in rule.keys)


def estimate_v3(rule: Rule, table: Mapping[int, Mapping[str, float]],
                problems: Mapping[int, Mapping[str, np.ndarray]],
                weights: Mapping[int, Mapping[str, str]]) -> tuple[Estimate, str]:
    """Version 3's estimate of a measured rule and a note: the floored two-level interval where per-problem
    scores pair the arms, else the t interval over distinct seeds; identical seeds count once."""
    values = statistic(rule, table)
    seeds, note = distinct_seeds(rule, table, problems, weights)
    per_problem_values = problem_statistic(rule, table, problems)
    if per_problem_values is not None:
        return floored_interval(per_problem_values, seeds, rule.b is not None, center=float(np.mean(values))), note
    return distinct_seed_interval(values, seeds), note


def decide_v3(rule: Rule, table: Mapping[int, Mapping[str, float]],
              problems: Mapping[int, Mapping[str, np.ndarray]], weights: Mapping[int, Mapping[str, str]],
              diverged: Sequence[Row] = ()) -> RuleResult:
    """Version 3's verdict of a rule: the interval's side as in version 2, except that an accuracy rule without
    per-problem scores is INCONCLUSIVE, and a REPRODUCED rule whose guard is NOT REPRODUCED is UNDEFINED
    ("nothing moved"), one whose guard is undecided INCONCLUSIVE. A rule a diverged run kept from a seed
    (``diverged_note``) is UNDEFINED; a rule no seed measured is INCONCLUSIVE."""
    guards = tuple(decide_v3(g, table, problems, weights, diverged) for g in rule.guards)
    if note := diverged_note(rule, table, diverged):
        return RuleResult(rule, Verdict.UNDEFINED, None, note, guards)
    if not statistic(rule, table):
        return RuleResult(rule, Verdict.INCONCLUSIVE, None, "no seed measured it", guards)
    estimate, note = estimate_v3(rule, table, problems, weights)
    verdict = verdict_of(rule, estimate)
    if verdict is not Verdict.UNDEFINED and reads_accuracy(rule) and problem_statistic(rule, table, problems) is None:
        return RuleResult(rule, Verdict.INCONCLUSIVE, estimate,
                          "an accuracy without its per-problem scores: the test draw's error is unknown", guards)
    if verdict is Verdict.REPRODUCED:
        still = [g for g in guards if g.verdict is Verdict.NOT_REPRODUCED]
        open_ = [g for g in guards if g.verdict is not Verdict.REPRODUCED]
        if still:
            return RuleResult(rule, Verdict.UNDEFINED, estimate, f"nothing moved: {still[0].rule} does not hold", guards)
        if open_:
            return RuleResult(rule, Verdict.INCONCLUSIVE, estimate,
                              f"movement not established: {open_[0].rule} is {open_[0].verdict.value}", guards)
    return RuleResult(rule, verdict, estimate, note, guards)


def decide_rules(rules: Iterable[Rule], version: int, table: Mapping[int, Mapping[str, float]],
                 problems: Mapping[int, Mapping[str, np.ndarray]], weights: Mapping[int, Mapping[str, str]],
                 seed: int, diverged: Sequence[Row] = ()) -> tuple[RuleResult, ...]:
    """Every rule's verdict under ``version``'s statistics; a rule a diverged run kept from a seed
    (``diverged_note``) is UNDEFINED, a rule no seed measured INCONCLUSIVE."""
    results = []
    for rule in rules:
        values = statistic(rule, table)
        if version >= 3:
            results.append(decide_v3(rule, table, problems, weights, diverged))
        elif note := diverged_note(rule, table, diverged):
            results.append(RuleResult(rule, Verdict.UNDEFINED, None, note))
        elif not values:
            results.append(RuleResult(rule, Verdict.INCONCLUSIVE, None))
        elif version == 1:
            results.append(RuleResult(rule, *decide(rule, values, seed)))
        else:
            estimate = estimate_v2(values, problem_statistic(rule, table, problems))
            results.append(RuleResult(rule, verdict_of(rule, estimate), estimate))
    return tuple(results)


def evaluate(claim: Claim, rows: Iterable[Row], seed: int = 0) -> ClaimResult:
    """Decide ``claim`` over the recorded rows under every rule version (version 1's bootstrap seeded by
    ``seed``), with the current version's estimate of every recorded key. Rows that say a run diverged
    (``divergences``) make the rules missing that seed's measurements UNDEFINED."""
    rows = list(rows)
    table, problems, weights = per_seed(rows), per_problem(rows), per_weights(rows)
    diverged = divergences(rows)
    versions = {}
    for version in RULE_VERSIONS:
        results = decide_rules(claim.rules_for(version), version, table, problems, weights, seed, diverged)
        versions[version] = (combine([r.verdict for r in results]), results)
    keys = sorted({k for row in table.values() for k in row})
    measured = {k: estimate_v3(Rule(k, ">"), table, problems, weights)[0] for k in keys}
    return ClaimResult(claim, versions, measured)
