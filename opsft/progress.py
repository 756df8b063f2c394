"""Progress text of a long job: items done and left, time per item so far, and the time left at that pace."""

from __future__ import annotations


def progress_text(done: int, total: int, elapsed: float, noun: str) -> str:
    """``D/T NOUNs done, S s per NOUN, about M min left``: the ETA is (T - D) x elapsed / D, the mean time per
    item so far (``done`` must be at least 1)."""
    per = elapsed / done
    return f"{done}/{total} {noun}s done, {per:.0f} s per {noun}, about {per * (total - done) / 60:.0f} min left"


def planned_eta_text(done: int, total: int, left_seconds: float, workers: int, pace: float | None) -> str:
    """``D/T runs done, about M min of training left``: the plan's estimated seconds of the runs not yet finished
    over ``workers``, times ``pace`` (measured over estimated seconds of the runs finished so far; None: not yet
    known, the estimates as they are). Right from the first run, unlike a mean over the runs done."""
    factor = 1.0 if pace is None else pace
    note = "the plan's estimates" if pace is None else f"the plan's estimates x {pace:.2f}, the pace so far"
    return (f"{done}/{total} runs done, about {left_seconds * factor / workers / 60:.0f} min of training left "
            f"({note}, {workers} workers)")
