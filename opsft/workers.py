"""Where a plan's runs train: the interface an executor schedules onto, and worker processes on this machine.

A worker trains a run through ``opsft.runs.run``: under a file lock keyed by the config digest (two executors on
one cache never train a run twice), resuming from the run's last checkpoint, writing its result last and
atomically. So a worker stopped at any point leaves either a finished, verified run or a resumable one.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Protocol

from opsft.config import RunConfig


def train_in_worker(config: RunConfig, cache: Path | None = None) -> float:
    """Train (or read from ``cache``, default ``OPSFT_CACHE``) ``config``; its wall time. ``opsft.runs.run`` pins
    one torch thread while it trains, so the weights do not depend on the worker. A run that diverged (now or
    before, cached as diverged), or whose parent did, raises ``opsft.runs.DivergedRunError``."""
    from opsft.runs import run

    return run(config, cache).completed().wall_time


class Workers(Protocol):
    """Where runs train: ``slots`` runs at once, each submitted as a future of its wall time, into ``cache``
    (None: ``OPSFT_CACHE``)."""

    slots: int
    cache: Path | None

    def submit(self, config: RunConfig) -> Future:
        """Start training ``config``; the future's result is its wall time, its exception the run's error
        (``opsft.runs.DivergedRunError`` for a run that diverged, or whose parent did)."""

    def cancel(self) -> None:
        """Stop every run still training (a stopped run leaves its checkpoint and no result)."""


class LocalWorkers:
    """``jobs`` worker processes on this machine (spawned: no torch state is forked), training into ``cache``
    (default ``OPSFT_CACHE``)."""

    def __init__(self, jobs: int, cache: Path | None = None) -> None:
        if jobs < 1:
            raise ValueError(f"--jobs {jobs}: must be at least 1")
        self.slots, self.cache = jobs, cache
        self._pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))

    def __enter__(self) -> LocalWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, config: RunConfig) -> Future:
        """Train ``config`` in a free worker process."""
        return self._pool.submit(train_in_worker, config, self.cache)

    def cancel(self) -> None:
        """Drop queued runs and terminate the worker processes: a run stopped mid-way keeps its last checkpoint
        and has no result (``opsft.runs.run`` writes it last, atomically), and its file lock dies with it."""
        processes = list(self._pool._processes.values())  # no public terminate before Python 3.14
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
