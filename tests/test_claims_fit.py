"""The matched-fit frontier of claim X06 (``opsft.claims.fit``) on hand-worked point sets."""

import math

import pytest

from opsft.claims.fit import frontier_mix, pareto_front, scored_frontier, scored_gap
from opsft.claims.scored import Accuracy

# (training-set accuracy, held-out accuracy): (60, 50) is dominated by (70, 55); the front descends in h.
POINTS = [(50.0, 60.0), (70.0, 55.0), (60.0, 50.0), (90.0, 40.0), (80.0, 30.0)]


def scored(h: float, shift: int = 0) -> Accuracy:
    """An accuracy of ``h`` % on 200 problems, right on ``2 h`` of them from ``shift`` on."""
    right = round(2 * h)
    return Accuracy(h, [100.0 if shift <= p < shift + right else 0.0 for p in range(200)])


SCORED = [(t, scored(h)) for t, h in POINTS]


def frontier_at(points, train_acc):
    """The frontier's held-out accuracy (%) alone."""
    return float(scored_frontier(points, train_acc))


def test_pareto_front_keeps_the_non_dominated_points_by_fit():
    assert pareto_front(POINTS) == [(50.0, 60.0), (70.0, 55.0), (90.0, 40.0)]
    assert pareto_front([(50, 50), (50, 50)]) == [(50.0, 50.0)]
    assert pareto_front([(50, 40), (50, 45)]) == [(50.0, 45.0)]  # equal fit: the better held-out wins


def test_frontier_interpolates_between_front_points_and_is_flat_beyond():
    assert frontier_at(SCORED, 60.0) == pytest.approx(57.5)  # halfway from (50, 60) to (70, 55)
    assert frontier_at(SCORED, 80.0) == pytest.approx(47.5)
    assert frontier_at(SCORED, 70.0) == pytest.approx(55.0)
    assert frontier_at(SCORED, 10.0) == 60.0  # fits less than every point: held to the best held-out
    assert frontier_at(SCORED, 99.0) == 40.0  # fits more: held to the best-fitting point's


def test_frontier_mix_names_the_original_points_and_their_weights():
    # front (50, 60) = POINTS[0], (70, 55) = POINTS[1], (90, 40) = POINTS[3]; 60 lies between the first two,
    # w = (60 - 50) / (70 - 50) = 1/2
    assert frontier_mix(POINTS, 60.0) == [(0, pytest.approx(0.5)), (1, pytest.approx(0.5))]
    # between (70, 55) and (90, 40): w = (85 - 70) / 20 = 3/4, h = 55 / 4 + 3 * 40 / 4 = 43.75
    assert frontier_mix(POINTS, 85.0) == [(1, pytest.approx(0.25)), (3, pytest.approx(0.75))]
    assert frontier_at(SCORED, 85.0) == pytest.approx(43.75)
    assert frontier_mix(POINTS, 10.0) == [(0, 1.0)] and frontier_mix(POINTS, 99.0) == [(3, 1.0)]
    # a duplicated point is named by its first index; the indices are those of the unsorted input
    assert frontier_mix([(80.0, 30.0), (20.0, 10.0), (80.0, 30.0)], 99.0) == [(0, 1.0)]
    assert all(sum(w for _, w in frontier_mix(POINTS, x)) == pytest.approx(1.0) for x in (50.0, 70.0, 80.0, 90.0))


def test_matched_gap_is_held_out_minus_the_frontier_at_the_same_fit_problem_by_problem():
    assert float(scored_gap((60.0, scored(59.5)), SCORED)) == pytest.approx(2.0)
    gap = scored_gap((50.0, scored(55.0, shift=10)), SCORED)
    assert float(gap) == pytest.approx(-5.0)
    # right on 10..119 against the frontier (50, 60) right on 0..119: -100 on problems 0..9, else 0
    assert gap.per_problem == tuple([-100.0] * 10 + [0.0] * 190)
    # halfway between (50, 60) and (70, 55): each problem the mix 1/2, 1/2 of the two points' scores
    assert scored_frontier(SCORED, 60.0).per_problem[115] == pytest.approx(50.0)


def test_bad_reference_points_are_refused():
    with pytest.raises(ValueError, match="no reference"):
        pareto_front([])
    with pytest.raises(ValueError, match="non-finite"):
        frontier_mix([(50.0, math.nan)], 50.0)
