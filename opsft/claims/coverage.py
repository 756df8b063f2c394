"""Claim X01 (our own): "every accuracy claim over at least 3 seeds with 95% intervals and an effect size; the
papers report none". An audit of the claims runs saved in a storage folder (``--claims-storage``): for each
accuracy claim, the newest saved record at a scale, its seed count, and for each current (version 2) rule its
interval (``opsft.claims.stats``: two-level where the arms are paired by problem) and the effect size of its
per-seed statistic.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opsft.claims.evaluate import evaluate, per_seed, statistic
from opsft.claims.registry import CLAIMS, Claim
from opsft.claims.stats import Estimate
from opsft.claims.storage import read_run, saved_runs

# Metrics that are accuracies (%, or gaps between accuracies): a claim decided on one is an accuracy claim.
ACCURACY_METRICS = frozenset({"in_domain", "max_in_domain", "mean_in_domain", "ood_mean", "ood_informative",
                              "train_set", "held_out_mean", "matched_gap"})


def is_accuracy_claim(claim: Claim) -> bool:
    """Whether any current rule of ``claim`` reads an accuracy metric (``ACCURACY_METRICS``)."""
    return any(key.split(".", 1)[1] in ACCURACY_METRICS for rule in claim.rules_for(2) for key in rule.keys)


def effect_size(values: Sequence[float], center: float = 0.0) -> float:
    """Cohen's d_z of per-seed values of a statistic (a paired difference between arms, or one quantity):
    (mean - center) / s, s the sample standard deviation, ``center`` the value the rule compares with; NaN for
    fewer than two values or 0 / 0, +-inf when every seed agrees exactly on a value off ``center``."""
    if len(values) < 2:
        return math.nan
    shift, sd = statistics.fmean(values) - center, statistics.stdev(values)
    if sd == 0:
        return math.nan if shift == 0 else math.copysign(math.inf, shift)
    return shift / sd


def latest_records(storage: Path, scale: str) -> dict[str, dict]:
    """For each claim id, its record (verdict, rows, seeds) in the newest run saved at ``scale`` that holds it."""
    latest: dict[str, dict] = {}
    for path in saved_runs(storage):
        run = read_run(path)
        if run.get("scale") == scale:
            latest.update(run["claims"])
    return latest


@dataclass(frozen=True)
class RuleCoverage:
    """One rule of an accuracy claim: the version-2 estimate of its statistic (None: no seed measured it)
    and the statistic's effect size against the rule's boundary (against 0 for a tolerance rule)."""

    rule: str
    estimate: Estimate | None
    effect_size: float


@dataclass(frozen=True)
class ClaimCoverage:
    """An accuracy claim's saved record: how many seeds it ran and its rules' intervals and effect sizes."""

    claim_id: str
    seeds: int
    rules: tuple[RuleCoverage, ...]


def audit(storage: Path, scale: str) -> list[ClaimCoverage]:
    """The coverage of every accuracy claim saved at ``scale`` in ``storage``, in claim order, each current rule
    re-evaluated from the saved rows."""
    out = []
    for claim_id, record in sorted(latest_records(storage, scale).items()):
        claim = CLAIMS.get(claim_id)
        if claim is None or not is_accuracy_claim(claim):
            continue
        table = per_seed(record["rows"])
        rules = []
        for result in evaluate(claim, record["rows"]).versions[2][1]:
            rule = result.rule
            center = 0.0 if rule.op == "within" else rule.boundary  # "within": the distance from no difference
            rules.append(RuleCoverage(str(rule), result.estimate, effect_size(statistic(rule, table), center)))
        out.append(ClaimCoverage(claim_id, len(record["seeds"]), tuple(rules)))
    return out
