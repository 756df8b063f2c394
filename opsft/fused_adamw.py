"""OPSFT's constraint fused into AdamW's own update (``constrain(..., fused=True)``).

The hook path (``opsft.constraints.MaskConstraint``) wraps any optimizer with four extra elementwise passes per
weight (56 bytes per fp32 weight on top of fused AdamW's 28). This path replaces AdamW's update by one C++ loop
(``opsft/csrc/sign_adamw.cpp``) that, per element with code c (v in {-1, 0, +1}, or 2 for a location mask's
free weights), masks the gradient, updates both moments, takes the decoupled-weight-decay AdamW step

    theta <- theta (1 - lr wd) - lr sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(s) + eps sqrt(1 - beta2^t))

(torch's AdamW with its bias corrections folded into two scalars: one division per weight instead of two) and
restores the weight to the value it read when the step went against c. Reading that value in the same pass is
what removes the hooks' copy of theta_old, and the codes are stored at 2 bits a weight (``pack_codes``): 28.25
bytes per fp32 weight in all, against plain AdamW's 28.

It is not bit-identical to torch's AdamW (the folded bias correction rounds differently, ~1 ulp per step), so the
default stays the hook path, which every committed result uses; the constraint's invariants hold exactly on both.
The kernel builds on first use with ``torch.utils.cpp_extension`` (a C++ compiler and ninja), once per CPU model,
under the cache folder (``extensions/``): ``-march=native`` code must not run on another CPU sharing the cache.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import torch

from opsft.extensions import build

FREE = 2  # code of a weight a location mask leaves free to move either way
BLOCK = 256  # weights per 64-byte line of packed codes (BLOCK in csrc/sign_adamw.cpp)


@functools.cache
def kernel() -> ModuleType:
    """The compiled extension ``csrc/sign_adamw.cpp`` (``opsft.extensions.build``)."""
    return build("sign_adamw")


def codes_of(mask: torch.Tensor) -> torch.Tensor:
    """Kernel codes of a mask: int8 signs as they are (-1, 0, +1), a bool location mask as 2 (free) / 0."""
    if mask.dtype == torch.bool:
        return mask.to(torch.int8) * FREE
    if mask.dtype != torch.int8:
        raise ValueError(f"a mask must be int8 signs or bool locations, got {mask.dtype}")
    return mask


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """The kernel's 2-bit layout of int8 codes in {-1, 0, +1, 2}: code c is stored as c & 3 (-1 -> 3), in
    blocks of 256 weights (flattened order, the last block zero-padded) of 64 bytes each, where byte k holds the
    codes of the block's weights k, k + 64, k + 128, k + 192 in bits 0-1, 2-3, 4-5, 6-7."""
    flat = codes.reshape(-1)
    blocks = -(-flat.numel() // BLOCK)
    padded = torch.zeros(blocks * BLOCK, dtype=torch.uint8)
    padded[: flat.numel()] = (flat & 3).to(torch.uint8)
    quarters = padded.view(blocks, 4, BLOCK // 4)
    packed = quarters[:, 0] | (quarters[:, 1] << 2) | (quarters[:, 2] << 4) | (quarters[:, 3] << 6)
    return packed.reshape(-1).contiguous()


def _check_group(group: dict[str, Any]) -> None:
    unsupported = [k for k in ("amsgrad", "maximize", "capturable", "differentiable") if group.get(k)]
    if unsupported:
        raise ValueError(f"fused constraint: AdamW option(s) {', '.join(unsupported)} are not supported; "
                         "use the hook path (fused=False)")


class FusedMaskConstraint:
    """Masked AdamW steps done by the fused kernel inside the optimizer's step pre-hook.

    The pre-hook updates every constrained parameter that has a gradient (moments, step count and weight, in
    the optimizer's own state layout, so ``state_dict`` and resuming work unchanged) and hides its gradient from
    the optimizer for the rest of ``step()``; the post-hook puts the (unmasked) gradient back. Parameters the
    optimizer holds outside ``masks`` are stepped by the optimizer itself, unconstrained.
    """

    def __init__(self, params: dict[str, torch.Tensor], masks: dict[str, torch.Tensor],
                 optimizer: torch.optim.Optimizer, mask_grad: bool = True) -> None:
        if not isinstance(optimizer, torch.optim.AdamW):
            raise ValueError(f"fused constraint needs torch.optim.AdamW, got {type(optimizer).__name__}; "
                             "use the hook path (fused=False) for other optimizers")
        for group in optimizer.param_groups:
            _check_group(group)
        for name, p in params.items():
            plain = type(p.detach()) is torch.Tensor  # not a DTensor shard (FSDP2)
            if not plain or p.dtype != torch.float32 or p.device.type != "cpu" or not p.is_contiguous():
                raise ValueError(f"fused constraint: parameter {name!r} is {p.dtype} on {p.device.type}"
                                 f"{'' if p.is_contiguous() else ', not contiguous'}"
                                 f"{'' if plain else ', a ' + type(p.detach()).__name__}; the kernel needs plain "
                                 "contiguous float32 CPU tensors (use fused=False)")
        self.codes = {id(p): pack_codes(codes_of(masks[n])) for n, p in params.items()}
        self.optimizer = optimizer
        self.mask_grad = mask_grad
        self._hidden: list[tuple[torch.Tensor, torch.Tensor]] = []
        kernel()  # build before the first step, so a missing compiler fails here

    def _state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        """AdamW's state of ``p``, created as torch's fused AdamW creates it (a float32 0-d step)."""
        state = self.optimizer.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if state["step"].dtype != torch.float32:
            state["step"] = state["step"].to(torch.float32)
        return state

    @torch.no_grad()
    def pre_step(self, *_: Any) -> None:
        """One fused constrained AdamW step per parameter group; the stepped parameters' gradients are hidden."""
        self._hidden = []
        for group in self.optimizer.param_groups:
            stepped = [p for p in group["params"] if p.grad is not None and id(p) in self.codes]
            if not stepped:
                continue
            states = [self._state(p) for p in stepped]
            beta1, beta2 = (float(b) for b in group["betas"])
            kernel().sign_adamw_step(stepped, [p.grad.contiguous() for p in stepped],
                                     [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                                     [self.codes[id(p)] for p in stepped], [s["step"] for s in states],
                                     float(group["lr"]), beta1, beta2, float(group["eps"]),
                                     float(group["weight_decay"]), self.mask_grad)
            for p in stepped:
                self._hidden.append((p, p.grad))
                p.grad = None

    def post_step(self, *_: Any) -> None:
        """Give the stepped parameters their gradients back (as the caller left them: unmasked)."""
        for p, grad in self._hidden:
            p.grad = grad
        self._hidden = []
