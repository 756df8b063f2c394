"""Executing a plan on this machine: every run the plan still needs, trained in ``jobs`` worker processes in
dependency order, the run with the longest chain of work still behind it first (``opsft execute``).

A run starts once its parents are finished; a staged arm's config is built (in this process, from its parent's
result) when that parent finishes. Workers train through ``opsft.runs.run``, whose file lock keyed by the digest
keeps two executors (or a claims session) from training one run twice, and whose result file is written last and
atomically: stopping the executor (Ctrl-C) leaves every finished run cached and every unfinished one resumable
from its last checkpoint. Each finished run prints a progress line: runs done and left, seconds per run, ETA.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

from opsft.config import RunConfig
from opsft.plan import Plan, PlannedRun


def train_in_worker(config: RunConfig) -> float:
    """Train (or read from the cache) ``config`` in a worker process at one torch thread; its wall time."""
    import torch

    from opsft.runs import run

    torch.set_num_threads(1)
    return run(config).wall_time


@dataclass
class Progress:
    """Counts and timing of an execution, for the progress line."""

    total: int
    done: int = 0
    start: float = 0.0

    def line(self, finished: PlannedRun) -> str:
        """``execute: D/T runs done (KEY), S s per run, about M min left`` at the mean wall time so far."""
        per = (time.monotonic() - self.start) / self.done
        return (f"execute: {self.done}/{self.total} runs done ({finished.key[:16]} {finished.config.objective.name} "
                f"{finished.config.steps} steps), {per:.0f} s per run, about {per * (self.total - self.done) / 60:.0f} "
                "min left")


def remaining_path(plan: Plan) -> dict[str, float]:
    """Per run key, the estimated seconds of the longest chain of uncached runs that waits on it (itself
    included): the priority of a ready run."""
    children: dict[str, list[str]] = {k: [] for k in plan.runs}
    for key, run in plan.runs.items():
        for parent in plan.parents_of(run):
            if parent in children:
                children[parent].append(key)
    memo: dict[str, float] = {}

    def tail(key: str) -> float:
        if key not in memo:
            run = plan.runs[key]
            own = 0.0 if run.cached else (run.estimate or 0.0)
            memo[key] = own + max((tail(c) for c in children[key]), default=0.0)
        return memo[key]

    return {k: tail(k) for k in plan.runs}


def config_to_train(run: PlannedRun) -> RunConfig:
    """The config of a planned run; a staged arm's built from its (finished) parent's cached result."""
    if run.staged is None:
        return run.config
    from opsft.runs import run as cached_run

    return run.staged.build(cached_run(run.staged.after))


def execute(plan: Plan, jobs: int, log: Callable[[str], None] = print) -> int:
    """Train the plan's uncached runs in ``jobs`` worker processes, parents first, the longest remaining chain
    first among the ready ones. Returns the number of runs trained (or found finished by another executor)."""
    priority = remaining_path(plan)
    todo = {k: r for k, r in plan.runs.items() if not r.cached}
    finished = {k for k, r in plan.runs.items() if r.cached}
    progress = Progress(total=len(todo), start=time.monotonic())
    running: dict[Future, str] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        try:
            while todo or running:
                ready = sorted((k for k, r in todo.items() if all(p in finished or p not in plan.runs
                                                                  for p in plan.parents_of(r))),
                               key=lambda k: -priority[k])
                for key in ready[:max(0, jobs - len(running))]:
                    run = todo.pop(key)
                    running[pool.submit(train_in_worker, config_to_train(run))] = key
                if not running:
                    raise RuntimeError(f"plan has runs whose parents never finish: {sorted(todo)[:3]}")
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    key = running.pop(future)
                    future.result()  # a failed run stops the execution with its error
                    finished.add(key)
                    progress.done += 1
                    log(progress.line(plan.runs[key]))
        except BaseException:
            for future in running:
                future.cancel()
            raise
    return progress.done



def cmd_execute(args) -> int:
    """``opsft execute``: plan the main job at a scale, price it, and train what it still needs."""
    from pathlib import Path

    from opsft.paths import cache_root
    from opsft.plan import build_plan, render

    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: must be at least 1")
    plan = build_plan(args.scale, args.k, Path(args.suite), not args.no_calibration, not args.no_map)
    plan.price(cache_root(), Path(args.storage))
    print(render(plan, args.jobs).splitlines()[-1].strip(), flush=True)
    execute(plan, args.jobs, log=lambda line: print(line, flush=True))
    return 0
