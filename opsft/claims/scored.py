"""Accuracies that remember which problems they got right, so that claims can pair arms problem by problem.

An ``Accuracy`` is a float (the accuracy in %) that also carries the per-problem scores it is the mean of, in
the order of the recorded test draw. It behaves as the float everywhere (``claim.record(arm, seed,
**accuracies(...))``, comparisons, arithmetic); the claim recorder stores the per-problem scores beside the
value, and ``opsft.claims.stats.two_level_interval`` uses them for the test draw's sampling error. Plain
arithmetic drops the scores: a quantity derived from accuracies (a gap, a mean over checkpoints, a mean over
families) keeps them through ``combine`` and ``family_mean``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np


class Accuracy(float):
    """An accuracy ``value`` in % with ``per_problem``: the scores (each 0 or 100 for a pass/fail problem) whose
    mean it is. ``value`` is given as the scorer computed it (its rounding kept, so recorded numbers do not
    change); a ValueError when it is not the scores' mean to within 1e-4 points."""

    per_problem: tuple[float, ...]

    def __new__(cls, value: float, per_problem: Sequence[float]) -> Accuracy:
        scores = tuple(float(x) for x in per_problem)
        if not scores:
            raise ValueError("an Accuracy needs at least one problem's score")
        if abs(float(np.mean(scores)) - float(value)) > 1e-4:
            raise ValueError(f"Accuracy {value} is not the mean {np.mean(scores)} of its per-problem scores")
        accuracy = super().__new__(cls, float(value))
        accuracy.per_problem = scores
        return accuracy


def encode(scores: Sequence[float]) -> str | list[float]:
    """Compact JSON form of per-problem scores: a string of ``0``/``1`` when every score is 0 or 100 (pass/fail
    problems in %), else the list itself."""
    if all(s in (0.0, 100.0) for s in scores):
        return "".join("1" if s else "0" for s in scores)
    return [float(s) for s in scores]


def decode(stored: str | Sequence[float]) -> np.ndarray:
    """Per-problem scores (%) from ``encode``'s form; a ValueError for a string holding anything but 0 and 1."""
    if isinstance(stored, str):
        if set(stored) - {"0", "1"}:
            raise ValueError(f"per-problem scores string holds characters other than 0 and 1: {stored[:40]!r}")
        return 100.0 * (np.frombuffer(stored.encode("ascii"), dtype=np.uint8) - ord("0")).astype(np.float64)
    return np.asarray(stored, dtype=np.float64)


def _per_problem(accuracies: Sequence[float], caller: str) -> list[tuple[float, ...]]:
    """Each accuracy's per-problem scores; a ValueError from ``caller`` for none or naming the positions of
    values that carry none (not an ``Accuracy``)."""
    if not accuracies:
        raise ValueError(f"{caller} needs at least one Accuracy")
    plain = [i for i, acc in enumerate(accuracies) if not isinstance(acc, Accuracy)]
    if plain:
        raise ValueError(f"{caller}: value(s) at position(s) {plain} carry no per-problem scores (not an Accuracy)")
    return [acc.per_problem for acc in accuracies]


def combine(terms: Sequence[tuple[float, Accuracy]]) -> Accuracy:
    """The linear combination sum_i w_i a_i of accuracies scored on one test draw, for ``terms`` (w_i, a_i): its
    value from the accuracies' values, its per-problem scores sum_i w_i a_i.per_problem problem by problem (so a
    difference of arms or a mean over checkpoints keeps the pairing). A ValueError for no terms, a term that is
    not an ``Accuracy``, or per-problem vectors of different lengths."""
    scores = _per_problem([acc for _, acc in terms], "combine")
    lengths = [len(s) for s in scores]
    if len(set(lengths)) > 1:
        raise ValueError(f"combine: per-problem vectors of lengths {lengths}: every term needs the same test draw")
    weights = np.array([float(w) for w, _ in terms])
    return Accuracy(sum(float(w) * float(acc) for w, acc in terms), (weights @ np.array(scores)).tolist())


def family_mean(accuracies: Sequence[Accuracy]) -> Accuracy:
    """The unweighted mean of F family accuracies (each family counts once, whatever its size), as one vector over
    the M problems of all families in order: family f's m_f scores each scaled by M / (F m_f), so that their
    mean is the mean of the family means. A ValueError for no families or one without per-problem scores."""
    families = _per_problem(accuracies, "family_mean")
    total = sum(len(scores) for scores in families)
    scaled = [s * total / (len(families) * len(scores)) for scores in families for s in scores]
    return Accuracy(statistics.fmean(float(acc) for acc in accuracies), scaled)
