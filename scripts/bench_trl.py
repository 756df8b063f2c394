"""Step time of our trainer against TRL's on the same tiny model, written to section "trl" of results/perf.md.

GRPO and OPD: ``prompts_per_step`` x ``group_size`` samples of ``max_new_tokens`` tokens a step from the model
itself (organism arithmetic prompts; GRPO: the correctness reward; OPD: a second randomly initialised model of
the same size, seed 1, as the teacher); SFT and DFT: ``batch_size`` teacher-style trajectories a step, loss on
the completion only. Every run trains a fresh, randomly initialised ``micro`` model (fp32, AdamW, clip 1.0) on
the same data, with:

- ours: ``opsft.train.train`` with a ``RolloutSource`` (``HFSampler``, the lean decode loop) or a
  ``StaticSource``, on the organism's model as the project trains it (MLP gates and RMS norms on the fused CPU
  kernels of ``opsft.fused_layers``);
- TRL, fp32, no checkpointing: GRPOTrainer / DistillationTrainer / SFTTrainer with ``bf16=False,
  gradient_checkpointing=False`` (TRL's fastest CPU setting);
- TRL defaults: only ``use_cpu=True`` (bf16 autocast and gradient checkpointing on);

TRL's contenders train the stock transformers model (``build_model(..., fused=False)``): the same weights and
math, without the kernels.

OPD has no exact TRL counterpart; the nearest is ``trl.DistillationTrainer`` with ``beta=1.0`` (the stable home
of ``trl.experimental.distillation``; ``trl.experimental.gkd.GKDTrainer`` with ``lmbda=1.0, temperature=1.0``
defers to it, and its collator wants chat messages): fully on-policy student samples, loss the reverse KL to the
teacher over the whole vocabulary at each completion position, KL(pi_S(.|y_<t) || pi_T(.|y_<t)), averaged over
the batch's completion tokens (the teacher's full logits, projected chunk by chunk). Ours
(``ObjectiveConfig(name="opd")``: pure OPD, every token, clip 0.2 / 0.28) scores only the sampled token: the
advantage a_t = log pi_T(y_t) - log pi_S(y_t) in the clipped policy-gradient surrogate, a mean over each
completion's tokens, then over sequences. With one update per batch (ratio 1) its gradient, -a_t grad log
pi_S(y_t), is a one-sample estimate of the gradient of TRL's per-position reverse KL: the same expected
per-token gradient, not the same loss (no vocabulary-sized teacher term; a per-sequence mean). TRL samples one
completion per dataset row, so each prompt fills ``group_size`` consecutive rows, unshuffled: a step is then
``prompts_per_step`` prompts x ``group_size`` samples, as ours. The prompts are plain text (the trainer's
standard format), so our character tokenizer needs no chat template.

A step is the wall time between two consecutive optimizer-step ends (sampling, scoring, forward, backward,
optimizer, and the trainer's bookkeeping). Each run times ``steps`` steps after ``warmup``; the contenders
alternate within each repeat (reversed order on odd repeats); the table shows medians over repeats, and the
median per-repeat ratio to ours. Timings on a busy machine are unreliable: rerun on a quiet one.

    python scripts/bench_trl.py [--quick] [--threads 2] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from opsft.config import ObjectiveConfig, OptimConfig, SourceConfig
from opsft.io import update_markdown_section
from opsft.objectives import make_objective
from opsft.organism import tasks
from opsft.organism.models import build_model, parameter_count
from opsft.organism.tokenizer import build_tokenizer
from opsft.provenance import provenance
from opsft.rewards import reward
from opsft.sampling.hf import HFSampler
from opsft.sources import Example, RolloutSource, StaticSource
from opsft.train import make_optimizer, train

LR = 1e-5
OPTIM = OptimConfig(lr=LR)  # AdamW, weight decay 0.1, betas (0.9, 0.98), clip 1.0: given to TRL as well
GRPO = ObjectiveConfig(name="grpo")  # clip 0.2 / 0.28, no KL, per-sequence mean = TRL loss_type "grpo"
OPD = ObjectiveConfig(name="opd")  # pure OPD (alpha 1), every token, student rollouts, clip 0.2 / 0.28, no KL
TEACHER_SEED = 1  # the OPD teacher: a second random model of the same size
METHODS = ("grpo", "opd", "sft", "dft")
CONTENDERS = ("ours", "TRL fp32, no checkpointing", "TRL defaults")
FASTEST_TRL = CONTENDERS[1]
# ours / TRL's fastest setting as the Speed issue recorded it (clean clone of 44326c9, 2 threads): the old figure
# each new one is read against (OPD was not benchmarked then)
RECORDED = {"commit": "44326c9", "grpo": 1.02, "sft": 0.92, "dft": 0.90}


@dataclass(frozen=True)
class Sizes:
    """One benchmark setting: the model size, the batch geometry (GRPO/OPD: ``prompts_per_step`` x ``group_size`` x
    ``max_new_tokens``; SFT/DFT: ``batch_size``; ``n_problems`` of ``family``) and the timing budget."""

    model: str
    source: SourceConfig
    warmup: int
    steps: int
    repeats: int


FULL = Sizes("micro", SourceConfig(n_problems=256, batch_size=128, prompts_per_step=16, group_size=8, max_new_tokens=8),
             warmup=3, steps=20, repeats=3)
QUICK = Sizes("nano", SourceConfig(n_problems=16, batch_size=8, prompts_per_step=2, group_size=4, max_new_tokens=4),
              warmup=1, steps=2, repeats=1)


class StepClock(TrainerCallback):
    """Records the time of every optimizer-step end; serves our loop's callbacks and a Trainer's alike."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, *_, **__) -> None:
        """Stamp the end of a step (ours: (step, model, optimizer, metrics); Trainer: (args, state, control))."""
        self.ends.append(time.perf_counter())

    def step_times(self, warmup: int) -> list[float]:
        """Seconds between consecutive step ends, the first ``warmup`` intervals dropped."""
        gaps = [b - a for a, b in zip(self.ends, self.ends[1:], strict=False)]
        return gaps[warmup:]


