"""Executing a plan: every run the plan still needs, trained on workers (``opsft.workers``: processes on this
machine; ``opsft.cluster``: Ray tasks) in dependency order, the run with the longest chain of work still behind
it first (``opsft execute``).

A run starts once its parents are finished; a staged arm's config is built (in this process, from its parent's
result) when that parent finishes. Workers train through ``opsft.runs.run``, whose file lock keyed by the digest
keeps two executors (or a claims session) from training one run twice, and whose result file is written last and
atomically: stopping the executor (Ctrl-C) leaves every finished run cached and every unfinished one resumable
from its last checkpoint. Each finished run prints a progress line: runs done and left, and the training time left
from the plan's estimates of the runs not yet finished, corrected by the pace measured so far (``pace``).

A run that diverges (a non-finite loss or gradient norm: ``opsft.runs`` caches it as diverged) does not stop the
job: the runs that depend on it (start from it, take v from it, are staged after it), or on a run cached as
diverged before, are blocked and not trained, each named in a line, and a last line counts both.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path

from opsft.config import RunConfig
from opsft.plan import Plan, PlannedRun
from opsft.progress import planned_eta_text
from opsft.workers import LocalWorkers, Workers


def config_to_train(run: PlannedRun, cache: Path | None) -> RunConfig:
    """The config of a planned run; a staged arm's built from its (finished) parent's result in ``cache``."""
    if run.staged is None:
        return run.config
    from opsft.runs import run as cached_run

    return run.staged.build(cached_run(run.staged.after, cache))


def block_children(plan: Plan, todo: dict[str, PlannedRun], stopped: dict[str, tuple[str, int]],
                   log: Callable[[str], None]) -> list[str]:
    """Take out of ``todo`` every run that depends, through any chain of parents, on a run in ``stopped`` (key ->
    digest and step of the diverged run that stops it), noting each in ``stopped`` and in a line; their keys."""
    blocked: list[str] = []
    while cut := {k: causes[0] for k, r in todo.items() if (causes := [stopped[p] for p in plan.parents_of(r)
                                                                         if p in stopped])}:
        for key, (digest, step) in cut.items():
            del todo[key]
            stopped[key] = (digest, step)
            blocked.append(key)
            log(f"execute: blocked {key[:16]} ({plan.runs[key].config.objective.name}): it depends on run "
                f"{digest[:16]}, which diverged at step {step}; not trained")
    return blocked


def pace(timed: list[tuple[float, float]], at_least: int = 5) -> float | None:
    """Measured over estimated seconds of the runs finished so far (``(measured, estimated)`` pairs), once at
    least ``at_least`` have finished, kept within [0.5, 2] (a cached run read back in no time, or one slowed by
    a first organism build, does not swing the ETA); None before that."""
    if len(timed) < at_least:
        return None
    return min(2.0, max(0.5, sum(m for m, _ in timed) / sum(e for _, e in timed)))


def execute(plan: Plan, workers: Workers, log: Callable[[str], None] = print) -> int:
    """Train the plan's uncached runs on ``workers``, parents first, the longest remaining chain of work first
    among the ready ones, at most ``workers.slots`` at once. Returns the number of runs trained (or found
    finished by another executor), diverged ones included. A diverged run (``opsft.runs.DivergedRunError``) blocks
    the runs that depend on it and no other (``block_children``); any other failed run stops the execution with
    its error."""
    from opsft.runs import DivergedRunError, diverged_step

    priority = plan.chain_seconds("children")
    todo = {k: r for k, r in plan.runs.items() if not r.cached}
    finished = {k for k, r in plan.runs.items() if r.cached}
    stopped = {k: (k, step) for k in finished if (step := diverged_step(k, workers.cache)) is not None}
    total, done = len(todo), 0
    estimate = {k: r.estimate or 0.0 for k, r in todo.items()}
    timed: list[tuple[float, float]] = []  # (measured, estimated) seconds of the runs finished so far
    diverged: list[str] = []
    blocked: list[str] = []
    running: dict[Future, tuple[str, RunConfig]] = {}
    try:
        while todo or running:
            blocked += block_children(plan, todo, stopped, log)
            ready = sorted((k for k, r in todo.items() if all(p in finished or p not in plan.runs
                                                              for p in plan.parents_of(r))),
                           key=lambda k: -priority[k])
            for key in ready[:max(0, workers.slots - len(running))]:
                config = config_to_train(todo.pop(key), workers.cache)
                running[workers.submit(config)] = (key, config)
            if not running:
                if todo:
                    raise RuntimeError(f"plan has runs whose parents never finish: {sorted(todo)[:3]}")
                break
            for future in wait(running, return_when=FIRST_COMPLETED)[0]:
                key, config = running.pop(future)
                try:
                    wall = future.result()
                    outcome = ""
                    if estimate[key] > 0 and isinstance(wall, (int, float)) and wall > 0:
                        timed.append((float(wall), estimate[key]))
                except DivergedRunError as err:
                    stopped[key] = (err.digest, err.step)
                    if err.digest != config.digest():  # a parent outside the plan diverged
                        blocked.append(key)
                        log(f"execute: blocked {key[:16]} ({config.objective.name}): {err}; not trained")
                        continue
                    diverged.append(key)
                    outcome = f", diverged at step {err.step}"
                finished.add(key)
                done += 1
                cfg = plan.runs[key].config
                left = sum(estimate[k] for k in [*todo, *(k for k, _ in running.values())])
                log(f"execute: {planned_eta_text(done, total, left, workers.slots, pace(timed))} (last: "
                    f"{key[:16]} {cfg.objective.name} {cfg.steps} steps{outcome})")
        if diverged or blocked:
            causes = sorted({stopped[k] for k in diverged + blocked})
            log(f"execute: {len(diverged)} run(s) diverged (cached as diverged), {len(blocked)} run(s) blocked by a "
                f"diverged run and not trained; diverged: {', '.join(f'{d[:16]} at step {s}' for d, s in causes)}")
    except BaseException as err:
        workers.cancel()
        if isinstance(err, KeyboardInterrupt):
            log(f"execute: interrupted after {done}/{total} runs; the finished ones are cached, the {len(running)} "
                "stopped resume from their last checkpoint on the next execute")
        raise
    return done


def cmd_execute(args) -> int:
    """``opsft execute``: plan the main job at a scale, price it, and train what it still needs in worker
    processes on this machine (``--executor local``) or as Ray tasks (``--executor ray``)."""
    from opsft.paths import cache_root
    from opsft.plan import build_plan, render

    if args.executor == "ray":
        from opsft.cluster import RayWorkers
    if args.executor == "local" and args.address:
        raise ValueError(f"--address {args.address}: only for --executor ray")
    if args.executor == "local" and args.gpus_per_run:
        raise ValueError(f"--gpus-per-run {args.gpus_per_run}: only for --executor ray")
    jobs = len(os.sched_getaffinity(0)) if args.jobs is None else args.jobs
    workers = (LocalWorkers(jobs, cache_root()) if args.executor == "local"
               else RayWorkers(args.address, cache_root(), cpus=args.jobs, retries=args.retries,
                               gpus_per_run=args.gpus_per_run, strategy=args.strategy))
    with workers:  # connect first: a dead cluster address fails before the plan is built
        plan = build_plan(args.scale, args.k, Path(args.suite), not args.no_calibration, not args.no_map)
        plan.price(cache_root(), Path(args.storage))
        print(render(plan, workers.slots).splitlines()[-1].strip(), flush=True)
        execute(plan, workers, log=lambda line: print(line, flush=True))
    return 0
