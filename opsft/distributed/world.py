"""The torchrun job this process belongs to (rank, world size, device) and how a global batch splits over it.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; researchers run
``nccl`` on GPUs, CI runs ``gloo`` on CPU processes. Every split check runs before a process group or a
model exists, so a bad world size costs no GPU time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from opsft.config import SourceConfig

BACKENDS: tuple[str, ...] = ("nccl", "gloo")
TORCHRUN_VARIABLES: tuple[str, ...] = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class World:
    """This process's place in the job: global ``rank`` of ``size`` processes, ``local_rank`` on its node."""

    rank: int
    size: int
    local_rank: int
    backend: str

    @property
    def device(self) -> torch.device:
        """``cuda:<local_rank>`` under nccl, the CPU under gloo."""
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes files."""
        return self.rank == 0


def world_from_env(backend: str | None = None) -> World:
    """The World torchrun describes in the environment; ``backend`` defaults to nccl when CUDA is available,
    gloo otherwise."""
    missing = [k for k in TORCHRUN_VARIABLES if k not in os.environ]
    if missing:
        raise RuntimeError(f"environment variables {missing} are unset: launch with "
                           "`torchrun --nproc-per-node N -m opsft.distributed ...`")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "nccl" and not torch.cuda.is_available():
        raise RuntimeError("backend 'nccl' needs CUDA GPUs; use 'gloo' to run on CPU processes")
    return World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]), backend)


def init_process_group(world: World) -> None:
    """Join the job's process group (and pin this process's GPU under nccl)."""
    if world.backend == "nccl":
        torch.cuda.set_device(world.local_rank)
    dist.init_process_group(world.backend, rank=world.rank, world_size=world.size)


def split_rows(global_rows: int, world_size: int, what: str) -> int:
    """Rows per rank, B / W; a ValueError naming ``what`` unless the world size W divides B."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    if global_rows % world_size:
        raise ValueError(f"world size {world_size} does not divide the {what} ({global_rows}): every rank must "
                         f"train on the same number of rows; pick a world size that divides {global_rows}")
    return global_rows // world_size


def rows_per_rank(source: SourceConfig, world_size: int) -> int:
    """Sequences each rank trains on per step: ``batch_size / W`` for static data; for rollouts whole GRPO
    groups, ``(prompts_per_step / W) * group_size``, so no group's advantage is split over ranks."""
    if source.kind == "static":
        return split_rows(source.batch_size, world_size, "global batch size SourceConfig.batch_size")
    prompts = split_rows(source.prompts_per_step, world_size, "prompts per step SourceConfig.prompts_per_step")
    return prompts * source.group_size
