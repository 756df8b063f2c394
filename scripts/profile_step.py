"""Where a training step's time goes, before and after the speed changes, written to section "step_profile" of
results/perf.md.

One step of GRPO, OPD and SFT (``bench_trl``'s geometry: 16 prompts x 8 samples x ``max_new_tokens``, SFT batch
128) on a randomly initialised organism model, split into its phases: the rollout (the sampler), scoring (the
reward and, for OPD, the teacher's log-probabilities), the loss forward, backward + gradient clipping, and the
optimizer step. Two set-ups of the same code, interleaved:

- before: ``model.generate`` as the sampler (``HFSampler(reference=True)``) and the stock transformers layers
  (``build_model(..., fused=False)``);
- now: the lean decode loop (one prefill per prompt, finished rows dropped) and the fused SwiGLU / RMSNorm
  kernels.

Right-padded batches run unmasked in both (``sequence_logits``: not switchable). CPU seconds of this process
(``time.process_time``) at 1 torch thread, so the figures count work done, not waiting on other jobs; medians
over ``steps`` steps after one warm-up. A randomly initialised model rarely emits <eos>, so the rollouts here run
to the token budget and show no gain from dropping finished rows (a trained model's rollouts do).

    python scripts/profile_step.py [--model micro] [--steps 10] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch

from opsft.config import ObjectiveConfig, OptimConfig, SourceConfig
from opsft.io import update_markdown_section
from opsft.objectives import make_objective, token_logprobs
from opsft.organism import tasks
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.provenance import provenance
from opsft.rewards import reward
from opsft.sampling.base import sequence_logits
from opsft.sampling.hf import HFSampler
from opsft.sources import Example, RolloutSource, StaticSource
from opsft.train import make_optimizer

SOURCE = SourceConfig(n_problems=256, batch_size=128, prompts_per_step=16, group_size=8, max_new_tokens=8)
PHASES = ("rollout", "scoring", "loss forward", "backward + clip", "optimizer")
OPTIM = OptimConfig(lr=1e-5)  # bench_trl's: AdamW, weight decay 0.1, clip 1.0
SETUPS = {"before": {"reference": True, "fused": False}, "now": {"reference": False, "fused": True}}


class TimedSampler(HFSampler):
    """An ``HFSampler`` that adds the CPU time of each ``sample`` call to ``clock["rollout"]``."""

    def __init__(self, tokenizer, reference: bool, clock: dict[str, float]):
        super().__init__(tokenizer, reference=reference)
        self.clock = clock

    def sample(self, *args, **kwargs):
        """``HFSampler.sample``, timed."""
        start = time.process_time()
        try:
            return super().sample(*args, **kwargs)
        finally:
            self.clock["rollout"] += time.process_time() - start


def stepper(method: str, model_size: str, setup: dict, source: SourceConfig):
    """A function running one training step of ``method`` and returning its phases' CPU seconds."""
    tok, clock = build_tokenizer(), defaultdict(float)
    model = build_model(model_size, seed=0, fused=setup["fused"])
    problems = tasks.generate(source.family, "train", source.n_problems, 0, style="teacher")
    objective = ObjectiveConfig(name=method)
    if method in ("grpo", "opd"):
        teacher = build_model(model_size, seed=1, fused=setup["fused"]).eval() if method == "opd" else None
        batches = RolloutSource([Example(p.prompt, "", p) for p in problems],
                                TimedSampler(tok, setup["reference"], clock), reward,
                                prompts_per_step=source.prompts_per_step, group_size=source.group_size,
                                temperature=source.temperature, max_new_tokens=source.max_new_tokens, seed=0,
                                objective=objective, teacher=teacher)
    else:
        batches = StaticSource([Example(p.prompt, p.solution, p) for p in problems], tok, source.batch_size, 0)
    loss_fn, optimizer, counter = make_objective(objective), make_optimizer(model, OPTIM), [0]

    def step() -> dict[str, float]:
        clock.clear()
        t0 = time.process_time()
        batch = batches.batch(model, counter[0])
        t1 = time.process_time()
        logp = token_logprobs(sequence_logits(model, batch["input_ids"], batch["attention_mask"]), batch["input_ids"])
        loss, _ = loss_fn(logp, batch)
        t2 = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t3 = time.process_time()
        optimizer.step()
        t4 = time.process_time()
        counter[0] += 1
        return {"rollout": clock["rollout"], "scoring": t1 - t0 - clock["rollout"], "loss forward": t2 - t1,
                "backward + clip": t3 - t2, "optimizer": t4 - t3}

    return step


def measure(model_size: str, steps: int) -> dict[tuple[str, str], dict[str, float]]:
    """(method, setup) -> median CPU ms of each phase and of the whole step."""
    torch.set_num_threads(1)
    out = {}
    for method in ("grpo", "opd", "sft"):
        steppers = {name: stepper(method, model_size, setup, SOURCE) for name, setup in SETUPS.items()}
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in SETUPS}
        for i in range(steps + 1):
            for name, run in steppers.items():
                phases = run()
                if i:
                    samples[name].append(phases)
        for name, rows in samples.items():
            med = {ph: 1e3 * statistics.median(r[ph] for r in rows) for ph in PHASES}
            med["step"] = 1e3 * statistics.median(sum(r.values()) for r in rows)
            out[method, name] = med
    return out


def render(times: dict, model_size: str, steps: int, prov: dict) -> str:
    """The markdown section: settings, provenance, and a row per method and set-up."""
    lines = [
        f"Where a step's time goes (CPU ms, 1 thread, `{model_size}` model, random init; GRPO/OPD 16 prompts x 8 "
        f"samples x {SOURCE.max_new_tokens} new tokens, SFT batch {SOURCE.batch_size}; medians of {steps} steps). "
        "before: `model.generate` and the stock layers; now: the lean sampler and the fused kernels. "
        "`python scripts/profile_step.py`",
        f"commit {(prov['commit'] or '?')[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, "
        f"{prov['machine']['cpu']}, {prov['utc']}",
        "",
        "| method | set-up | step | " + " | ".join(PHASES) + " | now / before |",
        "|---|---|---|" + "---|" * len(PHASES) + "---|",
    ]
    for (method, name), med in times.items():
        ratio = med["step"] / times[method, "before"]["step"]
        cells = " | ".join(f"{med[ph]:.1f} ({100 * med[ph] / med['step']:.0f}%)" for ph in PHASES)
        lines.append(f"| {method} | {name} | {med['step']:.1f} | {cells} | {ratio:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="micro")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    times = measure(args.model, args.steps)
    body = render(times, args.model, args.steps, provenance())
    print(body)
    update_markdown_section(args.out, "step_profile", body)


if __name__ == "__main__":
    main()
