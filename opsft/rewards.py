"""Rewards of the on-policy objectives: 1.0 for a completion that solves its problem, else 0.0."""

from __future__ import annotations

from opsft.data.real import RealProblem
from opsft.evals.math import is_correct as math_is_correct
from opsft.organism import tasks


def reward(problem: object, completion: str) -> float:
    """1.0 when the completion solves the problem: organism problems by their own verifier, real math by
    math-verify on the boxed answer. Real code rewards need a sandbox and are not computed in the trainer."""
    if isinstance(problem, tasks.Problem):
        return float(tasks.is_correct(problem, completion))
    if isinstance(problem, RealProblem) and problem.kind == "math":
        return float(math_is_correct(completion, problem.answer, require_boxed=True))
    raise ValueError(f"no reward for {type(problem).__name__} of kind {getattr(problem, 'kind', '?')!r}: real code "
                     "rewards are scored by evalplus, not inside the training loop")
