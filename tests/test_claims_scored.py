"""Quantities derived from per-problem accuracies (``opsft.claims.scored``): linear combinations and family means."""

import numpy as np
import pytest

from opsft.claims.scored import Accuracy, combine, family_mean


def test_combine_is_the_same_combination_of_values_and_of_per_problem_scores():
    early, mid, late = (Accuracy(50.0, [100, 0, 100, 0]), Accuracy(75.0, [100, 100, 100, 0]),
                        Accuracy(100.0, [100, 100, 100, 100]))
    diminishing = combine([(-1, early), (2, mid), (-1, late)])  # (mid - early) - (late - mid)
    assert float(diminishing) == pytest.approx(0.0)
    assert diminishing.per_problem == (0.0, 100.0, 0.0, -100.0)
    mean = combine([(1 / 3, a) for a in (early, mid, late)])
    assert float(mean) == pytest.approx(75.0)
    assert mean.per_problem == pytest.approx((100.0, 200 / 3, 100.0, 100 / 3))


def test_combine_refuses_different_draws_and_plain_numbers():
    with pytest.raises(ValueError, match=r"lengths \[2, 3\]"):
        combine([(1, Accuracy(50.0, [100, 0])), (-1, Accuracy(0.0, [0, 0, 0]))])
    with pytest.raises(ValueError, match=r"position\(s\) \[1\]"):
        combine([(1, Accuracy(50.0, [100, 0])), (-1, 50.0)])
    with pytest.raises(ValueError, match="at least one"):
        combine([])


def test_family_mean_counts_each_family_once_whatever_its_size():
    small, large = Accuracy(100.0, [100, 100]), Accuracy(25.0, [100, 0, 0, 0])
    mean = family_mean([small, large])
    assert float(mean) == pytest.approx(62.5)  # (100 + 25) / 2, not 300 / 6
    # M = 6 problems, F = 2 families: the small family's scores scaled by 6 / 4, the large one's by 6 / 8
    assert mean.per_problem == pytest.approx((150.0, 150.0, 75.0, 0.0, 0.0, 0.0))
    assert float(np.mean(mean.per_problem)) == pytest.approx(float(mean))
    one = family_mean([large])
    assert one == large and one.per_problem == large.per_problem
    with pytest.raises(ValueError, match=r"position\(s\) \[0\]"):
        family_mean([25.0, large])
