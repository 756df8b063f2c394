"""Comparing held-out accuracy at matched training-set accuracy (claim X06).

A checkpoint is a point (t, h): accuracy on the training set and on held-out problems. The reference
frontier is the Pareto front of the reference points (no other point has t' >= t and h' >= h with one
strict), the best held-out accuracy the reference reaches at each level of fit. ``frontier_at(x)``
interpolates the front linearly in t and is flat beyond its ends: a point fitting less than every front
point is held to the front's best held-out accuracy, one fitting more to that of its best-fitting point.
The matched gap of a point is h - frontier_at(t): > 0 when no mix of reference checkpoints that fits as
well generalizes as well, so "beats SFT" is not "fits less".
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Point = tuple[float, float]  # (training-set accuracy, held-out accuracy)


def pareto_front(points: Iterable[Point]) -> list[Point]:
    """The non-dominated points, sorted by training-set accuracy (ascending; held-out then descends).
    A ValueError for no points or a non-finite coordinate."""
    pts = sorted({(float(t), float(h)) for t, h in points}, key=lambda p: (-p[0], -p[1]))
    if not pts:
        raise ValueError("pareto_front: no reference points")
    if not all(math.isfinite(c) for p in pts for c in p):
        raise ValueError(f"pareto_front: non-finite accuracy in {pts}")
    front, best_h = [], -math.inf
    for t, h in pts:  # by fit, best first: a point survives when it generalizes better than every fitter one
        if h > best_h:
            front.append((t, h))
            best_h = h
    return front[::-1]


def frontier_at(points: Iterable[Point], train_acc: float) -> float:
    """Held-out accuracy of the reference's Pareto front at training-set accuracy ``train_acc``: linear
    between adjacent front points, flat beyond the front's ends."""
    front = pareto_front(points)
    if train_acc <= front[0][0]:
        return front[0][1]
    for (t0, h0), (t1, h1) in zip(front, front[1:], strict=False):
        if train_acc <= t1:
            return h0 + (h1 - h0) * (train_acc - t0) / (t1 - t0)
    return front[-1][1]


def matched_gap(point: Point, reference: Iterable[Point]) -> float:
    """h - frontier_at(reference, t) for ``point`` = (t, h): the held-out gain over the reference at the
    point's own training-set accuracy."""
    train_acc, held_out = point
    return held_out - frontier_at(reference, train_acc)
