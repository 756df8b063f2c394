"""Progress text of a long job: items done and left, time per item so far, and the time left at that pace."""

from __future__ import annotations


def progress_text(done: int, total: int, elapsed: float, noun: str) -> str:
    """``D/T NOUNs done, S s per NOUN, about M min left``: the ETA is (T - D) x elapsed / D, the mean time per
    item so far (``done`` must be at least 1)."""
    per = elapsed / done
    return f"{done}/{total} {noun}s done, {per:.0f} s per {noun}, about {per * (total - done) / 60:.0f} min left"
