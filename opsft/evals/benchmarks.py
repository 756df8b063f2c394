"""The real math benchmarks (AIME 2024/2025, HMMT Feb/Nov 2025) and the papers' protocol over them.

Protocol: each problem gets the ``\\boxed{}`` instruction suffix, k completions are sampled at a
configurable temperature / top-p, each benchmark is scored by avg@k with math-verify, and the headline is
the unweighted mean of the four benchmarks' avg@k.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from opsft.evals.math import MathScore, score_completions
from opsft.evals.paths import data_file

MATH_BENCHMARKS: tuple[str, ...] = ("aime24", "aime25", "hmmt25_feb", "hmmt25_nov")
BOXED_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."

# A function from (prompts, k) to k completions per prompt: an HF model, vLLM, or a test double.
Completer = Callable[[Sequence[str], int], list[list[str]]]


@dataclass(frozen=True)
class BenchmarkItem:
    """One benchmark problem with id and gold answer normalised to strings."""

    id: str
    problem: str
    answer: str


def load_math_benchmark(name: str, path: str | Path | None = None) -> list[BenchmarkItem]:
    """Rows of ``evals/data/NAME.jsonl`` (or ``path``): ids and answers may be int or str in the files."""
    path = Path(path) if path is not None else data_file(f"{name}.jsonl")
    items = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not JSON ({err})") from err
        for key in ("id", "problem", "answer"):
            if not isinstance(row.get(key), str | int) or isinstance(row.get(key), bool):
                raise ValueError(f"{path}:{lineno}: key {key!r} missing or not a string/integer")
        items.append(BenchmarkItem(id=str(row["id"]), problem=row["problem"], answer=str(row["answer"]).strip()))
    if not items:
        raise ValueError(f"{path}: no rows")
    return items


@dataclass(frozen=True)
class MathProtocol:
    """The sampling protocol of the math benchmarks; defaults are the common reasoning-model setting."""

    k: int = 16
    temperature: float = 0.6
    top_p: float = 0.95
    suffix: str = BOXED_SUFFIX
    timeout_s: float = 5.0


def benchmark_prompt(item: BenchmarkItem, protocol: MathProtocol) -> str:
    """The problem statement followed by the protocol's ``\\boxed{}`` instruction."""
    return item.problem + protocol.suffix


def score_math_benchmarks(
    complete: Completer, protocol: MathProtocol, names: Sequence[str] = MATH_BENCHMARKS
) -> dict[str, MathScore]:
    """avg@k (and the other math metrics) of each named benchmark under ``protocol``."""
    scores = {}
    for name in names:
        items = load_math_benchmark(name)
        completions = complete([benchmark_prompt(item, protocol) for item in items], protocol.k)
        scores[name], _ = score_completions(completions, [item.answer for item in items], protocol.timeout_s)
    return scores


def benchmark_mean(scores: dict[str, MathScore]) -> float:
    """The papers' headline: the unweighted mean of the benchmarks' avg@k, (1/B) sum_b avg@k_b."""
    return sum(score.avg for score in scores.values()) / len(scores)
