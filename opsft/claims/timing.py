"""Wall time of a training recipe from its runs' records (claim C05: "the time of OPSFT includes both
identifying the on-policy update direction and the subsequent OPSFT training", OPSFT Table 2)."""

from __future__ import annotations

from opsft.runs import RunResult


def time_to_step(result: RunResult, step: int) -> float:
    """Seconds ``result``'s run took to reach ``step``: its wall time minus the per-step times ``t_step`` of
    the steps after ``step``. Everything not inside a step (setup, snapshots) is charged to the part before
    ``step``, so the time is never understated. A KeyError names a run without per-step times."""
    if not 0 <= step <= result.config.steps:
        raise ValueError(f"time_to_step: step {step} outside [0, {result.config.steps}]")
    later = [m for m in result.metrics if m["step"] > step]
    missing = [m["step"] for m in later if "t_step" not in m]
    if missing:
        raise KeyError(f"run {result.config.digest()}: steps {missing[:3]} have no 't_step' in metrics.jsonl")
    return result.wall_time - sum(m["t_step"] for m in later)
