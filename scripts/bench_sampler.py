"""The sampler before and after the lean decode loop, written to section "sampler" of results/perf.md.

before: ``model.generate`` (``HFSampler(tok, reference=True)``); now: the lean loop of ``opsft.sampling.lean``
(one prefill per prompt, finished rows leave the batch, a preallocated KV cache). Both sample the same
distribution (``tests/test_lean_sampler.py``: every step's logits against a full forward; greedy tokens equal).

- rollouts: 16 arithmetic prompts x 8 samples at temperature 1, 8 and 32 new tokens, as GRPO and OPD draw them;
- greedy scoring: 1000 arithmetic test problems in batches of 256, 64 new tokens, as the claims score.

On a randomly initialised model no row stops before the token budget (the worst case for dropping finished
rows); the trained nano organism's rows stop at their answers. CPU seconds of this process
(``time.process_time``, 1 torch thread: the work done, not waiting on other jobs), the two samplers alternating,
medians over repeats.

    OPSFT_CACHE=... python scripts/bench_sampler.py [--repeats 5] [--out results/perf.md]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from opsft.io import update_markdown_section
from opsft.organism import tasks
from opsft.organism.accuracy import MAX_NEW_TOKENS
from opsft.organism.models import build_model
from opsft.organism.tokenizer import build_tokenizer
from opsft.pretraining import build_organism
from opsft.provenance import provenance
from opsft.sampling.hf import HFSampler

SAMPLERS = ("generate", "lean")


def cpu_ms(work: Callable[[], object], repeats: int) -> dict[str, float]:
    """Median CPU milliseconds of ``work(sampler_is_reference)`` for each sampler, the two alternating."""
    times: dict[str, list[float]] = {name: [] for name in SAMPLERS}
    for r in range(repeats):
        for name in SAMPLERS if r % 2 == 0 else SAMPLERS[::-1]:
            start = time.process_time()
            work(name == "generate")
            times[name].append(1e3 * (time.process_time() - start))
    return {name: statistics.median(v) for name, v in times.items()}


def measure(repeats: int) -> list[tuple[str, str, dict[str, float]]]:
    """(model, workload, {sampler: CPU ms}) rows."""
    torch.set_num_threads(1)
    tok = build_tokenizer()
    models = {"micro, random init": build_model("micro", seed=0), "nano organism base": build_organism("nano").base}
    prompts = [p.prompt for p in tasks.generate("arith", "train", 16, 0)]
    tests = [p.prompt for p in tasks.generate("arith", "test", 1000, 1)]
    rows = []
    for label, model in models.items():
        for budget in (8, 32):
            rows.append((label, f"rollout 16 x 8 x {budget} tokens", cpu_ms(
                lambda ref, m=model, b=budget: HFSampler(tok, reference=ref).sample(m, prompts, 8, 1.0, b, 0),
                repeats)))

        def score(ref: bool, m=model) -> None:
            for i in range(0, len(tests), 256):
                HFSampler(tok, reference=ref).sample(m, tests[i:i + 256], 1, 0.0, MAX_NEW_TOKENS, i)

        rows.append((label, f"greedy scoring, {len(tests)} problems x {MAX_NEW_TOKENS} tokens", cpu_ms(score, 1)))
    return rows


def render(rows: list, repeats: int, prov: dict) -> str:
    """The markdown section."""
    lines = [
        "Sampler, CPU ms (1 thread): `model.generate` against the lean loop (one prefill per prompt, finished rows "
        f"dropped, preallocated cache); rollouts median of {repeats} alternating repeats, scoring one each. "
        "`python scripts/bench_sampler.py`",
        f"commit {(prov['commit'] or '?')[:7]} (dirty: {prov['dirty']}), torch {prov['torch']}, transformers "
        f"{prov['transformers']}, {prov['machine']['cpu']}, {prov['utc']}",
        "",
        "| model | workload | generate | lean | lean / generate |",
        "|---|---|---|---|---|",
    ]
    for label, workload, ms in rows:
        lines.append(f"| {label} | {workload} | {ms['generate']:.1f} | {ms['lean']:.1f} | "
                     f"{ms['lean'] / ms['generate']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="results/perf.md")
    args = parser.parse_args()
    body = render(measure(args.repeats), args.repeats, provenance())
    print(body)
    update_markdown_section(args.out, "sampler", body)


if __name__ == "__main__":
    main()
