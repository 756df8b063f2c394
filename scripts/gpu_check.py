"""One-GPU smoke check of the GPU path (at most 8 minutes on one GPU; `nox -s gpu`):

1. builds (or loads) the organism;
2. runs GRPO on the organism's base with the vLLM backend: a colocated engine, the policy's weights loaded
   into it before every rollout, the policy trained on the GPU;
3. extracts v = sign(theta_GRPO - theta_0);
4. runs OPSFT: SFT on verified teacher trajectories (the trajectories step) under the sign constraint, and
   checks that every weight moved only along v;
5. evaluates base, GRPO and OPSFT (greedy in-domain accuracy, sampled through the same backend);
6. prints a table with the seconds spent in rollout, training and evaluation.

Any error fails the run with its traceback (exit status 1), so does a run over the time budget; without a GPU or
vLLM it exits with status 2 and says which is missing. ``--backend hf --organism nano --tiny`` runs the same
pipeline on CPU in seconds (tests/test_gpu_check.py).

    python scripts/gpu_check.py [--organism micro] [--backend vllm|hf] [--tiny] [--budget-s 480]
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from opsft.config import ObjectiveConfig, OptimConfig
from opsft.constraints import constrain
from opsft.directions import Direction, extract
from opsft.objectives import make_objective
from opsft.organism import tasks
from opsft.organism.accuracy import MAX_NEW_TOKENS
from opsft.pretraining import Organism, build_organism
from opsft.rewards import reward
from opsft.sampling.base import Sampler
from opsft.sampling.hf import HFSampler
from opsft.sampling.vllm import EngineSettings, VLLMSampler, vllm_unavailable_reason
from opsft.sources import Example, RolloutSource, StaticSource
from opsft.train import make_optimizer, train
from opsft.trajectories import TrajectoryParams, make_trajectories, teacher_identity

CATEGORIES = ("rollout", "train", "eval")


class CheckFailed(RuntimeError):
    """The GPU path ran but produced something wrong (a constraint broken, no update, over budget)."""


@dataclass(frozen=True)
class Sizes:
    """How much the check trains and evaluates. ``data``: "teacher" = verified teacher trajectories (the
    trajectories step), "reference" = the task generator's solutions (for organisms whose teacher is too weak)."""

    grpo_steps: int
    prompts_per_step: int
    group_size: int
    sft_steps: int
    batch_size: int
    n_problems: int
    eval_n: int
    max_new_tokens: int = MAX_NEW_TOKENS
    lr_rl: float = 1e-5
    lr_sft: float = 1e-5
    data: str = "teacher"


FULL = Sizes(grpo_steps=40, prompts_per_step=16, group_size=8, sft_steps=60, batch_size=64, n_problems=256, eval_n=200)
TINY = Sizes(grpo_steps=2, prompts_per_step=4, group_size=2, sft_steps=2, batch_size=4, n_problems=8, eval_n=8,
             max_new_tokens=16, data="reference")


class Clock:
    """Seconds per (phase, category); every phase also keeps its own wall time under "total"."""

    def __init__(self) -> None:
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(self, phase: str, category: str, seconds: float) -> None:
        """Charge ``seconds`` of ``phase`` to ``category`` (and to the phase's total)."""
        self.seconds[phase][category] += seconds
        if category != "total":
            self.seconds[phase]["total"] += seconds

    @contextmanager
    def timed(self, phase: str, category: str = "total") -> Iterator[None]:
        """Charge the block's wall time to ``category`` of ``phase``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, category, time.perf_counter() - t0)


class StepClock:
    """Train-loop callback: a step's batch time (sampling and scoring, for rollouts) counts as rollout, the rest
    (forward, backward, optimizer and constraint hooks) as training."""

    def __init__(self, clock: Clock, phase: str, batch_category: str):
        self.clock, self.phase, self.batch_category = clock, phase, batch_category

    def on_step_end(self, step: int, model, optimizer, metrics: dict) -> None:
        """Charge the step's times."""
        self.clock.add(self.phase, self.batch_category, metrics["t_batch"])
        self.clock.add(self.phase, "train", metrics["t_step"] - metrics["t_batch"])


