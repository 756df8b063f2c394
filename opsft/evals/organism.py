"""The organism's task families in the evaluators' formats: lm-eval local tasks and an evalplus dataset."""

from __future__ import annotations

from collections.abc import Sequence

from opsft.evals.evalplus_adapter import Problem as CodeProblem
from opsft.evals.lm_eval_adapter import LocalTask, Template
from opsft.organism import tasks

# Extra inputs of the evalplus "plus" tests, beyond each problem's own tests.
PLUS_INPUTS: tuple[int, ...] = tuple(range(-25, 26))


def template_of(problem: tasks.Problem) -> Template:
    """Which lm-eval template scores a family: multiple choice by log-likelihood, every generated answer by the
    organism's own verifier (``exact_match``: ``tasks.answer_is_correct``, as its rewards and its in-house
    scorer judge it)."""
    return "multiple_choice" if problem.choices else "exact_match"


def local_task(family: str, problems: Sequence[tasks.Problem]) -> LocalTask:
    """An lm-eval task ``organism_FAMILY`` over the problems (rows: prompt, answer[, choices, label])."""
    if not problems:
        raise ValueError(f"family {family!r}: no problems")
    template = template_of(problems[0])
    rows = tuple(
        {"prompt": p.prompt, "answer": p.answer}
        | ({"choices": list(p.choices), "label": p.label} if template == "multiple_choice" else {})
        for p in problems
    )
    return LocalTask(name=f"organism_{family}", template=template, rows=rows)


def code_problems(problems: Sequence[tasks.Problem]) -> list[CodeProblem]:
    """The ``code`` family in evalplus format: base tests are the problem's own inputs, plus adds PLUS_INPUTS."""
    out = []
    for index, p in enumerate(problems):
        if p.family != "code" or not p.tests:
            raise ValueError(f"problem {index} is not a code problem with tests (family {p.family!r})")
        base = [x for x, _ in p.tests]
        out.append({
            "task_id": f"Organism/{index}",
            "prompt": p.prompt,
            "entry_point": "f",
            "canonical_solution": p.solution,
            "base_input": [[x] for x in base],
            "plus_input": [[x] for x in PLUS_INPUTS if x not in base],
            "atol": 0,
            "contract": "",
        })
    return out
