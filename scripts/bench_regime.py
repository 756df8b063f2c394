"""How long the `regime` scale's runs take on one core, and how far that is from the fp32 floor of this CPU; written
to section ``regime`` of results/perf.md.

The `regime` claims train the `small` student (7.4M parameters): GRPO and OPD 100 steps of 16 prompts x 8 samples
x 40 new tokens, SFT 400 steps of batch 64 (``opsft.calibrate.method_config`` with ``ablations.calibration``'s
long_sft row), and score each run greedily on up to 1000 problems a family. This measures, at the pinned thread
count of every cached computation (1):

- a training step of each method on a randomly initialised `small` model with the real pieces (the rollout
  source with the lean sampler, the objective, AdamW), split into phases as ``profile_step.py`` does; a random
  model never emits <eos>, so its rollouts run to the full 40 tokens: an upper bound on a trained model's;
- the matrix-multiply work of one step, counted by ``torch.utils.flop_counter.FlopCounterMode`` (every mm/bmm/
  attention of the forward and backward and of the rollout), and the fp32 GEMM rate of this core on the model's
  own shapes (the best of ``torch.mm`` at the step's token count against each weight shape): their ratio is the
  step's floor, the time of its matmuls alone at the best rate this core reaches on them;
- greedy scoring of 1000 held-out arith problems with the claims' scorer of record (lm-eval:
  ``evals.organism_scores.lm_eval_scored``).

A whole run is projected as steps x the median step (the real runs add snapshots, checkpoints and metrics).

    python scripts/bench_regime.py [--steps 5] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from profile_step import stepper
from torch.utils.flop_counter import FlopCounterMode

from ablations.calibration import LONG_SFT, SCALES
from opsft.calibrate import TEST_DRAW_SEED, method_config, row_steps
from opsft.evals.organism_scores import lm_eval_scored
from opsft.io import update_markdown_section
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.provenance import provenance
from opsft.threads import CACHED_THREADS

ORGANISM = "small"
METHODS = ("grpo", "opd", "sft")
SCORED = 1000
# The targets (seconds, one core) and the times recorded before this benchmark existed (stop 28, real
# `small` runs of the reference job, partly under load).
TARGETS = {"grpo": 240.0, "sft": 270.0, "scoring": 30.0}
RECORDED = {"grpo": 363.0, "opd": 740.0, "sft": 504.0}


def regime_sources() -> dict[str, tuple]:
    """method -> (SourceConfig, steps) of the regime's runs (the long_sft row at lr 1e-4, `full` sizes)."""
    row, scale = LONG_SFT[0], SCALES["full"]
    return {m: (method_config(m, row, scale, 0, ORGANISM).source, row_steps(row, scale, m)) for m in METHODS}


GEMM_ROWS = 2048  # rows of the GEMMs timed for the rate: about an SFT batch's tokens (64 x 43 at regime)


def gemm_rate(tokens: int, model: torch.nn.Module) -> float:
    """The best fp32 GFLOP/s of ``torch.mm`` on this core over the model's weight shapes at ``tokens`` rows
    (the forward's x @ W^T; best of 5 after a warm-up)."""
    shapes = {tuple(p.shape) for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n}
    best = 0.0
    for out_f, in_f in shapes:
        x, w = torch.randn(tokens, in_f), torch.randn(in_f, out_f)
        torch.mm(x, w)
        seconds = min(_seconds(lambda x=x, w=w: torch.mm(x, w)) for _ in range(5))
        best = max(best, 2 * tokens * in_f * out_f / seconds / 1e9)
    return best


def _seconds(fn) -> float:
    """Wall seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def step_flops(step) -> float:
    """Matmul FLOPs of one call of ``step`` (rollout, loss forward and backward), as FlopCounterMode counts them."""
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return float(counter.get_total_flops())


def measure_steps(steps: int) -> dict[str, dict]:
    """Per method: median phase and step seconds over ``steps`` steps (after one warm-up), matmul FLOPs of a
    step and the run's number of steps."""
    out = {}
    for method, (source, run_steps) in regime_sources().items():
        step = stepper(method, ORGANISM, {"reference": False, "fused": True}, source)
        step()
        flops = step_flops(step)
        rows = [step() for _ in range(steps)]
        phases = {ph: statistics.median(r[ph] for r in rows) for ph in rows[0]}
        seconds = statistics.median(sum(r.values()) for r in rows)
        out[method] = {"phases": phases, "step": seconds, "flops": flops, "run_steps": run_steps}
    return out


def measure_scoring(tokenizer) -> float:
    """Seconds of greedy scoring of SCORED held-out arith problems on a random-init `small` model (never stops
    early: the worst case)."""
    model = build_model(ORGANISM, seed=0, fused=True).eval()
    problems = tasks.generate("arith", "test", SCORED, TEST_DRAW_SEED)
    return _seconds(lambda: lm_eval_scored(model, tokenizer, {"in_domain": problems}))


def render(steps: dict, rate: float, scoring: float, prov: dict) -> str:
    """The markdown section."""
    lines = [
        f"`regime` runs on one core: the `{ORGANISM}` student (random init, so rollouts run to the full 40-token "
        f"budget), {CACHED_THREADS} torch thread, real rollout source, objective and AdamW (`profile_step.stepper`); "
        "CPU seconds per step (median), matmul GFLOP per step counted by FlopCounterMode, and the floor: those "
        f"FLOPs at the best fp32 `torch.mm` rate this core reached on the model's own shapes ({rate:.0f} GFLOP/s). "
        "A run is projected as steps x step. `python scripts/bench_regime.py`",
        f"commit {(prov['commit'] or '?')[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, "
        f"{prov['machine']['cpu']}, load average {os.getloadavg()[0]:.1f} at the end, {prov['utc']}",
        "",
        "| method | steps | s / step | of which rollout + scoring | GFLOP / step | GFLOP/s reached | share of "
        "the mm rate | run, projected (s) | floor of the run (s) | target (s) | recorded before (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method, m in steps.items():
        sampled = m["phases"]["rollout"] + m["phases"]["scoring"]
        reached = m["flops"] / m["step"] / 1e9
        lines.append(
            f"| {method} | {m['run_steps']} | {m['step']:.3f} | {sampled:.3f} | {m['flops'] / 1e9:.1f} | "
            f"{reached:.0f} | {100 * reached / rate:.0f}% | {m['run_steps'] * m['step']:.0f} | "
            f"{m['run_steps'] * m['flops'] / rate / 1e9:.0f} | {TARGETS.get(method, '-')} | "
            f"{RECORDED.get(method, '-')} |")
    lines += ["", f"Greedy scoring of {SCORED} held-out arith problems through lm-eval (random init, 1 thread): "
              f"{scoring:.1f} s (target {TARGETS['scoring']:.0f} s)."]
    return "\n".join(lines)


def main() -> None:
    """Measure and write the section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    torch.set_num_threads(CACHED_THREADS)
    steps = measure_steps(args.steps)
    rate = gemm_rate(GEMM_ROWS, build_model(ORGANISM, seed=0, fused=True))
    body = render(steps, rate, measure_scoring(build_tokenizer()), provenance())
    print(body)
    update_markdown_section(args.out, "regime", body)


if __name__ == "__main__":
    main()
