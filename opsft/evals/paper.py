"""The paper scale's scoring of one model, per problem, so claims pair arms problem by problem as at ``regime``.

- **Math benchmarks** (a recipe's ``[eval] benchmarks``: AIME24/25, HMMT25 Feb/Nov from ``evals/data/``): each
  problem with the ``\\boxed{}`` instruction, k samples at the recipe's temperature / top-p through lm-eval
  (generate_until, every sample kept, math-verify per sample: ``evals/lm_eval_tasks/_organism_generate.yaml``);
  a problem's score is its avg@k. The headline is the unweighted mean of the benchmarks' avg@k
  (``benchmark_mean``); every benchmark has the same number of problems here, so it is also the mean over all
  problems.
- **Code** (``[eval] code``: MBPP+ from ``evals/data/MbppPlus.jsonl``): one greedy completion a problem (MBPP+'s
  usual pass@1), the program extracted by evalplus's ``sanitize`` and run by evalplus on the base and plus
  tests; a problem scores 1 when it passes both.
- **Training set**: greedy accuracy on the first ``train_problems`` rows of the run's own dataset, by the
  training reward (math-verify on the boxed answer).

``limit`` keeps the first problems of each benchmark (the ``paper-tiny`` recipe; the papers use all).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import Any

from opsft.evals.benchmarks import BenchmarkItem, MathProtocol, benchmark_prompt, load_math_benchmark
from opsft.evals.evalplus_adapter import check_solutions, load_mbpp_plus
from opsft.evals.generation import Sampling, generate
from opsft.evals.lm_eval_adapter import LocalTask, lm_eval_output, logged_samples, write_local_tasks
from opsft.sources import Example

CODE_BENCHMARKS: tuple[str, ...] = ("mbpp_plus",)
TASK_PREFIX = "paper_"


def benchmark_items(name: str, limit: int | None) -> list[BenchmarkItem]:
    """The first ``limit`` problems (all when None) of a vendored math benchmark."""
    return load_math_benchmark(name)[:limit]


def math_task(name: str, protocol: MathProtocol, limit: int | None) -> LocalTask:
    """A math benchmark as an lm-eval generation task scored by math-verify on the boxed answer."""
    rows = tuple({"prompt": benchmark_prompt(item, protocol), "answer": item.answer}
                 for item in benchmark_items(name, limit))
    return LocalTask(f"{TASK_PREFIX}{name}", "math_verify", rows)


def math_problem_scores(model: Any, tokenizer: Any, names: Sequence[str], protocol: MathProtocol,
                        sampling: Sampling, limit: int | None) -> dict[str, list[float]]:
    """Per benchmark, each problem's avg@k in file order, sampled and scored through lm-eval."""
    tasks = [math_task(name, protocol, limit) for name in names]
    with tempfile.TemporaryDirectory(prefix="opsft-paper-evals-") as tmp:
        write_local_tasks(tasks, tmp, sampling, until=())
        out = lm_eval_output(model, tokenizer, [t.name for t in tasks], include_path=tmp, batch_size=sampling.batch_size,
                             seed=sampling.seed, log_samples=True)
    return {name: [float(s["avg_at_k"]) for s in logged_samples(out, task.name, len(task.rows))]
            for name, task in zip(names, tasks, strict=True)}


def mbpp_program(prompt: str, completion: str, entry_point: str) -> str:
    """The program evalplus runs for one completion, by evalplus's ``sanitize`` (the code that defines
    ``entry_point`` and what it uses): from the completion alone when that defines the entry point (a chat
    model's fenced answer), else from prompt + completion (a base model continuing the prompt)."""
    from evalplus.sanitize import sanitize

    alone = sanitize(completion, entry_point)
    return alone if f"def {entry_point}(" in alone else sanitize(prompt + completion, entry_point)


def code_problem_scores(model: Any, tokenizer: Any, max_new_tokens: int, limit: int | None,
                        workers: int = 2) -> list[float]:
    """Each MBPP+ problem's greedy pass (1.0 / 0.0: base and plus tests): the program ``mbpp_program`` extracts
    from the completion, run by evalplus on the base and plus inputs; in file order."""
    problems = list(load_mbpp_plus().values())[:limit]
    greedy = Sampling(k=1, temperature=0.0, max_new_tokens=max_new_tokens)
    completions = generate(model, tokenizer, [p["prompt"] for p in problems], greedy)
    programs = [(p["task_id"], mbpp_program(p["prompt"], group[0], p["entry_point"]))
                for p, group in zip(problems, completions, strict=True)]
    dataset = {p["task_id"]: p for p in problems}
    verdicts = check_solutions(dataset, programs, dataset="mbpp", workers=workers)
    return [float(v.plus_ok) for v in verdicts]


def train_problem_scores(model: Any, tokenizer: Any, examples: Sequence[Example], max_new_tokens: int) -> list[float]:
    """Greedy correctness (1.0 / 0.0) of each training example by the training reward."""
    from opsft.rewards import reward

    greedy = Sampling(k=1, temperature=0.0, max_new_tokens=max_new_tokens)
    completions = generate(model, tokenizer, [e.prompt for e in examples], greedy)
    return [reward(e.key, group[0]) for e, group in zip(examples, completions, strict=True)]

