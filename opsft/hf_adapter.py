"""Hugging Face ``Trainer`` and TRL trainer (``SFTTrainer``, ``GRPOTrainer``: ``Trainer`` subclasses) adapters:
OPSFT constraints and EffOPD extrapolation as ``TrainerCallback``s, nothing forked.

    trainer = SFTTrainer(..., callbacks=[ConstraintCallback(direction, mode="sign")])

The constraint attaches to the optimizer in ``on_train_begin`` (after the Trainer has built and
accelerate-wrapped it) and detaches in ``on_train_end``. The Trainer clips gradients before
``optimizer.step()``, so the mask acts on the clipped, accumulated (and, under DDP, all-reduced) gradient.
Mixed precision (TRL's default bf16 autocast) and gradient checkpointing change only how the gradient is
computed: the hooks act on the parameters as stored (fp32 under autocast) and on their gradients.

Without a callback, the optimizer route works too: ``constrain(optimizer, model, direction)`` on an optimizer
built by hand, passed as ``optimizers=(optimizer, None)``; accelerate's wrapper calls its ``step()``, so the
hooks fire.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from opsft.constraints import ConstraintHandle, Extrapolation, constrain


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside accelerate's ``AcceleratedOptimizer`` (or the optimizer itself)."""
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
        optimizer = optimizer.optimizer  # AcceleratedOptimizer subclasses Optimizer but holds no hook state
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"expected a torch optimizer (or a wrapper holding one), got {type(optimizer).__name__}")
    return optimizer


class ConstraintCallback(TrainerCallback):
    """Applies ``opsft.constraints.constrain(optimizer, model, direction, **kwargs)`` for one ``train()``."""

    def __init__(self, direction: Any = None, **constrain_kwargs: Any) -> None:
        self.direction = direction
        self.kwargs = constrain_kwargs
        self.handle: ConstraintHandle | None = None

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: torch.nn.Module | None = None, optimizer: Any = None, **kwargs: Any) -> None:
        """Attach the step hooks to the Trainer's optimizer."""
        if model is None or optimizer is None:
            raise ValueError("ConstraintCallback needs the Trainer's model and optimizer in on_train_begin")
        self.handle = constrain(inner_optimizer(optimizer), model, self.direction, **self.kwargs)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        """Detach the hooks."""
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


class ExtrapolationCallback(TrainerCallback):
    """Runs ``Extrapolation.on_step_end(state.global_step, model)`` after every optimizer step (EffOPD, X03)."""

    def __init__(self, extrapolation: Extrapolation) -> None:
        self.extrapolation = extrapolation

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    model: torch.nn.Module | None = None, **kwargs: Any) -> None:
        """Try the extrapolation at power-of-two global steps."""
        if model is not None:
            self.extrapolation.on_step_end(state.global_step, model)