class OnDevice:
    """A batch source whose batches are moved to ``device`` (the sources build rewards and SFT batches on the CPU)."""

    def __init__(self, source: RolloutSource | StaticSource, device: torch.device):
        self.source, self.device = source, device

    def batch(self, model: torch.nn.Module, step: int) -> dict[str, torch.Tensor]:
        """The wrapped source's batch, on the device."""
        return {k: v.to(self.device) for k, v in self.source.batch(model, step).items()}


def make_sampler(org: Organism, backend: str, workdir: Path) -> Sampler:
    """The rollout sampler: a colocated vLLM engine built from the organism's base (saved as a Hugging Face
    folder), or HF generate."""
    if backend == "hf":
        return HFSampler(org.tokenizer)
    folder = workdir / "base-hf"
    org.base.save_pretrained(folder)
    org.tokenizer.save_pretrained(folder)
    return VLLMSampler.from_folder(folder, org.tokenizer, EngineSettings(gpu_memory_utilization=0.2, enforce_eager=True))


def greedy_accuracy(model: torch.nn.Module, sampler: Sampler, problems: list[tasks.Problem], max_new_tokens: int) -> float:
    """Share of ``problems`` whose greedy completion verifies (sampled through ``sampler``)."""
    texts = sampler.sample(model, [p.prompt for p in problems], 1, 0.0, max_new_tokens, seed=0).texts
    return sum(tasks.is_correct(p, t) for p, t in zip(problems, texts, strict=True)) / len(problems)


def run_grpo(org: Organism, sampler: Sampler, sizes: Sizes, device: torch.device, clock: Clock) -> torch.nn.Module:
    """GRPO from the organism's base on ``arith`` training prompts; returns the trained policy."""
    policy = copy.deepcopy(org.base).to(device)
    problems = tasks.generate("arith", "train", sizes.n_problems, 0, style="teacher")
    objective = ObjectiveConfig(name="grpo")
    source = RolloutSource([Example(p.prompt, "", p) for p in problems], sampler, reward,
                           prompts_per_step=sizes.prompts_per_step, group_size=sizes.group_size, temperature=1.0,
                           max_new_tokens=sizes.max_new_tokens, seed=0, objective=objective)
    optimizer = make_optimizer(policy, OptimConfig(lr=sizes.lr_rl))
    train(policy, optimizer, OnDevice(source, device), make_objective(objective), steps=sizes.grpo_steps,
          grad_clip=1.0, callbacks=[StepClock(clock, "GRPO", "rollout")], desc="gpu-check grpo")
    return policy


def sft_examples(org: Organism, sizes: Sizes, workdir: Path, clock: Clock) -> list[Example]:
    """OPSFT's data: verified teacher trajectories written by the trajectories step (HF sampling of the
    teacher), or the generator's reference solutions."""
    problems = tasks.generate("arith", "train", sizes.n_problems, 0, style="teacher")
    if sizes.data == "reference":
        return [Example(p.prompt, p.solution, p) for p in problems]
    with clock.timed("teacher trajectories", "rollout"):
        done = make_trajectories([Example(p.prompt, "", p) for p in problems], HFSampler(org.tokenizer), org.teacher,
                                 workdir / "trajectories.jsonl", TrajectoryParams(max_new_tokens=sizes.max_new_tokens),
                                 teacher_id=teacher_identity(org.teacher))
    examples = done.examples({p.prompt: p for p in problems})
    if not examples:
        raise CheckFailed(f"the teacher verified none of {len(problems)} problems: no OPSFT data")
    return examples


def run_opsft(org: Organism, v: Direction, examples: list[Example], sizes: Sizes, device: torch.device,
              clock: Clock) -> torch.nn.Module:
    """Sign-constrained SFT from the organism's base along ``v``; checks sign(theta - theta_0) is in {0, v}."""
    model = copy.deepcopy(org.base).to(device)
    optimizer = make_optimizer(model, OptimConfig(lr=sizes.lr_sft))
    handle = constrain(optimizer, model, v, mode="sign")
    source = StaticSource(examples, org.tokenizer, sizes.batch_size, seed=0)
    try:
        train(model, optimizer, OnDevice(source, device), make_objective(ObjectiveConfig(name="sft")),
              steps=sizes.sft_steps, grad_clip=1.0, callbacks=[StepClock(clock, "OPSFT", "train")], desc="gpu-check opsft")
    finally:
        handle.remove()
    base = dict(org.base.named_parameters())
    for name, p in model.named_parameters():
        moved = torch.sign(p.detach().cpu() - base[name].detach())
        allowed = v.signs[name].to(moved.dtype)
        if bool(((moved != 0) & (moved != allowed)).any()):
            raise CheckFailed(f"OPSFT moved {name} against v (or where v = 0)")
    return model


