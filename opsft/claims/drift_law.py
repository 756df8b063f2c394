"""The drift law of the sign rule (claim X05, issue "Where each claim holds"): under Adam, each weight that v
allows travels along v at about ``c x lr`` per constrained step, whatever the data says.

Predicted travel per allowed weight after ``h`` steps: ``c x sum_{t < h} lr_t`` (``lr x h`` at a constant rate;
the schedule's own sum otherwise). ``c`` is fitted on one cell and predicted on every other, so the law can fail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opsft.config import OptimConfig
from opsft.train import schedule_factor


def lr_sum(optim: OptimConfig, total_steps: int, horizon: int) -> float:
    """``sum_{t < horizon} lr_t`` of ``optim``'s schedule over a run of ``total_steps`` (``opsft.train``'s
    warmup and decay)."""
    return sum(optim.lr * schedule_factor(optim, total_steps, t) for t in range(horizon))


def fitted_constant(travel: float, lr_total: float) -> float:
    """``c = travel / sum lr`` of the fitting cell; NaN when either is zero or not finite."""
    if not (math.isfinite(travel) and math.isfinite(lr_total)) or lr_total == 0:
        return math.nan
    return travel / lr_total


@dataclass(frozen=True)
class DriftPoint:
    """One cell's sign arm at one horizon: measured travel per allowed weight, the law's prediction and the
    relative error ``measured / predicted - 1``."""

    cell: str
    horizon: int
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """``measured / predicted - 1`` (NaN without a prediction)."""
        return self.measured / self.predicted - 1 if self.predicted else math.nan


def predict(c: float, points: Mapping[tuple[str, int], tuple[float, float]]) -> list[DriftPoint]:
    """The law's prediction ``c x sum lr`` beside each measured point ((cell, horizon) -> (travel, sum lr))."""
    return [DriftPoint(cell, h, travel, c * total) for (cell, h), (travel, total) in sorted(points.items())]


def breaks(points: Sequence[DriftPoint], tolerance: float = 0.25) -> list[DriftPoint]:
    """The points where the law misses by more than ``tolerance`` (relative), or has no finite error."""
    return [p for p in points if not abs(p.error) <= tolerance]
