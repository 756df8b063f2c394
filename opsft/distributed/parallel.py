"""Wrapping a model for multi-process training, and moving per-parameter tensors to and from its layout.

- ``ddp``: every rank holds the whole model; gradients are all-reduced (averaged) before ``optimizer.step``,
  so a mask applied in the step pre-hook acts on the same averaged gradient on every rank.
- ``fsdp2``: ``torch.distributed.fsdp.fully_shard`` on each transformer block (the classes the model lists
  in ``_no_split_modules``) and on the root; parameters, gradients and optimizer states are DTensors
  sharded on dim 0, and each rank steps only its own shard.

``shard_like`` gives a sign or location mask the placements of its parameter, so the constraint's
elementwise clamps run shard against shard with no communication; ``full_state`` gathers whole weights on
rank 0 for snapshots and direction extraction.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from opsft.constraints import check_layout, unwrap_model
from opsft.distributed.layout import replicate_as, shard_as
from opsft.distributed.world import World

STRATEGIES: tuple[str, ...] = ("ddp", "fsdp2")


def parallelize(model: torch.nn.Module, strategy: str, world: World) -> torch.nn.Module:
    """The module the training loop drives: ``model`` on the rank's device wrapped in DDP, or sharded in
    place with FSDP2 (blocks first, then the root, so each block's weights are gathered only while it runs).
    Build the optimizer after this call: FSDP2 replaces the parameters by DTensors."""
    if strategy == "ddp":
        model.to(world.device)
        return DistributedDataParallel(model, device_ids=[world.local_rank] if world.device.type == "cuda" else None)
    if strategy == "fsdp2":
        mesh = init_device_mesh(world.device.type, (world.size,))
        blocks = set(getattr(model, "_no_split_modules", None) or ())
        for module in list(model.modules())[1:]:
            if type(module).__name__ in blocks:
                fully_shard(module, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether any parameter is a DTensor (FSDP2), i.e. no rank holds the whole weights."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def shard_like(masks: Mapping[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Each per-parameter mask laid out like its parameter (``layout.shard_as``): on FSDP2 each rank keeps
    only its shard, so the constraint's elementwise clamps run shard against shard. Names and shapes must
    match the model's parameters (a ValueError names the first that does not)."""
    check_layout(masks, model, what="mask")
    params = dict(unwrap_model(model).named_parameters())
    return {name: shard_as(mask, params[name]) for name, mask in masks.items()}


def replicate_like(tensors: Mapping[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Each tensor (e.g. the subspace basis V_K of a weight) replicated on its parameter's mesh
    (``layout.replicate_as``); a ValueError names a tensor that is not a model parameter's."""
    params = dict(unwrap_model(model).named_parameters())
    missing = [name for name in tensors if name not in params]
    if missing:
        raise ValueError(f"{missing[0]!r} (shape {list(tensors[missing[0]].shape)}) is not a model parameter")
    return {name: replicate_as(t, params[name]) for name, t in tensors.items()}


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's distinct parameters as whole CPU tensors on rank 0, an empty dict on other ranks.

    A collective (every rank must call it): FSDP2 shards are all-gathered one tensor at a time and
    offloaded to the CPU. Names are those of the unwrapped module (no ``module.`` prefix), tied weights
    once, as ``opsft.checkpoints.save_state`` writes them in one process."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    if dist.get_rank() != 0:
        return {}
    return {name: state[name] for name, _ in unwrap_model(model).named_parameters()}


def mean_over_ranks(metrics: Mapping[str, float]) -> dict[str, float]:
    """Every float metric averaged over the ranks in one all-reduce (integers such as ``step`` are the same
    on every rank and kept). The weighted loss of ``opsft.distributed.source`` averages to the global
    batch's loss."""
    keys = sorted(k for k, v in metrics.items() if isinstance(v, float))
    out = dict(metrics)
    if not keys:
        return out
    values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        values = values.cuda()
    dist.all_reduce(values)
    out.update(zip(keys, (values / dist.get_world_size()).tolist(), strict=True))
    return out
