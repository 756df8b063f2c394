"""Comparison of a claims run with a saved baseline, and ``--claims-compare-fail`` thresholds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opsft.claims.registry import METRIC_DIRECTIONS

# The tolerances CI compares the claims at `ci` with the committed baseline by (noxfile.py) and `opsft claims
# compare` applies by default. They allow another CPU's rounding (the organism is pretrained from scratch on the
# CI machine; on the same machine type the runs are bit-identical): about three problems of the 64 scored per
# family.
CI_TOLERANCES = ("in_domain:5", "train_set:5", "held_out_mean:5", "updated_pct:5")


@dataclass(frozen=True)
class Threshold:
    """A two-sided tolerance on a metric (``in_domain``) or one ``arm.metric``: absolute, or relative in %."""

    metric: str
    tolerance: float
    relative: bool

    def matches(self, key: str) -> bool:
        """Whether the threshold applies to the recorded ``arm.metric`` key."""
        return key == self.metric or key.split(".", 1)[1] == self.metric

    def exceeded(self, baseline: float, current: float) -> bool:
        """Whether ``current`` differs from ``baseline`` by more than the tolerance (either way)."""
        allowed = self.tolerance * abs(baseline) / 100 if self.relative else self.tolerance
        return abs(current - baseline) > allowed


def parse_threshold(spec: str) -> Threshold:
    """``metric:tolerance`` or ``metric:tolerance%``, e.g. ``in_domain:2`` or ``updated_pct:10%``."""
    metric, sep, tol = spec.rpartition(":")
    relative = tol.endswith("%")
    try:
        tolerance = float(tol.rstrip("%"))
    except ValueError:
        tolerance = math.nan
    if not sep or not metric or not tolerance >= 0:
        raise ValueError(f"--claims-compare-fail {spec!r}: expected METRIC:TOLERANCE[%] with TOLERANCE >= 0")
    return Threshold(metric, tolerance, relative)


@dataclass(frozen=True)
class Change:
    """The change of one claim's ``arm.metric`` mean against the baseline, and whether it breaks a threshold."""

    claim: str
    key: str
    baseline: float
    current: float
    failed: bool

    @property
    def unchanged(self) -> bool:
        """Whether the mean is bit-identical to the baseline's (NaN counts as equal to NaN)."""
        return self.current == self.baseline or (math.isnan(self.current) and math.isnan(self.baseline))

    @property
    def direction(self) -> str:
        """"unchanged"; else "better" / "worse" by the metric's registered direction, else "changed"."""
        if self.unchanged:
            return "unchanged"
        want = METRIC_DIRECTIONS.get(self.key.split(".", 1)[1])
        if want is None:
            return "changed"
        return "better" if (self.current > self.baseline) == (want == "higher") else "worse"

    def __str__(self) -> str:
        mark = "FAIL " if self.failed else ""
        return (f"{mark}{self.claim} {self.key}: {self.baseline:.4g} -> {self.current:.4g} "
                f"({self.current - self.baseline:+.4g}, {self.direction})")


def compare(current: Mapping[str, Mapping], baseline: Mapping[str, Mapping],
            thresholds: Sequence[Threshold]) -> list[Change]:
    """Changes of every measured mean present in both runs' ``claims`` sections (``{id: {"measured":
    {key: {"mean": ...}}}}``); a change fails when any matching threshold is exceeded, or when one side is
    NaN and the other is not."""
    changes = []
    for claim_id in sorted(current.keys() & baseline.keys()):
        now, then = current[claim_id]["measured"], baseline[claim_id]["measured"]
        for key in sorted(now.keys() & then.keys()):
            a, b = then[key]["mean"], now[key]["mean"]
            relevant = [t for t in thresholds if t.matches(key)]
            nan_flip = math.isnan(a) != math.isnan(b)
            failed = bool(relevant) and (nan_flip or any(t.exceeded(a, b) for t in relevant))
            changes.append(Change(claim_id, key, a, b, failed))
    return changes
