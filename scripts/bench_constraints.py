"""Benchmark of OPSFT's costs, written to section "constraints" of results/perf.md.

1. The sign-constrained optimizer step against the plain AdamW step, on the ``micro`` organism and on a
   ~100M-parameter stack of Linear layers: the optimizer step alone, and a whole training step
   (forward + backward + step), for each of torch's AdamW implementations (for-loop, foreach, fused) with the
   hooks, and for the fused kernel (``constrain(..., fused=True)``) against torch's fused AdamW.
   Plain and constrained runs alternate; medians are reported. Beside it, aten::sqrt on positive values
   and on exact zeros: masked weights keep exact-zero second moments, and the for-loop and foreach AdamW
   take their square root every step.

Direction extraction and the stored direction's size are measured by scripts/bench_directions.py (section
"directions").

    python scripts/bench_constraints.py [--quick] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable

import torch

from opsft.constraints import constrain
from opsft.directions import Direction
from opsft.io import update_markdown_section
from opsft.organism.models import build_model


def random_direction(model: torch.nn.Module, density: float = 0.5) -> Direction:
    """Random v with the given share of nonzero entries (signs +-1 with equal odds)."""
    g = torch.Generator().manual_seed(0)
    signs = {}
    for n, p in model.named_parameters():
        v = torch.randint(0, 2, p.shape, generator=g, dtype=torch.int8) * 2 - 1
        signs[n] = v * (torch.rand(p.shape, generator=g) < density).to(torch.int8)
    return Direction(signs)


class ResidualBlock(torch.nn.Module):
    """x + GELU(Linear(x)): a residual stream, as in a transformer."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.linear(x))


def residual_stack(width: int, depth: int) -> torch.nn.Module:
    """depth residual blocks of Linear(width, width): ~depth * width^2 parameters. Without the residual stream a
    24-layer stack's gradients vanish to ~1e-15, and their squares go subnormal in AdamW's second moment, which
    makes torch's fused AdamW step ~4x slower than on gradients of a real training run."""
    torch.manual_seed(0)
    return torch.nn.Sequential(*[ResidualBlock(width) for _ in range(depth)])


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# name -> (torch AdamW options, constrain options): the hooks around each of torch's implementations, and the
# opsft kernel (constrain(..., fused=True)) against torch's fused AdamW as the plain step
ADAMW_IMPLEMENTATIONS: dict[str, tuple[dict[str, bool], dict[str, bool]]] = {
    "for-loop": ({"foreach": False}, {}),  # torch's default on CPU
    "foreach": ({"foreach": True}, {}),
    "fused": ({"fused": True}, {}),  # what opsft.train.make_optimizer builds
    "fused; sign step by opsft kernel": ({"fused": True}, {"fused": True}),
}


def step_ratio(build: Callable[[], torch.nn.Module], batch: Callable[[torch.nn.Module], torch.Tensor],
               repeats: int, implementation: str) -> dict[str, float]:
    """Median seconds of the plain and the sign-constrained AdamW step (alone, and with forward/backward),
    both with the AdamW ``implementation`` named in ADAMW_IMPLEMENTATIONS."""
    models = [build() for _ in range(2)]
    adamw_options, constrain_options = ADAMW_IMPLEMENTATIONS[implementation]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-5, weight_decay=0.1, **adamw_options) for m in models]
    rule = constrain(opts[1], models[1], random_direction(models[1]), mode="sign", **constrain_options).rule
    x = batch(models[0])

    def train_step(m: torch.nn.Module, o: torch.optim.Optimizer) -> None:
        o.zero_grad(set_to_none=False)  # reuse the gradient buffers: 400 MB allocated afresh each step made
        # the 100M train-step times swing by 20% from one run to the next
        out = m(x)
        (out.logits if hasattr(out, "logits") else out).float().square().mean().backward()
        o.step()

    for m, o in zip(models, opts, strict=True):  # warm up: moments allocated, grads present
        train_step(m, o)
    times: dict[str, list[float]] = {k: [] for k in ("opt_plain", "opt_sign", "hooks", "train_plain", "train_sign")}
    for _ in range(repeats):
        for name, i in (("plain", 0), ("sign", 1)):
            times[f"opt_{name}"].append(timed(opts[i].step))
            times[f"train_{name}"].append(timed(lambda i=i: train_step(models[i], opts[i])))
        times["hooks"].append(timed(lambda: (rule.pre_step(), rule.post_step())))
    med = {k: statistics.median(v) for k, v in times.items()}
    med["params"] = sum(p.numel() for p in models[0].parameters())
    return med