def problems(sizes: Sizes) -> list[tasks.Problem]:
    """The organism's training problems of the source's family, teacher style (prompt, solution, verifier)."""
    return tasks.generate(sizes.source.family, "train", sizes.source.n_problems, 0, style="teacher")


def run_ours(method: str, sizes: Sizes, clock: StepClock) -> None:
    """Our loop: GRPO / OPD on rollouts of the model itself (OPD against the teacher's log-probabilities, as
    ``opsft.runs.make_source`` wires it), SFT/DFT on the problems' solutions."""
    tok, model, src = build_tokenizer(), build_model(sizes.model, seed=0), sizes.source
    if method in ("grpo", "opd"):
        cfg = GRPO if method == "grpo" else OPD
        teacher = build_model(sizes.model, seed=TEACHER_SEED).eval() if method == "opd" else None
        examples = [Example(p.prompt, "", p) for p in problems(sizes)]
        source = RolloutSource(examples, HFSampler(tok), reward, prompts_per_step=src.prompts_per_step,
                               group_size=src.group_size, temperature=src.temperature,
                               max_new_tokens=src.max_new_tokens, seed=0, objective=cfg, teacher=teacher)
        objective = make_objective(cfg)
    else:
        examples = [Example(p.prompt, p.solution, p) for p in problems(sizes)]
        source = StaticSource(examples, tok, src.batch_size, seed=0)
        objective = make_objective(ObjectiveConfig(name=method))
    train(model, make_optimizer(model, OPTIM), source, objective, steps=sizes.warmup + sizes.steps + 1,
          grad_clip=OPTIM.grad_clip, callbacks=[clock])


def trl_trainer(method: str, sizes: Sizes, fastest: bool, output_dir: str, clock: StepClock):
    """TRL's GRPOTrainer, DistillationTrainer (OPD's nearest equivalent: reverse KL, ``beta=1.0``, see the module
    docstring) or SFTTrainer on the same model, data, batch geometry and optimizer settings."""
    import trl
    from datasets import Dataset

    items, src = problems(sizes), sizes.source
    common = dict(output_dir=output_dir, use_cpu=True, report_to=[], max_steps=sizes.warmup + sizes.steps + 1,
                  learning_rate=LR, weight_decay=OPTIM.weight_decay, adam_beta1=OPTIM.betas[0],
                  adam_beta2=OPTIM.betas[1], adam_epsilon=OPTIM.eps, max_grad_norm=OPTIM.grad_clip,
                  lr_scheduler_type="constant", save_strategy="no", logging_strategy="no", disable_tqdm=True,
                  dataloader_num_workers=0, seed=0)
    if fastest:
        common.update(bf16=False, gradient_checkpointing=False)
    model, tok = build_model(sizes.model, seed=0, fused=False), build_tokenizer()
    if method == "grpo":
        def correct(completions: list[str], index: list[int], **_) -> list[float]:
            return [reward(items[i], c) for c, i in zip(completions, index, strict=True)]

        args = trl.GRPOConfig(per_device_train_batch_size=src.prompts_per_step * src.group_size,
                              num_generations=src.group_size, max_completion_length=src.max_new_tokens,
                              temperature=src.temperature, loss_type="grpo",
                              epsilon=GRPO.eps_low, epsilon_high=GRPO.eps_high, beta=GRPO.beta_kl, **common)
        data = Dataset.from_dict({"prompt": [p.prompt for p in items], "index": list(range(len(items)))})
        return trl.GRPOTrainer(model=model, reward_funcs=[correct], args=args, train_dataset=data,
                               processing_class=tok, callbacks=[clock])
    if method == "opd":
        args = trl.DistillationConfig(per_device_train_batch_size=src.prompts_per_step * src.group_size,
                                      max_completion_length=src.max_new_tokens, temperature=src.temperature,
                                      beta=1.0, shuffle_dataset=False, **common)
        data = Dataset.from_dict({"prompt": [p.prompt for p in items for _ in range(src.group_size)]})
        teacher = build_model(sizes.model, seed=TEACHER_SEED, fused=False)
        return trl.DistillationTrainer(model=model, teacher_model=teacher,
                                       args=args, train_dataset=data, processing_class=tok, callbacks=[clock])
    args = trl.SFTConfig(per_device_train_batch_size=src.batch_size, loss_type="nll" if method == "sft" else "dft",
                         **common)
    data = Dataset.from_dict({"prompt": [p.prompt for p in items], "completion": [p.solution for p in items]})
    return trl.SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok, callbacks=[clock])


