"""The matched-fit frontier of claim X06 (``opsft.claims.fit``) on hand-worked point sets."""

import math

import pytest

from opsft.claims.fit import frontier_at, matched_gap, pareto_front

# (training-set accuracy, held-out accuracy): (60, 50) is dominated by (70, 55); the front descends in h.
POINTS = [(50.0, 60.0), (70.0, 55.0), (60.0, 50.0), (90.0, 40.0), (80.0, 30.0)]


def test_pareto_front_keeps_the_non_dominated_points_by_fit():
    assert pareto_front(POINTS) == [(50.0, 60.0), (70.0, 55.0), (90.0, 40.0)]
    assert pareto_front([(50, 50), (50, 50)]) == [(50.0, 50.0)]
    assert pareto_front([(50, 40), (50, 45)]) == [(50.0, 45.0)]  # equal fit: the better held-out wins


def test_frontier_interpolates_between_front_points_and_is_flat_beyond():
    assert frontier_at(POINTS, 60.0) == pytest.approx(57.5)  # halfway from (50, 60) to (70, 55)
    assert frontier_at(POINTS, 80.0) == pytest.approx(47.5)
    assert frontier_at(POINTS, 70.0) == pytest.approx(55.0)
    assert frontier_at(POINTS, 10.0) == 60.0  # fits less than every point: held to the best held-out
    assert frontier_at(POINTS, 99.0) == 40.0  # fits more: held to the best-fitting point's


def test_matched_gap_is_held_out_minus_the_frontier_at_the_same_fit():
    assert matched_gap((60.0, 59.5), POINTS) == pytest.approx(2.0)
    assert matched_gap((50.0, 55.0), POINTS) == pytest.approx(-5.0)


def test_bad_reference_points_are_refused():
    with pytest.raises(ValueError, match="no reference"):
        pareto_front([])
    with pytest.raises(ValueError, match="non-finite"):
        frontier_at([(50.0, math.nan)], 50.0)