def sqrt_seconds(numel: int, repeats: int) -> dict[str, float]:
    """Median seconds of aten::sqrt over ``numel`` fp32 values that are all positive, and all exact zeros."""
    out = torch.empty(numel)
    inputs = {"sqrt_positive": torch.rand(numel) + 0.5, "sqrt_zeros": torch.zeros(numel)}
    return {name: statistics.median(timed(lambda x=x: torch.sqrt(x, out=out)) for _ in range(repeats))
            for name, x in inputs.items()}


def provenance() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    dirty = "dirty" if git("status", "--porcelain") else "clean"
    return (f"commit {git('rev-parse', '--short', 'HEAD')} ({dirty}), torch {torch.__version__}, "
            f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}")


def render(steps: dict[tuple[str, str], dict[str, float]], sqrt: dict[str, float], header: str) -> str:
    numel = int(sqrt["numel"])
    lines = [
        "Sign-constrained AdamW (wd 0.1) against plain AdamW with the same implementation; medians over "
        "alternating repeats. 'hooks alone' times the pre- and post-step hooks by themselves (4 elementwise "
        "passes per weight); 'AdamW part of sign step' is the constrained step minus the hooks: AdamW itself "
        "on the masked gradients, compared with 'plain step' on dense ones. In the 'opsft kernel' rows the masked step "
        "is constrain(..., fused=True): the whole masked AdamW update runs in the pre-hook as one C++ pass per weight "
        "(its 'hooks alone' is that whole step; torch's AdamW then has nothing left to do). v: random signs on half "
        "of the weights.",
        f"{header}",
        "",
        "| model | params | AdamW | plain step (ms) | sign step (ms) | ratio | hooks alone (ms) | hooks / plain step "
        "| AdamW part of sign step (ms) | plain train step (ms) | sign train step (ms) | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, implementation), r in steps.items():
        lines.append(
            f"| {name} | {r['params'] / 1e6:.2f}M | {implementation} | {1e3 * r['opt_plain']:.2f} | "
            f"{1e3 * r['opt_sign']:.2f} | "
            f"{r['opt_sign'] / r['opt_plain']:.2f} | {1e3 * r['hooks']:.2f} | {r['hooks'] / r['opt_plain']:.2f} | "
            f"{1e3 * (r['opt_sign'] - r['hooks']):.2f} | {1e3 * r['train_plain']:.1f} | {1e3 * r['train_sign']:.1f} | "
            f"{r['train_sign'] / r['train_plain']:.3f} |"
        )
    lines += [
        "",
        f"aten::sqrt over {numel} fp32 values (masked weights keep exact-zero second moments): "
        f"all positive {1e3 * sqrt['sqrt_positive']:.2f} ms, all exact zeros {1e3 * sqrt['sqrt_zeros']:.2f} ms "
        f"({sqrt['sqrt_zeros'] / sqrt['sqrt_positive']:.1f}x).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/perf.md")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run (nothing written)")
    args = parser.parse_args()
    width, depth, repeats = (256, 4, 3) if args.quick else (2048, 24, 7)
    tokens = build_model("micro").config.vocab_size
    models = {
        "micro organism (batch 32 x 64 tokens)": (
            lambda: build_model("micro"), lambda m: torch.randint(0, tokens, (32, 64)), repeats * 4),
        f"residual Linear stack {depth} x {width} (batch 64)": (
            lambda: residual_stack(width, depth), lambda m: torch.randn(64, width), repeats),
    }
    steps = {(name, implementation): step_ratio(build, batch, n, implementation)
             for name, (build, batch, n) in models.items() for implementation in ADAMW_IMPLEMENTATIONS}
    sqrt = {"numel": 2**22, **sqrt_seconds(2**22, repeats * 3)}
    body = render(steps, sqrt, provenance())
    print(body)
    if not args.quick:
        update_markdown_section(args.out, "constraints", body)


if __name__ == "__main__":
    main()
