"""The one training loop. It does not know which method it runs: the source makes the batch, the objective
turns token log-probabilities into a loss, and constraints ride on the optimizer's step hooks."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Protocol

import torch
from tqdm.auto import tqdm

from opsft.config import OptimConfig
from opsft.objectives import Objective, batch_logprobs


class Source(Protocol):
    """Anything that yields the batch of a step (static trajectories or on-policy rollouts)."""

    def batch(self, model: torch.nn.Module, step: int) -> dict[str, torch.Tensor]: ...


class Callback(Protocol):
    """Called after every optimizer step with the number of steps taken so far."""

    def on_step_end(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, metrics: dict) -> None: ...


class NonFiniteLossError(RuntimeError):
    """A loss or gradient norm became NaN/inf at optimizer step ``step`` (1-based; that step is not taken);
    ``metrics`` holds what the step measured, its non-finite value included. ``opsft.runs`` finishes such a run
    as diverged."""

    def __init__(self, message: str, step: int, metrics: dict):
        super().__init__(message)
        self.step, self.metrics = step, metrics

    def __reduce__(self):
        return type(self), (str(self), self.step, self.metrics)


def make_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW over every trainable parameter with the config's betas, eps and weight decay; the fused kernel
    (2-4x faster on CPU than the default, and it takes sqrt(0) off MKL's slow special-value path that a sign
    mask's exact-zero second moments would hit every step; see ``opsft.constraints``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay,
                             fused=True)


def schedule_factor(cfg: OptimConfig, steps: int, step: int) -> float:
    """The learning-rate multiplier at ``step`` (0-based) of a run of ``steps``: linear warmup over
    ``warmup_frac`` of the steps, then 1 (constant) or cosine decay to ``min_lr_ratio``."""
    warmup = int(cfg.warmup_frac * steps)
    if step < warmup:
        return (step + 1) / warmup
    if cfg.schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, steps - warmup)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule of ``schedule_factor`` on ``optimizer``."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule_factor(cfg, steps, step))


def train(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    source: Source,
    objective: Objective,
    *,
    steps: int,
    start_step: int = 0,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    grad_clip: float | None = None,
    callbacks: Sequence[Callback] = (),
    progress: bool = False,
    desc: str = "train",
    length_chunks: int = 1,
) -> None:
    """Run optimizer steps ``start_step + 1 .. steps``: batch -> forward -> objective -> backward -> clip ->
    step (constraint hooks fire inside ``optimizer.step``) -> callbacks (metrics, snapshots, checkpoints).
    ``length_chunks`` > 1 runs each right-padded batch in that many length-sorted, trimmed groups
    (``batch_logprobs``)."""
    model.train()
    bar = tqdm(range(start_step, steps), desc=desc, disable=None if progress else True, leave=False)
    for step in bar:
        t0 = time.perf_counter()
        batch = source.batch(model, step)
        t_batch = time.perf_counter() - t0
        logp = batch_logprobs(model, batch, length_chunks)  # (B, L-1)
        loss, metrics = objective(logp, batch)
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"non-finite loss {loss.item()} at step {step + 1} ({desc})", step + 1,
                                     {**metrics, "step": step + 1, "loss": loss.item()})
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            if not torch.isfinite(norm):
                raise NonFiniteLossError(f"non-finite gradient norm at step {step + 1} ({desc})", step + 1,
                                         {**metrics, "step": step + 1, "loss": loss.item(), "grad_norm": norm.item()})
            metrics["grad_norm"] = norm.item()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        metrics.update(step=step + 1, loss=loss.item(), lr=optimizer.param_groups[0]["lr"],
                       t_batch=t_batch, t_step=time.perf_counter() - t0)
        for cb in callbacks:
            cb.on_step_end(step + 1, model, optimizer, metrics)
        bar.set_postfix(loss=f"{metrics['loss']:.3f}")
