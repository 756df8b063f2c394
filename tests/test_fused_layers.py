"""The fused SwiGLU and RMSNorm kernels against float64 references of their formulas (values and gradients), the
same bits at any thread count, and ``fuse`` on whole models: the stock model's logits and gradients, a stock
fallback for bf16, weights and names untouched."""

import copy

import pytest
import torch

from opsft.fused_layers import RMSNorm, SwiGLU, fuse
from opsft.organism.models import build_model


def swiglu_reference(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """silu(g) * u in float64."""
    g = g.double()
    return g * torch.sigmoid(g) * u.double()


def rms_reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """w * x / sqrt(mean(x^2) + eps) over the last dimension, in float64."""
    x = x.double()
    return w.double() * (x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps))


def value_and_grads(fn, inputs: list[torch.Tensor], weight_of_output: torch.Tensor):
    """fn(*inputs) and the gradients of sum(fn(...) * weight_of_output) with respect to every input."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    (out * weight_of_output.to(out.dtype)).sum().backward()
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("shape", [(3, 7, 40), (5, 17), (1, 1)])
def test_swiglu_matches_float64(shape):
    gen = torch.Generator().manual_seed(0)
    g, u, dh = (torch.randn(shape, generator=gen) * 4 for _ in range(3))
    g.view(-1)[0] = -100.0  # exp overflows: s = 0
    out, grads = value_and_grads(SwiGLU.apply, [g, u], dh)
    ref, ref_grads = value_and_grads(swiglu_reference, [g.double(), u.double()], dh.double())
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("shape", [(3, 70, 40), (130, 128), (2, 5, 4, 33), (1, 1)])
def test_rms_norm_matches_float64(shape):
    gen = torch.Generator().manual_seed(1)
    x, dy = torch.randn(shape, generator=gen) * 3, torch.randn(shape, generator=gen)
    w = torch.rand(shape[-1], generator=gen) + 0.5
    out, grads = value_and_grads(lambda a, b: RMSNorm.apply(a, b, 1e-6), [x, w], dy)
    ref, ref_grads = value_and_grads(lambda a, b: rms_reference(a, b, 1e-6), [x.double(), w.double()], dy.double())
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)


def test_same_bits_with_one_and_two_threads():
    gen = torch.Generator().manual_seed(2)
    x, dy, w = torch.randn(700, 96, generator=gen), torch.randn(700, 96, generator=gen), torch.rand(96, generator=gen)
    threads, results = torch.get_num_threads(), []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append((value_and_grads(lambda a, b: RMSNorm.apply(a, b, 1e-6), [x, w], dy),
                            value_and_grads(SwiGLU.apply, [x, dy], w.expand_as(x))))
    finally:
        torch.set_num_threads(threads)
    flat = [[a, *b] for pair in results for a, b in pair]
    assert all(torch.equal(p, q) for p, q in zip(flat[0] + flat[1], flat[2] + flat[3], strict=True))


def test_fused_model_gives_the_stock_models_logits_and_gradients():
    stock, fused = build_model("micro", seed=0, fused=False), build_model("micro", seed=0)
    assert type(fused.model.layers[0].mlp).__name__ == "FusedQwen3MLP"
    assert type(fused.model.norm).__name__ == "FusedQwen3RMSNorm"
    assert type(stock.model.norm).__name__ == "Qwen3RMSNorm"
    ids = torch.randint(3, 100, (6, 30), generator=torch.Generator().manual_seed(3))
    exact = copy.deepcopy(stock).double()
    logits = {name: m(input_ids=ids).logits for name, m in (("fused", fused), ("exact", exact))}
    torch.testing.assert_close(logits["fused"].double(), logits["exact"], atol=1e-5, rtol=1e-5)
    for out in logits.values():
        out.log_softmax(-1)[..., 5].sum().backward()
    for (name, p), q in zip(fused.named_parameters(), exact.parameters(), strict=True):
        scale = q.grad.abs().max().item() + 1e-12
        assert (p.grad.double() - q.grad).abs().max().item() <= 1e-5 * scale + 1e-7, name
    assert list(fused.state_dict()) == list(stock.state_dict())


def test_bf16_and_deepcopies_keep_the_stock_math():
    stock, fused = build_model("nano", seed=1, fused=False), build_model("nano", seed=1)
    ids = torch.randint(3, 100, (2, 9), generator=torch.Generator().manual_seed(4))
    half = copy.deepcopy(fused).to(torch.bfloat16)  # the kernels take float32 only: the stock forward runs
    assert type(half.model.norm).__name__ == "FusedQwen3RMSNorm"
    assert torch.equal(half(input_ids=ids).logits, stock.to(torch.bfloat16)(input_ids=ids).logits)
    assert fuse(fused) is fused and type(fused.model.norm).__name__ == "FusedQwen3RMSNorm"  # fusing twice: as once


def test_under_bf16_autocast_the_gate_takes_the_stock_path():
    stock, fused = build_model("nano", seed=2, fused=False), build_model("nano", seed=2)
    ids = torch.randint(3, 100, (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = fused(input_ids=ids).logits, stock(input_ids=ids).logits
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)
