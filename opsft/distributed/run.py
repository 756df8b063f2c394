"""A RunConfig trained by every process of a torchrun job, into the run cache folder ``opsft.runs.run`` reads.

The pieces are the single-process ones (``opsft.runs``: initial weights, source, constraint; ``opsft.train``:
the loop); what changes is around them: the model is wrapped (DDP) or sharded (FSDP2) before the optimizer
exists, each rank trains on its rows of the global batch (``ShardedSource``), metrics are averaged over
ranks, snapshots are whole weights gathered on rank 0, and checkpoints are sharded. Rank 0 holds the run's
file lock and writes every file; ``result.json`` has the single-process format plus the world size and
strategy, so a later ``opsft.runs.run(config)`` serves the cached run without training.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from filelock import FileLock

from opsft.config import RunConfig
from opsft.distributed.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from opsft.distributed.parallel import full_state, mean_over_ranks, parallelize
from opsft.distributed.source import ShardedSource, loss_normalizer, weighted
from opsft.distributed.world import World, init_process_group, rows_per_rank, world_from_env
from opsft.io import atomic_write_json, file_sha256, read_verified_manifest
from opsft.objectives import make_objective
from opsft.paths import cache_root
from opsft.pretraining import build_organism
from opsft.provenance import provenance
from opsft.runs import (
    RunRecorder,
    _truncate_metrics,
    attach_constraint,
    initial_model,
    local_model_folder,
    make_source,
    run_tokenizer,
    save_snapshot,
)
from opsft.sources import RolloutSource
from opsft.train import make_optimizer, make_scheduler, train

CHECKPOINTS = "checkpoint_sharded"


def snapshot(folder: Path, model: torch.nn.Module, step: int) -> None:
    """Gather the whole weights (every rank takes part) and let rank 0 write them as the step's snapshot."""
    state = full_state(model)
    if dist.get_rank() == 0:
        save_snapshot(folder, state, step)


class DistributedRecorder(RunRecorder):
    """RunRecorder for a torchrun job: metrics averaged over ranks and written by rank 0, snapshots of the
    gathered weights, sharded checkpoints. Every rank calls it after every step."""

    def on_step_end(self, step: int, model, optimizer, metrics: dict) -> None:
        """Record the step; snapshot and checkpoint when due (collectives on every rank)."""
        metrics = mean_over_ranks(metrics)
        if dist.get_rank() == 0:
            with open(self.metrics_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(metrics) + "\n")
        if step in self.config.snapshot_steps or step == self.config.steps:
            snapshot(self.folder, model, step)
        if step % self.config.checkpoint_every == 0 and step < self.config.steps:
            progress = {"step": step, "wall": self.wall(), "scheduler": self.scheduler.state_dict()}
            save_checkpoint(self.folder / CHECKPOINTS, model, optimizer, progress)


def _cached(folder: Path) -> bool:
    """Whether rank 0 finds a verified result.json, told to every rank."""
    found = [dist.get_rank() == 0 and read_verified_manifest(folder / "result.json", "run cache") is not None]
    dist.broadcast_object_list(found, src=0)
    return bool(found[0])


def _train(config: RunConfig, world: World, strategy: str, folder: Path, cache: Path, progress: bool) -> float:
    """Train ``config`` on this rank (resuming from the newest sharded checkpoint); return the wall time."""
    org = None if local_model_folder(config.init) else build_organism(config.organism)
    model = initial_model(config, cache)
    # the source is made from the whole model: a rollout source copies it as the KL reference
    source = ShardedSource(make_source(config, model, org, run_tokenizer(config)), world,
                           loss_normalizer(config.objective))
    model = parallelize(model, strategy, world)
    if isinstance(source.inner, RolloutSource):  # the teacher and the KL reference score on the rank's device
        source.inner.to(world.device)
    optimizer = make_optimizer(model, config.optim)
    scheduler = make_scheduler(optimizer, config.optim, config.steps)
    handle = attach_constraint(config, model, optimizer, cache)
    start, wall_offset = 0, 0.0
    latest = latest_checkpoint(folder / CHECKPOINTS)
    if latest is not None:
        state = load_checkpoint(latest, model, optimizer)
        scheduler.load_state_dict(state["scheduler"])
        start, wall_offset = state["step"], state["wall"]
        if world.is_main:
            print(f"run {config.digest()}: resuming from step {start} on {world.size} ranks")
    if world.is_main:
        _truncate_metrics(folder / "metrics.jsonl", start)
    if start == 0:
        snapshot(folder, model, 0)
    recorder = DistributedRecorder(folder, config, scheduler, wall_offset)
    try:
        train(model, optimizer, source, weighted(make_objective(config.objective)), steps=config.steps,
              start_step=start, scheduler=scheduler, grad_clip=config.optim.grad_clip, callbacks=[recorder],
              progress=progress and world.is_main, desc=f"{config.objective.name} {config.digest()} rank {world.rank}")
    finally:
        if handle is not None:
            handle.remove()
    return recorder.wall()


def run_distributed(config: RunConfig, strategy: str = "ddp", backend: str | None = None, cache: Path | None = None,
                    progress: bool = False) -> Path:
    """Train ``config`` with ``strategy`` (``ddp`` | ``fsdp2``) on every process of the torchrun job this
    process belongs to, unless the run cache already holds it; return the run's folder.

    A world size that does not divide the global batch is refused before the process group, the model or
    any GPU is touched. The job joins and leaves its process group here."""
    world = world_from_env(backend)
    rows_per_rank(config.source, world.size)
    cache = Path(cache) if cache is not None else cache_root()
    folder = cache / "runs" / config.digest()
    folder.mkdir(parents=True, exist_ok=True)
    init_process_group(world)
    try:
        lock = FileLock(str(folder) + ".lock") if world.is_main else contextlib.nullcontext()
        with lock:
            if not _cached(folder):
                if world.is_main:
                    atomic_write_json(folder / "config.json", config.to_dict())
                wall = _train(config, world, strategy, folder, cache, progress)
                if world.is_main:
                    _write_result(config, folder, wall, world, strategy)
            dist.barrier()
    finally:
        dist.destroy_process_group()
    return folder


def _write_result(config: RunConfig, folder: Path, wall: float, world: World, strategy: str) -> None:
    """result.json as ``opsft.runs.run`` writes it (digest, wall time, provenance, snapshot checksums) plus
    the job's shape; the sharded checkpoints are no longer needed."""
    files = sorted(p.relative_to(folder).as_posix() for p in (folder / "snapshots").rglob("*.safetensors"))
    result = {"digest": config.digest(), "wall_time": wall, "provenance": provenance(),
              "sha256": {f: file_sha256(folder / f) for f in files},
              "distributed": {"world_size": world.size, "strategy": strategy, "backend": world.backend}}
    atomic_write_json(folder / "result.json", result)
    shutil.rmtree(folder / CHECKPOINTS, ignore_errors=True)
