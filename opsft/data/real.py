"""Local real-data files in the schemas the papers train on, read into prompts with verifiable answers.

Supported (JSON lines or parquet; the schema is recognised by its fields):
- DeepMath-103K: ``question``, ``final_answer`` (and ``r1_solution_1`` as an SFT trajectory when present);
- DAPO-Math-17k: ``prompt`` (chat messages), ``reward_model.ground_truth``;
- Eurus-2-RL-Data: ``prompt`` (chat messages), ``ability`` (math | coding), ``reward_model.ground_truth``
  (for coding, a JSON string with ``inputs``/``outputs`` test lists).
Nothing is fetched: the file must be on local disk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from opsft.sources import Example

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class RealProblem:
    """A real problem's gold: a math answer, or code test cases (``kind == "code"``)."""

    answer: str
    kind: str = "math"
    tests: dict | None = None


def read_rows(path: str | Path) -> list[dict]:
    """All rows of a local ``.jsonl``/``.json`` or ``.parquet`` file as dicts."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"dataset file not found: {path}")
    if path.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(path).to_dict(orient="records")
    rows = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}:{i}: not valid JSON ({err.msg})") from err
    return rows


def _user_text(messages: object, where: str) -> str:
    """The content of the first user message of a chat-formatted prompt."""
    for m in list(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            return str(m["content"])
    raise ValueError(f"{where}: 'prompt' holds no user message")


def row_to_example(row: dict, where: str) -> Example:
    """One row of a known schema as an Example (prompt, optional trajectory, RealProblem gold)."""
    if "question" in row and "final_answer" in row:  # DeepMath-103K
        return Example(str(row["question"]) + BOXED_INSTRUCTION, str(row.get("r1_solution_1") or ""),
                       RealProblem(str(row["final_answer"])))
    if "prompt" in row and "reward_model" in row:  # DAPO-Math-17k / Eurus-2-RL-Data
        gold = row["reward_model"].get("ground_truth")
        if gold is None:
            raise KeyError(f"{where}: reward_model has no 'ground_truth'")
        prompt = _user_text(row["prompt"], where)
        if row.get("ability") == "coding":
            tests = json.loads(gold) if isinstance(gold, str) else dict(gold)
            if not {"inputs", "outputs"} <= tests.keys():
                raise KeyError(f"{where}: coding ground_truth needs 'inputs' and 'outputs'")
            return Example(prompt, "", RealProblem("", kind="code", tests=tests))
        return Example(prompt, "", RealProblem(str(gold)))
    if isinstance(row.get("prompt"), str) and "completion" in row:  # teacher trajectories (opsft.trajectories)
        return Example(row["prompt"], str(row["completion"]),
                       RealProblem(str(row.get("answer") or ""), kind=row.get("kind", "math"), tests=row.get("tests")))
    raise KeyError(f"{where}: unknown schema with fields {sorted(row)}; expected DeepMath-103K "
                   "(question, final_answer), DAPO/Eurus (prompt, reward_model) or teacher trajectories "
                   "(prompt, completion)")


def load_examples(path: str | Path, limit: int | None = None) -> list[Example]:
    """The first ``limit`` rows (all when None) of a local dataset file as Examples."""
    rows = read_rows(path)[:limit]
    return [row_to_example(r, f"{path}: row {i + 1}") for i, r in enumerate(rows)]
