"""Claim arms the cached run graph cannot express yet: a run config trained with a fixed location mask that
comes from no run (X02: a Fisher mask) or with step-end hooks (X03: EffOPD extrapolation).

``train_variant`` trains such an arm in the test process, through the same pieces as ``opsft.runs`` (start
weights, optimizer, schedule, constraint, source, objective, loop) but without its cache: the arm is trained
again by every session that asks for it, and returns the weights of the steps it was asked to keep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from transformers import PreTrainedModel

from opsft.config import RunConfig
from opsft.constraints import constrain
from opsft.objectives import make_objective
from opsft.paths import cache_root
from opsft.pretraining import build_organism
from opsft.runs import attach_constraint, initial_model, make_source, run_tokenizer
from opsft.train import make_optimizer, make_scheduler, train

StepHook = Callable[[int, torch.nn.Module], object]
State = dict[str, torch.Tensor]


class _AfterStep:
    """Loop callback: runs each hook after every optimizer step, then copies the weights at the ``keep`` steps
    (so a kept state includes what the hooks did)."""

    def __init__(self, hooks: Sequence[StepHook], keep: Iterable[int]):
        self.hooks, self.keep, self.states = list(hooks), set(keep), {}

    def on_step_end(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, metrics: dict) -> None:
        """Run the hooks; keep a copy of the weights when ``step`` is wanted."""
        for hook in self.hooks:
            hook(step, model)
        if step in self.keep:
            self.states[step] = {n: t.detach().clone() for n, t in model.state_dict().items()}


def train_variant(config: RunConfig, *, masks: Mapping[str, torch.Tensor] | None = None,
                  hooks: Sequence[StepHook] = (), keep: Iterable[int] = ()) -> dict[int, State]:
    """Train ``config`` uncached, additionally under the location mask ``masks`` (name -> bool: a weight may
    move only where True; ``opsft.constraints`` mode ``location``) and with ``hooks(step, model)`` after every
    optimizer step; returns ``{step: weights}`` for each step of ``keep`` (a ValueError names steps past the end)."""
    keep = sorted(set(keep))
    if any(not 1 <= s <= config.steps for s in keep):
        raise ValueError(f"keep steps {keep} fall outside [1, steps={config.steps}]")
    model = initial_model(config)
    optimizer = make_optimizer(model, config.optim)
    handles = [attach_constraint(config, model, optimizer, cache_root())]
    if masks is not None:
        handles.append(constrain(optimizer, model, mode="location", masks=masks))
    after = _AfterStep(hooks, keep)
    source = make_source(config, model, build_organism(config.organism), run_tokenizer(config))
    try:
        train(model, optimizer, source, make_objective(config.objective), steps=config.steps,
              scheduler=make_scheduler(optimizer, config.optim, config.steps), grad_clip=config.optim.grad_clip,
              callbacks=[after], desc=f"variant of {config.digest()}")
    finally:
        for handle in handles:
            if handle is not None:
                handle.remove()
    return after.states


def variant_model(config: RunConfig, state: State) -> PreTrainedModel:
    """A model of ``config``'s architecture holding ``state`` (weights ``train_variant`` kept)."""
    model = initial_model(config)
    model.load_state_dict(state)
    return model