def time_contender(contender: str, method: str, sizes: Sizes) -> float:
    """Median seconds per step of one run of ``contender`` on ``method``."""
    clock = StepClock()
    if contender == "ours":
        run_ours(method, sizes, clock)
    else:
        with tempfile.TemporaryDirectory() as out:
            trainer = trl_trainer(method, sizes, contender != "TRL defaults", out, clock)
            trainer.remove_callback(PrinterCallback)  # it prints the end-of-training summary
            trainer.train()
    times = clock.step_times(sizes.warmup)
    if len(times) != sizes.steps:
        raise RuntimeError(f"{contender} {method}: timed {len(times)} steps, expected {sizes.steps}")
    return statistics.median(times)


def measure(sizes: Sizes, log: Callable[[str], None] = print) -> dict[tuple[str, str], list[float]]:
    """(method, contender) -> median step seconds of each repeat, contenders alternating."""
    out: dict[tuple[str, str], list[float]] = {(m, c): [] for m in METHODS for c in CONTENDERS}
    for r in range(sizes.repeats):
        order = CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]
        for method in METHODS:
            for contender in order:
                out[method, contender].append(time_contender(contender, method, sizes))
                ms = 1e3 * out[method, contender][-1]
                log(f"repeat {r + 1}/{sizes.repeats} {method:4s} {contender}: {ms:.1f} ms")
    return out


def render(times: dict[tuple[str, str], list[float]], sizes: Sizes, prov: dict, load: tuple[float, float]) -> str:
    """The markdown section: settings, provenance, and one row per method and contender."""
    import trl

    params, src = parameter_count(build_model(sizes.model)), sizes.source
    lines = [
        f"Step time of our trainer against TRL {trl.__version__}, `{sizes.model}` model ({params / 1e6:.2f}M params, "
        f"random init, fp32): GRPO/OPD {src.prompts_per_step} prompts x {src.group_size} samples x "
        f"{src.max_new_tokens} new tokens; SFT/DFT batch {src.batch_size}, completion-only loss. OPD: a second "
        f"random model (seed {TEACHER_SEED}) as the teacher; ours scores the sampled token (advantage "
        "log pi_T - log pi_S), TRL's DistillationTrainer (beta 1.0) the reverse KL over the full vocabulary: the "
        "nearest TRL equivalent, the same expected per-token gradient, not the same loss. Median over "
        f"{sizes.repeats} alternating repeats of the median of {sizes.steps} steps (after {sizes.warmup} warm-up). "
        "`python scripts/bench_trl.py`",
        f"commit {(prov['commit'] or '?')[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, transformers "
        f"{prov['transformers']}, {prov['machine']['cpu']}, {prov['machine']['torch_threads']} threads on "
        f"{prov['machine']['cores']} cores, load average {load[0]:.1f} before / {load[1]:.1f} after, {prov['utc']}",
        "",
        "| method | trainer | ms / step | steps / s | time / ours |",
        "|---|---|---|---|---|",
    ]
    for method in METHODS:
        ours = times[method, "ours"]
        for contender in CONTENDERS:
            mine = times[method, contender]
            ratio = statistics.median(a / b for a, b in zip(mine, ours, strict=True))
            ms = 1e3 * statistics.median(mine)
            lines.append(f"| {method} | {contender} | {ms:.1f} | {1e3 / ms:.2f} | {ratio:.2f} |")
    lines += ["", f"ours / {FASTEST_TRL} (the Speed issue's target: <= 0.75), now and at {RECORDED['commit']} "
              "(recorded):", "", "| method | now | recorded |", "|---|---|---|"]
    for method in METHODS:
        now = statistics.median(a / b for a, b in zip(times[method, "ours"], times[method, FASTEST_TRL], strict=True))
        lines.append(f"| {method} | {now:.2f} | {RECORDED.get(method, '-')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="nano model, tiny batches, one repeat (nothing written)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else FULL
    before = os.getloadavg()[0]
    times = measure(sizes)
    body = render(times, sizes, provenance(), (before, os.getloadavg()[0]))
    print(body)
    if not args.quick:
        update_markdown_section(args.out, "trl", body)


if __name__ == "__main__":
    main()