def run_check(organism: str, backend: str, sizes: Sizes, workdir: Path, device: torch.device) -> dict:
    """The whole check; returns the clock's seconds and the accuracies (fraction) of base, GRPO and OPSFT."""
    clock = Clock()
    with clock.timed("build organism"):
        org = build_organism(organism)
    with clock.timed(f"start {backend} sampler"):
        sampler = make_sampler(org, backend, workdir)
    policy = run_grpo(org, sampler, sizes, device, clock)
    with clock.timed("extract v"):
        v = extract(org.base, copy.deepcopy(policy).cpu(), rule="fp32")
    if v.fraction_nonzero == 0:
        raise CheckFailed("GRPO changed no weight: v is all zero")
    examples = sft_examples(org, sizes, workdir, clock)
    opsft = run_opsft(org, v, examples, sizes, device, clock)
    problems = tasks.generate("arith", "test", sizes.eval_n, 1)
    accuracy = {}
    for name, model in (("base", copy.deepcopy(org.base).to(device)), ("GRPO", policy), ("OPSFT", opsft)):
        with clock.timed("evaluate", "eval"):
            accuracy[name] = greedy_accuracy(model, sampler, problems, sizes.max_new_tokens)
    return {"seconds": {phase: dict(c) for phase, c in clock.seconds.items()}, "accuracy": accuracy,
            "v_nonzero": v.fraction_nonzero, "backend": backend, "organism": organism, "device": str(device)}


def render(report: dict) -> str:
    """The check's tables: seconds per phase and category, then the accuracies."""
    lines = [f"GPU-path check: organism {report['organism']}, backend {report['backend']}, device {report['device']}",
             "", "| phase | rollout s | train s | eval s | total s |", "|---|---|---|---|---|"]
    totals: dict[str, float] = defaultdict(float)
    for phase, cats in report["seconds"].items():
        cells = [f"{cats[c]:.1f}" if c in cats else "-" for c in CATEGORIES]
        lines.append(f"| {phase} | {' | '.join(cells)} | {cats.get('total', 0.0):.1f} |")
        for c, s in cats.items():
            totals[c] += s
    lines.append(f"| all | {' | '.join(f'{totals[c]:.1f}' for c in CATEGORIES)} | {totals['total']:.1f} |")
    lines += ["", f"v: {100 * report['v_nonzero']:.2f}% of weights nonzero", "",
              "| model | in-domain greedy accuracy % |", "|---|---|"]
    lines += [f"| {name} | {100 * acc:.1f} |" for name, acc in report["accuracy"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when it passed, 1 on a failure (traceback printed), 2 when the GPU path is unavailable."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--organism", default="micro")
    parser.add_argument("--backend", choices=("vllm", "hf"), default="vllm")
    parser.add_argument("--tiny", action="store_true", help="a few steps of everything (CPU tests)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="fail when the whole check takes longer")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.backend == "vllm":
        reason = vllm_unavailable_reason()
        if reason is not None:
            print(f"gpu_check: the GPU path cannot run here: {reason}", file=sys.stderr)
            return 2
    device = torch.device("cuda" if args.backend == "vllm" else "cpu")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="opsft-gpu-check-") as scratch:
        report = run_check(args.organism, args.backend, TINY if args.tiny else FULL, args.workdir or Path(scratch), device)
    print(render(report))
    wall = time.perf_counter() - t0
    if wall > args.budget_s:
        raise CheckFailed(f"the check took {wall:.0f} s, over its budget of {args.budget_s:.0f} s")
    print(f"\ngpu_check passed in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
