"""Fused CPU kernels for two elementwise layers of Qwen3 / Qwen2 / Llama blocks: the SwiGLU gate of the MLP,
silu(gate) * up, and RMSNorm, w * x / sqrt(mean(x^2) + eps); forward and backward each in one pass
(``csrc/fused_layers.cpp``, formulas there).

Eager torch runs them as chains of elementwise kernels (SwiGLU: 2 forward, 3 backward; RMSNorm: 5 and about
10), each a full pass over memory. On the organism's models (hidden 128-320) those passes cost a third of a
training step on the CPU; the kernels take most of that away (``scripts/bench_trl.py``).

``fuse(model)`` swaps the classes of a model's MLP and RMSNorm modules for subclasses whose forward calls the
kernels on contiguous-able float32 CPU tensors and the stock forward otherwise (bf16, GPU), so a fused model
still moves to a GPU, casts and saves as before (the weights and their names are untouched). The results equal
the stock layers' up to float rounding (tested against float64 references).
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

import torch

from opsft.extensions import build

# the stock classes whose forward is exactly silu(gate_proj(x)) * up_proj(x) -> down_proj (with act "silu"), and
# w * (x * rsqrt(mean(x^2) + eps)) over the last dimension (Gemma's 1 + w norm is not among them)
MLP_CLASSES = ("Qwen3MLP", "Qwen2MLP", "LlamaMLP")
NORM_CLASSES = ("Qwen3RMSNorm", "Qwen2RMSNorm", "LlamaRMSNorm")


@cache
def kernel() -> ModuleType:
    """The compiled extension ``csrc/fused_layers.cpp`` (``opsft.extensions.build``)."""
    return build("fused_layers")


def fusable(t: torch.Tensor) -> bool:
    """Whether the kernels take ``t``: float32 on the CPU."""
    return t.device.type == "cpu" and t.dtype == torch.float32


class SwiGLU(torch.autograd.Function):
    """h = silu(g) * u, with its gradient (dg, du) in one pass."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """silu(gate) * up, elementwise."""
        gate, up = gate.contiguous(), up.contiguous()
        ctx.save_for_backward(gate, up)
        return kernel().swiglu_forward(gate, up)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """dg = dh u s (1 + g (1 - s)), du = dh silu(g), s = sigmoid(g)."""
        gate, up = ctx.saved_tensors
        dg, du = kernel().swiglu_backward(grad.contiguous(), gate, up)
        return dg, du


class RMSNorm(torch.autograd.Function):
    """y = w * (x / sqrt(mean(x^2) + eps)) over the last dimension, with (dx, dw) in one pass."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """The normalised, scaled ``x``."""
        x = x.contiguous()
        y, rstd = kernel().rms_norm_forward(x, weight.contiguous(), eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        """dx = r (w dy - x r c), c = r mean(w dy x); dw = sum over rows of dy x r."""
        x, weight, rstd = ctx.saved_tensors
        dx, dw = kernel().rms_norm_backward(grad.contiguous(), x, weight.contiguous(), rstd)
        return dx, dw, None


def fused_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    """The MLP with its gate fused where the kernels take the projections (float32 on the CPU; under bf16
    autocast they are bf16), else the stock gate."""
    gate, up = self.gate_proj(x), self.up_proj(x)
    hidden = SwiGLU.apply(gate, up) if fusable(gate) and fusable(up) else self.act_fn(gate) * up
    return self.down_proj(hidden)


def fused_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """The RMS norm by the kernel where it applies (float32 input and weight on the CPU), else the stock one."""
    if not (fusable(hidden_states) and fusable(self.weight)):
        return super(type(self), self).forward(hidden_states)
    return RMSNorm.apply(hidden_states, self.weight, self.variance_epsilon)


@cache
def fused_class(cls: type) -> type:
    """The subclass of a stock MLP or RMSNorm class whose forward calls the kernels."""
    forward = fused_mlp_forward if cls.__name__ in MLP_CLASSES else fused_norm_forward
    return type(f"Fused{cls.__name__}", (cls,), {"forward": forward, "__module__": __name__})


def fuse(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every stock SwiGLU MLP (its config's ``hidden_act`` "silu") and RMSNorm module switched, in place, to its
    fused subclass; returns it. Modules of other classes, and an already fused model, are left as they are."""
    for module in model.modules():
        name = type(module).__name__
        silu = getattr(getattr(module, "config", None), "hidden_act", None) == "silu"
        if (name in MLP_CLASSES and silu) or name in NORM_CLASSES:
            module.__class__ = fused_class(type(module))
    return model
