"""Resumable checkpoints of a torchrun job with ``torch.distributed.checkpoint``: each rank writes its own
shard of the model and optimizer state (DDP ranks write the replicated state once between them), so no
rank ever holds the whole optimizer state. A checkpoint counts only once rank 0 has written its
``progress.pt`` (scheduler state, step, wall time), the last file; older checkpoints are then removed."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from opsft.io import atomic_write

PROGRESS = "progress.pt"


def save_checkpoint(root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, progress: dict) -> Path:
    """Write ``root/step_NNNNNN`` (a collective: every rank calls it); ``progress`` must hold ``step``."""
    folder = root / f"step_{progress['step']:06d}"
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=folder)
    if dist.get_rank() == 0:
        atomic_write(folder / PROGRESS, lambda p: torch.save(progress, p))
        for old in root.iterdir():
            if old != folder:
                shutil.rmtree(old)
    dist.barrier()
    return folder


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root`` as rank 0 sees it, told to every rank (a collective)."""
    found = [None]
    if dist.get_rank() == 0:
        done = sorted(p.parent for p in root.glob(f"step_*/{PROGRESS}"))
        found = [done[-1] if done else None]
    dist.broadcast_object_list(found, src=0)
    return found[0]


def load_checkpoint(folder: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Load every rank's shard of the model and optimizer state from ``folder``; return its progress dict."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return torch.load(folder / PROGRESS, weights_only=False)
