"""One tensor laid out like one parameter: the leaf the constraint code and the model wrappers share
(it imports nothing from opsft, so ``opsft.constraints`` may use it)."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, Replicate, distribute_tensor


def shard_as(t: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``t`` (the parameter's shape, e.g. its sign mask) with ``param``'s mesh and placements when ``param``
    is a DTensor (FSDP2): each rank keeps only its own rows, cut locally from the whole ``t`` every rank
    holds, with no communication. Otherwise (or if ``t`` is already a DTensor) ``t`` on ``param``'s device."""
    if isinstance(param, DTensor) and not isinstance(t, DTensor):
        return distribute_tensor(t.to(param.device), param.device_mesh, param.placements, src_data_rank=None)
    return t.to(param.device)


def replicate_as(t: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``t`` of any shape (e.g. a subspace basis V_K, [in, K]) replicated on ``param``'s mesh when ``param``
    is a DTensor, so that G_shard @ V_K is a product of local tensors; otherwise ``t`` on ``param``'s device."""
    if isinstance(param, DTensor) and not isinstance(t, DTensor):
        mesh = param.device_mesh
        return distribute_tensor(t.to(param.device), mesh, [Replicate()] * mesh.ndim, src_data_rank=None)
    return t.to(param.device)
