"""Evaluators: math (math-verify, avg@k / pass@k / maj@k), real math benchmarks, lm-eval tasks, evalplus code,
behaviour metrics, and the one entry point :func:`opsft.evals.suite.evaluate`.

Submodules import their heavy dependencies (lm-eval, evalplus, torch) lazily or on their own, so that
``import opsft.evals.math`` stays cheap (its verifier workers start with ``python -m opsft.evals.math``).
"""
