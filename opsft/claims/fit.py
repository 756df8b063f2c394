"""Comparing held-out accuracy at matched training-set accuracy (claim X06).

A checkpoint is a point (t, h): accuracy on the training set and on held-out problems. The reference
frontier is the Pareto front of the reference points (no other point has t' >= t and h' >= h with one
strict), the best held-out accuracy the reference reaches at each level of fit. The frontier at ``x``
interpolates the front linearly in t and is flat beyond its ends: a point fitting less than every front
point is held to the front's best held-out accuracy, one fitting more to that of its best-fitting point;
``frontier_mix`` names the reference points and weights of that mix, so that a claim can form the frontier
from the points' per-problem scores too (``opsft.claims.scored.combine``).
The matched gap of a point is h minus the frontier at t: > 0 when no mix of reference checkpoints that fits as
well generalizes as well, so "beats SFT" is not "fits less".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from opsft.claims.scored import Accuracy, combine

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


def frontier_mix(points: Sequence[Point], train_acc: float) -> list[tuple[int, float]]:
    """The reference points whose held-out accuracies, mixed with weights summing to 1, make the frontier
    at training-set accuracy ``train_acc``: (index into ``points``, weight) of the front point beyond the
    front's ends, else of the two adjacent front points (t0, h0), (t1, h1) around it with weights 1 - w and
    w = (train_acc - t0) / (t1 - t0). A front point that several points share is the first of them."""
    coords = [(float(t), float(h)) for t, h in points]
    front = pareto_front(coords)
    index = [coords.index(p) for p in front]
    if train_acc <= front[0][0]:
        return [(index[0], 1.0)]
    for i, ((t0, _), (t1, _)) in enumerate(zip(front, front[1:], strict=False)):
        if train_acc <= t1:
            w = (train_acc - t0) / (t1 - t0)
            return [(index[i], 1.0 - w), (index[i + 1], w)]
    return [(index[-1], 1.0)]


def scored_frontier(points: Iterable[Point], train_acc: float) -> Accuracy:
    """The frontier's held-out accuracy at ``train_acc`` with its per-problem scores: the mix (``frontier_mix``)
    of the points' held-out ``Accuracy`` values, problem by problem (``opsft.claims.scored.combine``)."""
    points = list(points)
    return combine([(w, points[i][1]) for i, w in frontier_mix(points, train_acc)])


def scored_gap(point: Point, reference: Iterable[Point]) -> Accuracy:
    """The matched gap with its per-problem scores: h - ``scored_frontier(reference, t)`` problem by problem, for a
    point whose held-out accuracy ``h`` is an ``Accuracy`` on the reference's problems."""
    train_acc, held_out = point
    return combine([(1.0, held_out), (-1.0, scored_frontier(reference, train_acc))])
